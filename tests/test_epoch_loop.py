"""The epoch in one run (``FullTrainer(epoch_loop=True)``) against the per-step run."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime
import pytest

from ortbench.training import FullTrainer, LearningRateSGD, LearningRateSGDNesterov, OrtBenchError
from ortbench.training.losses import SquareLearningLoss

RATES = {
    "sgd": LearningRateSGD(0.01, learning_rate="invscaling", power_t=0.5),
    # small enough that the loss falls at batch 1: where it rises, the per-step run's and
    # the loop's float32 rounding (their momentum updates are different nodes, a matrix
    # product against elementwise ones) drift apart
    "nesterov": LearningRateSGDNesterov(0.002, learning_rate="constant", momentum=0.9),
}


def trained(model, X, y, w, epoch_loop: bool, **params) -> FullTrainer:
    trainer = FullTrainer(model, backend="portable", epoch_loop=epoch_loop, **params)
    return trainer.fit(X, y, w)


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("batch_size", [16, 1, 120])
def test_epoch_loop_follows_the_per_step_run(rate, batch_size, regression, mlp_onnx):
    """Shuffled rows, sample weights and (at batch 16 over 120 rows) a last batch of 8:
    the same losses and weights, epoch after epoch, warm start included."""
    X, y = regression
    w = np.random.RandomState(1).uniform(0.2, 2.0, len(X)).astype(np.float32)
    params = dict(learning_rate=RATES[rate], batch_size=batch_size, max_iter=3, random_state=0)
    found = {
        loop: trained(mlp_onnx, X, y, w, loop, **params).set_params(warm_start=True, max_iter=2)
        for loop in (False, True)
    }
    for trainer in found.values():
        trainer.fit(X, y, w)
    step, loop = found[False], found[True]
    assert len(loop.train_losses_) == 5
    np.testing.assert_allclose(loop.train_losses_, step.train_losses_, rtol=1e-5)
    for name, value in step.get_state().items():
        np.testing.assert_allclose(loop.get_state()[name], value, rtol=1e-5, atol=1e-6)
    if rate == "nesterov":
        np.testing.assert_allclose(
            loop._steps.get_optimizer_state()[0], step._steps.get_optimizer_state()[0],
            rtol=1e-5, atol=1e-8,
        )  # fmt: skip


@pytest.mark.parametrize(
    "loss, penalty",
    [
        ("absolute_error", None),
        ("elastic", None),
        ("squared_error", {"coefficient": {"l2": 0.1}}),
        (SquareLearningLoss(convention="seed"), None),
    ],
)
@pytest.mark.parametrize("batch_size", [16, 1])
def test_epoch_loop_follows_the_per_step_run_for_other_losses(
    loss, penalty, batch_size, regression, mlp_onnx
):
    """The losses written after the scan from every batch's prediction (absolute and
    elastic losses), those the body differentiates node by node (a penalty), and the
    seed's squared error, whose gradient is twice the difference (at batch 1 one product
    in the body, its slope that factor)."""
    X, y = regression
    w = np.random.RandomState(2).uniform(0.2, 2.0, len(X)).astype(np.float32)
    params = dict(loss=loss, penalty=penalty, batch_size=batch_size, max_iter=3, random_state=0)
    step, loop = (trained(mlp_onnx, X, y, w, loop, **params) for loop in (False, True))
    np.testing.assert_allclose(loop.train_losses_, step.train_losses_, rtol=1e-5)
    for name, value in step.get_state().items():
        np.testing.assert_allclose(loop.get_state()[name], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffled", "in order"])
@pytest.mark.parametrize("convention", ["sklearn", "seed"])
@pytest.mark.parametrize("epoch_loop", [True, False], ids=["epoch loop", "per step"])
def test_the_gradient_in_one_product_is_the_differentiated_one(
    epoch_loop, convention, shuffle, regression, mlp_onnx
):
    """At batch 1 the hand-written gradient of the squared error is one Gemm of the scale
    by the prediction, less the labels the loader scaled; a zero penalty leaves the loss
    to be differentiated node by node (no head): both follow one trajectory, for either
    convention's factor (1 or 2), sample weights and a decreasing rate included, rows
    shuffled (the loader scales the labels again) or not (the new rate alone does)."""
    X, y = regression
    w = np.random.RandomState(3).uniform(0.2, 2.0, len(X)).astype(np.float32)
    loss = SquareLearningLoss(convention=convention)
    rate = RATES["sgd"]  # a rate that changes every epoch, and the scaled labels with it
    params = dict(
        loss=loss, learning_rate=rate, batch_size=1, max_iter=3, shuffle=shuffle, random_state=0
    )
    product = trained(mlp_onnx, X, y, w, epoch_loop, **params)
    zero_penalty = {"coefficient": {"l2": 0.0}}
    differentiated = trained(mlp_onnx, X, y, w, epoch_loop, penalty=zero_penalty, **params)
    assert product._steps._head.scaled_label is not None
    assert differentiated._steps._head is None
    np.testing.assert_allclose(product.train_losses_, differentiated.train_losses_, rtol=1e-5)
    for name, value in differentiated.get_state().items():
        np.testing.assert_allclose(product.get_state()[name], value, rtol=1e-5, atol=1e-6)


def test_epoch_loop_is_one_run_per_epoch(regression, mlp_onnx):
    from ortbench.bench.counters import count_runtime

    X, y = regression
    trainer = trained(mlp_onnx, X, y, None, True, batch_size=16, max_iter=1)
    with count_runtime(trainer) as counts:
        trainer.set_params(warm_start=True, max_iter=2).fit(X, y)
    assert counts.runs == 2
    assert counts.ortvalues == 0


@pytest.mark.parametrize("batch_size", [1, 16])
@pytest.mark.parametrize("epoch_loop", [True, False], ids=["epoch loop", "per step"])
def test_the_sgd_step_is_what_onnxruntime_fuses(
    epoch_loop, batch_size, regression, mlp_onnx, tmp_path
):
    """The step factor seeds the loss's gradient, which is written by hand (one node reads
    the batch's gradient scale, none the step factor, none scales the gradients; at batch
    1 one Gemm of the labels the loader scaled, no Sub), a Relu's gradient reads the
    Relu's output (so onnxruntime fuses the Relu into its Gemm), and a
    weight's update is a ``Sum`` that onnxruntime folds into its gradient's Gemm (a
    coefficient's; from batch 2 on a bias's too, its gradient the product of the rows by
    ones): in the epoch loop's body and in the per-step graph alike, where no update is
    flat (no ``Concat`` of the steps). No node reduces the (1, 1) loss to a scalar."""
    X, y = regression
    trainer = trained(mlp_onnx, X, y, None, epoch_loop, batch_size=batch_size, max_iter=1)
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    graph = trainer._steps.graphs["epoch_loop" if epoch_loop else "fused_step"]
    onnxruntime.InferenceSession(
        graph.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    nodes = onnx.load(tmp_path / "optimized.onnx").graph.node
    if epoch_loop:
        scan = next(n for n in nodes if n.op_type == "Scan")
        nodes = next(a.g for a in scan.attribute if a.name == "body").node
    if epoch_loop:  # the losses are computed after the scan, from every batch's prediction
        assert not any("loss_scale" in n.input for n in nodes)
    ops = Counter(n.op_type for n in nodes)
    written_by = {o: n.op_type for n in nodes for o in n.output}
    coefficients = [w for w in trainer.get_state() if w.startswith("coefficient")]
    assert ops["Relu"] == 0 and ops["FusedGemm"] == 2 and ops["Concat"] == 0, ops
    assert not any("step_scale" in n.input for n in nodes), ops
    reading = [n.op_type for n in nodes if "grad_scale" in n.input]
    if batch_size == 1:  # the label scaled by the loader: one product, no Sub
        assert reading == ["Gemm"] and ops["Sub"] == 0, ops
        assert not any("label" in n.input for n in nodes), ops
    else:
        assert reading == ["Mul"], ops
    assert ops["Add"] == ops["Unsqueeze"] == 0, ops  # what the loss's rules would add
    assert len(coefficients) == 3
    assert [written_by[f"{w}_new"] for w in coefficients] == ["Gemm"] * 3, ops
    assert ops["ReduceSum"] == 0, ops
    intercepts = [w for w in trainer.get_state() if w.startswith("intercepts")]
    updates = [written_by[f"{w}_new"] for w in intercepts]
    assert updates == ["Sum" if batch_size == 1 else "Gemm"] * 3, ops


def test_epoch_loop_refuses_what_it_cannot_run(regression, mlp_onnx):
    X, y = regression
    with pytest.raises(OrtBenchError, match="backend='portable'"):
        FullTrainer(mlp_onnx, backend="ort-training", epoch_loop=True).fit(X, y)
    with pytest.raises(OrtBenchError, match="CPU only"):
        FullTrainer(mlp_onnx, device="cuda", epoch_loop=True).fit(X, y)
    with pytest.raises(OrtBenchError, match="True or False"):
        FullTrainer(mlp_onnx, epoch_loop="yes").fit(X, y)
