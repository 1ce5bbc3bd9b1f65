"""The portable trainers on CUDA against the same trainers on CPU: the same trajectory to
float32 rounding (onnxruntime-gpu and a GPU; skipped elsewhere, CI included).

On a GPU machine, after ``tools/gpu-setup.sh``: ``python -m pytest tests/test_cuda.py``.
"""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from ortbench.training import (
    ElasticLearningPenalty,
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
    SquareLearningLoss,
)
from ortbench.training.runtime.build import cuda_loads

pytestmark = pytest.mark.skipif(
    "CUDAExecutionProvider" not in onnxruntime.get_available_providers() or not cuda_loads(),
    reason="needs onnxruntime-gpu and a GPU",
)

#: A learning rate that changes every epoch, and one with a momentum state (at 0.01, batch
#: 1, the CPU run itself diverges for a while, and float32 rounding then parts the runs).
RATES = {
    "invscaling": lambda: LearningRateSGD(0.02, learning_rate="invscaling", power_t=0.5),
    "nesterov": lambda: LearningRateSGDNesterov(0.001, momentum=0.9),
}


def full(rate: str, penalty: bool, **params) -> FullTrainer:
    weights = {"coefficient": {"l1": 0.01, "l2": 0.01}} if penalty else None
    return FullTrainer(backend="portable", learning_rate=RATES[rate](), penalty=weights, **params)


def forward_backward(rate: str, penalty: bool, **params) -> ForwardBackwardTrainer:
    return ForwardBackwardTrainer(
        backend="portable",
        learning_rate=RATES[rate](),
        learning_loss=SquareLearningLoss(),
        learning_penalty=ElasticLearningPenalty(0.01, 0.01) if penalty else None,
        **params,
    )


@pytest.mark.parametrize("penalty", [False, True])
@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("make", [full, forward_backward])
@pytest.mark.parametrize("batch_size", [1, 16])
def test_cuda_follows_the_cpu_trajectory(make, rate, penalty, batch_size, regression, mlp_onnx):
    """Shuffled batches, a rate that changes every epoch or a momentum, a penalty whose
    scale the trainer sets between runs: losses and weights as on CPU, warm start too."""
    X, y = regression
    found = {}
    for device in ("cpu", "cuda"):
        params = dict(batch_size=batch_size, max_iter=3, random_state=0, device=device)
        trainer = make(rate, penalty, model_onnx=mlp_onnx, **params).fit(X, y)
        found[device] = trainer.set_params(warm_start=True, max_iter=2).fit(X, y)
    cpu, cuda = found["cpu"], found["cuda"]
    assert len(cuda.train_losses_) == 5
    np.testing.assert_allclose(cuda.train_losses_, cpu.train_losses_, rtol=2e-4)
    for name, value in cpu.get_state().items():
        np.testing.assert_allclose(cuda.get_state()[name], value, rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(cuda.predict(X), cpu.predict(X), rtol=2e-4, atol=2e-6)
