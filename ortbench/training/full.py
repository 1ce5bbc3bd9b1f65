"""Full training: the loss is in the graph, onnxruntime computes loss, gradients and update.

Built on onnxruntime's on-device training API: ``generate_artifacts`` turns the model
with its loss into a training model, an eval model, an optimizer model and a checkpoint;
``Module.train_step`` and ``Optimizer.optimizer_step`` then run two calls per step.
The batch inputs are OrtValue vectors built once per fit over the staged batches, and
the loss lands in a preallocated host scalar, so a step allocates nothing of ours.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from onnxruntime.capi import _pybind_state as C

from .base import BaseTrainer
from .data import BatchLoader
from .errors import OrtBenchError
from .graph_tools import select_outputs
from .learning_rates import BaseLearningRate, LearningRateAdamW, LearningRateSGD
from .loss_graph import add_loss_output
from .losses import BaseLearningLoss, loss_from_name
from .runtime import cpu_scalar, first_line, native_stderr_silenced, ort_device, training_module


class FullTrainer(BaseTrainer):
    """Train an ONNX model whose loss onnxruntime differentiates and whose update it runs.

    ``loss`` is one of 'squared_error', 'absolute_error', 'elastic' or 'log' (see
    :func:`add_loss_output`); ``penalty={'coef': {'l1': a, 'l2': b}}`` regularises named
    weights. ``learning_rate`` is ``LearningRateSGD`` (default) or ``LearningRateAdamW``:
    the runtime's on-device optimizers. A model that already outputs ``loss_output_name``
    is trained as it is, its other inputs fed with the labels (and weights).
    """

    def __init__(
        self,
        model_onnx=None,
        weights_to_train: list[str] | None = None,
        loss: str = "squared_error",
        penalty: dict | None = None,
        learning_rate: BaseLearningRate | None = None,
        batch_size: int = 10,
        max_iter: int = 100,
        device: str = "cpu",
        shuffle: bool = True,
        random_state=None,
        warm_start: bool = False,
        verbose: int = 0,
        validation_every: int = 1,
        intra_op_threads="auto",
        loss_output_name: str = "loss",
    ):
        self.model_onnx = model_onnx
        self.weights_to_train = weights_to_train
        self.loss = loss
        self.penalty = penalty
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.device = device
        self.shuffle = shuffle
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose
        self.validation_every = validation_every
        self.intra_op_threads = intra_op_threads
        self.loss_output_name = loss_output_name

    def _learning_loss(self) -> BaseLearningLoss:
        return loss_from_name(self.loss)

    def _prepare_model(self) -> None:
        super()._prepare_model()
        outputs = [o.name for o in self.model_.graph.output]
        self._loss_in_model = self.loss_output_name in outputs
        if self._loss_in_model:
            others = [o for o in outputs if o != self.loss_output_name]
            if not others:
                raise OrtBenchError("the model outputs only its loss: nothing to predict with")
            self.output_name_ = others[0]
            self._train_model = select_outputs(self.model_, [self.output_name_])

    def _prediction_model(self):
        model = self.get_trained_onnx()
        if self._loss_in_model:
            outputs = [o.name for o in model.graph.output if o.name != self.loss_output_name]
            model = select_outputs(model, outputs)
        return model

    def _build(self) -> None:
        if type(self.learning_rate_) not in (LearningRateSGD, LearningRateAdamW):
            raise OrtBenchError(
                f"FullTrainer runs onnxruntime's own optimizers (LearningRateSGD, "
                f"LearningRateAdamW), not {type(self.learning_rate_).__name__}: use "
                f"ForwardBackwardTrainer for momentum"
            )
        artifacts = training_module("artifacts")
        onnxblock = training_module("onnxblock")
        if self._loss_in_model:
            with_loss = self.model_
        else:
            with_loss = add_loss_output(
                self._train_model,
                score_name=self.loss,
                loss_name=self.loss_output_name,
                weight_name="weight",
                penalty=self.penalty,
            )
        with_loss = self._static_batch(select_outputs(with_loss, [self.loss_output_name]))
        self._feed_names = [i.name for i in with_loss.graph.input]
        frozen = [i.name for i in with_loss.graph.initializer if i.name not in self.weights_]
        rate = self.learning_rate_
        if isinstance(rate, LearningRateAdamW):
            optimizer = onnxblock.optim.AdamW(
                betas=(rate.beta1, rate.beta2), eps=rate.epsilon, weight_decay=rate.weight_decay
            )
        else:
            optimizer = artifacts.OptimType.SGD
        self._artifacts = {}
        with tempfile.TemporaryDirectory() as folder:
            try:
                with native_stderr_silenced():
                    artifacts.generate_artifacts(
                        with_loss,
                        requires_grad=self.weights_,
                        frozen_params=frozen,
                        loss=None,
                        optimizer=optimizer,
                        artifact_directory=folder,
                    )
            except RuntimeError as e:
                raise OrtBenchError(
                    f"onnxruntime cannot build the training graph: {first_line(e)}"
                ) from None
            for name in ("training_model", "eval_model", "optimizer_model"):
                with open(os.path.join(folder, f"{name}.onnx"), "rb") as f:
                    self._artifacts[name] = f.read()
            device = ort_device(self.device)
            self._state = C.load_checkpoint(os.path.join(folder, "checkpoint"))
            # no eval model: validation runs its own session (base.BaseTrainer)
            self._module = C.Module(
                os.path.join(folder, "training_model.onnx"),
                self._state,
                None,
                device,
                self._session_options("train_step"),
            )
            self._optimizer = C.Optimizer(
                os.path.join(folder, "optimizer_model.onnx"),
                self._state,
                device,
                self._session_options("optimizer"),
            )
        self._device = device
        self._loss_out = np.zeros((), dtype=np.float32)
        self._loss_fetch = C.OrtValueVector()
        self._loss_fetch.push_back(cpu_scalar(self._loss_out))

    def _set_learning_rate(self, value: float) -> None:
        self._optimizer.set_learning_rate(value)

    def _start_fit(self, loader: BatchLoader) -> None:
        # X, labels, then sample weights when the graph takes them
        self._inputs = [_vector(b.values[: len(self._feed_names)]) for b in loader.batches]

    def _run_epoch(self, batches) -> float:
        module, optimizer, fetch, out = (
            self._module,
            self._optimizer,
            self._loss_fetch,
            self._loss_out,
        )
        total = 0.0
        for feeds, batch in zip(self._inputs, batches):
            module.lazy_reset_grad()
            module.train_step_with_ort_values(feeds, fetch)
            optimizer.optimizer_step()
            total += float(out) * batch.length
        return total / sum(b.length for b in batches)

    def get_state(self) -> dict[str, np.ndarray]:
        self._check_built()
        return {n: self._state.get_parameter(n).data.numpy().copy() for n in self.weights_}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self._check_built()
        for name, array in state.items():
            if name not in self.weights_:
                raise OrtBenchError(f"unknown weight {name!r}: trained weights are {self.weights_}")
            parameter = self._state.get_parameter(name)
            expected = tuple(parameter.data.shape())
            array = np.ascontiguousarray(array, dtype=np.float32)
            if array.shape != expected:
                raise OrtBenchError(f"weight {name!r} has shape {expected}, got {array.shape}")
            parameter.copy_from(self._state, C.OrtValue.ortvalue_from_numpy(array, self._device))
        self._predictor = None

    def _check_built(self) -> None:
        if not hasattr(self, "_state"):
            raise OrtBenchError(f"this {type(self).__name__} is not fitted yet: call fit first")

    def _graphs(self) -> dict:
        return dict(self._artifacts)


OrtGradientOptimizer = FullTrainer


def _vector(values) -> C.OrtValueVector:
    vector = C.OrtValueVector()
    for value in values:
        vector.push_back(value)
    return vector
