"""Full training on onnxruntime's on-device training API (the ort-training backend).

``generate_artifacts`` turns the model with its loss into a training model, an optimizer
model and a checkpoint; ``Module.train_step`` and ``Optimizer.optimizer_step`` then run two
calls per step (the training graph is edited to overwrite its gradient buffers, so no
``lazy_reset_grad`` call is needed between them). The batch inputs are OrtValue vectors
built once per fit over the staged batches, and the loss lands in a preallocated host
scalar, so a step allocates nothing of ours. The runtime's optimizers are SGD and AdamW only.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import OrtBenchError
from ..gradients.kernel_forms import rewrite_gradient_kernels
from ..gradients.ort_preparation import (
    gradient_builder_error,
    missing_gradient_kernel,
    prepare_for_gradient_builder,
)
from ..graphs.loading import fit_runtime
from ..learning_rates import BaseLearningRate, LearningRateAdamW, LearningRateSGD
from ..runtime import capi
from ..runtime.build import training_module
from ..runtime.devices import cpu_scalar
from ..runtime.sessions import SessionMaker, native_stderr_silenced
from .batches import Batch, BatchLoader


class OnDeviceStep(NamedTuple):
    """What one step of :class:`OnDeviceSteps` runs over one staged batch."""

    #: The training graph's data feeds, in its input order.
    feeds: capi.OrtValueVector
    #: The batch's real rows (the last batch may be padded).
    length: int


class OnDeviceSteps:
    """Training steps of a model that outputs its loss, run by the on-device API.

    Parameters
    ----------
    with_loss : onnx.ModelProto
        The model with a static batch dimension, whose one output is the loss.
    weights : list of str
        The trained weights.
    rate : LearningRateSGD or LearningRateAdamW
        The on-device optimizer to run.
    sessions : SessionMaker
        Device, threads and labels of the sessions.
    feeds : callable
        What the graph reads of a staged :class:`~ortbench.training.steps.batches.Batch`
        (see :func:`ortbench.training.estimators.full.batch_feeds`).

    Raises
    ------
    OrtBenchError
        For another learning rate, or when onnxruntime cannot build the training graph.
    """

    large_sessions = 1

    def __init__(
        self,
        with_loss: onnx.ModelProto,
        weights: list[str],
        rate: BaseLearningRate,
        sessions: SessionMaker,
        feeds: Callable[[Batch], tuple],
    ):
        if not isinstance(rate, (LearningRateSGD, LearningRateAdamW)):
            raise OrtBenchError(
                f"onnxruntime's on-device training runs LearningRateSGD or LearningRateAdamW, "
                f"not {type(rate).__name__}: use backend='portable' or ForwardBackwardTrainer "
                f"for momentum"
            )
        artifacts = training_module("artifacts")
        onnxblock = training_module("onnxblock")
        self.weights = weights
        if isinstance(rate, LearningRateAdamW):
            optimizer = onnxblock.optim.AdamW(
                betas=(rate.beta1, rate.beta2), eps=rate.epsilon, weight_decay=rate.weight_decay
            )
        else:
            optimizer = artifacts.OptimType.SGD
        self.graphs = {}
        self._feeds = feeds
        self._device = sessions.ort_device
        with_loss = prepare_for_gradient_builder(with_loss)
        with tempfile.TemporaryDirectory() as folder:
            try:
                with native_stderr_silenced():
                    artifacts.generate_artifacts(
                        with_loss,
                        requires_grad=weights,
                        frozen_params=None,  # constants stay in the graph, folded
                        loss=None,
                        optimizer=optimizer,
                        artifact_directory=folder,
                    )
            except RuntimeError as e:
                raise gradient_builder_error(e, with_loss) from None
            for name in ("training_model", "eval_model", "optimizer_model"):
                path = os.path.join(folder, f"{name}.onnx")
                onnx.save(fit_runtime(onnx.load(path)), path)
            training_path = os.path.join(folder, "training_model.onnx")
            always_overwrite_gradients(training_path)
            training = onnx.load(training_path)
            if rewrite_gradient_kernels(training):
                onnx.save(training, training_path)
            for name in ("training_model", "eval_model", "optimizer_model"):
                with open(os.path.join(folder, f"{name}.onnx"), "rb") as f:
                    self.graphs[name] = f.read()
            self._state = capi.load_checkpoint(os.path.join(folder, "checkpoint"))
            # no eval model: validation runs its own session (base.BaseTrainer)
            try:
                self._module = capi.Module(
                    training_path,
                    self._state,
                    None,
                    self._device,
                    sessions.options("train_step"),
                )
            except RuntimeError as e:
                raise missing_gradient_kernel(e, with_loss) or e from None
            self._optimizer = capi.Optimizer(
                os.path.join(folder, "optimizer_model.onnx"),
                self._state,
                self._device,
                sessions.options("optimizer", one_thread=True),
            )
        self._loss_out = np.zeros((), dtype=np.float32)
        self._loss_fetch = capi.value_vector([cpu_scalar(self._loss_out)])

    def set_learning_rate(self, value: float) -> None:
        """Make the next steps use the learning rate ``value``."""
        self._optimizer.set_learning_rate(value)

    def start_fit(self, loader: BatchLoader) -> None:
        """Wrap each staged batch's feeds in the vector a step hands the runtime."""
        self._n_samples = loader.n_samples
        self._records = [
            OnDeviceStep(capi.value_vector(self._feeds(batch)), batch.length)
            for batch in loader.batches
        ]

    def run_epoch(self) -> float:
        """Train on every staged batch; return the epoch's loss (mean over samples)."""
        module, optimizer, fetch, out = (
            self._module,
            self._optimizer,
            self._loss_fetch,
            self._loss_out,
        )
        total = 0.0
        for feeds, length in self._records:
            module.train_step_with_ort_values(feeds, fetch)
            optimizer.optimizer_step()
            total += float(out) * length
        return total / self._n_samples

    def get_state(self) -> dict[str, np.ndarray]:
        """Copies of the current weights, by name."""
        return {n: self._state.get_parameter(n).data.numpy().copy() for n in self.weights}

    def get_optimizer_state(self) -> None:
        """None: SGD keeps no state, and AdamW's moments stay inside the runtime's
        checkpoint (a rebuild restarts them)."""
        return None

    def set_optimizer_state(self, arrays) -> None:
        raise OrtBenchError("the on-device optimizer's state cannot be set")

    def shape(self, name: str) -> tuple:
        """The shape of the weight ``name``."""
        return tuple(self._state.get_parameter(name).data.shape())

    def set(self, name: str, array: np.ndarray) -> None:
        """Overwrite the current value of the weight ``name``."""
        parameter = self._state.get_parameter(name)
        parameter.copy_from(self._state, capi.OrtValue.ortvalue_from_numpy(array, self._device))


#: What the on-device training graph's gradient accumulators read to decide between
#: overwriting and adding to their buffers (``Module.lazy_reset_grad`` sets it per step).
ACCUMULATOR_FLAG = "lazy_reset_grad"


def always_overwrite_gradients(path: str) -> None:
    """Make the training graph at ``path`` overwrite its gradient buffers on every step.

    onnxruntime's artifacts accumulate gradients across steps unless
    ``Module.lazy_reset_grad()`` is called before each one (one more call into the runtime
    per step); ortbench never accumulates, so the accumulators read a
    constant True instead of the flag (the graph keeps the input, which Module feeds).
    """
    model = onnx.load(path)
    graph = model.graph
    constant = "ortbench_overwrite_gradients"
    graph.initializer.append(numpy_helper.from_array(np.ones(1, dtype=bool), constant))
    for node in graph.node:
        if node.op_type.startswith("InPlaceAccumulator"):
            node.input[:] = [constant if i == ACCUMULATOR_FLAG else i for i in node.input]
    onnx.save(model, path)
