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

import numpy as np
import onnx
from onnx import numpy_helper
from onnxruntime.capi import _pybind_state as C

from .errors import OrtBenchError
from .learning_rates import BaseLearningRate, LearningRateAdamW, LearningRateSGD
from .runtime import cpu_scalar, first_line, native_stderr_silenced, ort_device, training_module


class OnDeviceSteps:
    """Training steps of a model that outputs its loss, run by the on-device API."""

    def __init__(
        self,
        with_loss: onnx.ModelProto,
        weights: list[str],
        rate: BaseLearningRate,
        device: str,
        session_options,
    ):
        if type(rate) not in (LearningRateSGD, LearningRateAdamW):
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
        self._device = ort_device(device)
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
                raise OrtBenchError(
                    f"onnxruntime cannot build the training graph: {first_line(e)}"
                ) from None
            training_path = os.path.join(folder, "training_model.onnx")
            always_overwrite_gradients(training_path)
            for name in ("training_model", "eval_model", "optimizer_model"):
                with open(os.path.join(folder, f"{name}.onnx"), "rb") as f:
                    self.graphs[name] = f.read()
            self._state = C.load_checkpoint(os.path.join(folder, "checkpoint"))
            # no eval model: validation runs its own session (base.BaseTrainer)
            self._module = C.Module(
                training_path,
                self._state,
                None,
                self._device,
                session_options("train_step"),
            )
            self._optimizer = C.Optimizer(
                os.path.join(folder, "optimizer_model.onnx"),
                self._state,
                self._device,
                session_options("optimizer"),
            )
        self._loss_out = np.zeros((), dtype=np.float32)
        self._loss_fetch = vector([cpu_scalar(self._loss_out)])

    def set_learning_rate(self, value: float) -> None:
        self._optimizer.set_learning_rate(value)

    def start_fit(self, batches: list[tuple[tuple, int]]) -> None:
        """Wrap each batch's feeds (in the graph's input order) and its real row count."""
        self._steps = [(vector(feeds), length) for feeds, length in batches]

    def run_epoch(self) -> float:
        module, optimizer, fetch, out = (
            self._module,
            self._optimizer,
            self._loss_fetch,
            self._loss_out,
        )
        total, count = 0.0, 0
        for feeds, length in self._steps:
            module.train_step_with_ort_values(feeds, fetch)
            optimizer.optimizer_step()
            total += float(out) * length
            count += length
        return total / count

    def get_state(self) -> dict[str, np.ndarray]:
        return {n: self._state.get_parameter(n).data.numpy().copy() for n in self.weights}

    def get_optimizer_state(self) -> None:
        """None: SGD keeps no state, and AdamW's moments stay inside the runtime's
        checkpoint (a rebuild restarts them)."""
        return None

    def set_optimizer_state(self, arrays) -> None:
        raise OrtBenchError("the on-device optimizer's state cannot be set")

    def shape(self, name: str) -> tuple:
        return tuple(self._state.get_parameter(name).data.shape())

    def set(self, name: str, array: np.ndarray) -> None:
        parameter = self._state.get_parameter(name)
        parameter.copy_from(self._state, C.OrtValue.ortvalue_from_numpy(array, self._device))


#: What the on-device training graph's gradient accumulators read to decide between
#: overwriting and adding to their buffers (``Module.lazy_reset_grad`` sets it per step).
ACCUMULATOR_FLAG = "lazy_reset_grad"


def always_overwrite_gradients(path: str) -> None:
    """Make the training graph at ``path`` overwrite its gradient buffers on every step.

    onnxruntime's artifacts accumulate gradients across steps unless
    ``Module.lazy_reset_grad()`` is called before each one (one more call into the runtime
    per step, about 0.3 us); ortbench never accumulates, so the accumulators read a
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


def vector(values) -> C.OrtValueVector:
    """An OrtValueVector holding ``values``."""
    result = C.OrtValueVector()
    for value in values:
        result.push_back(value)
    return result
