"""Contenders over the engine: onnxruntime full training and forward/backward training."""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import onnxruntime

from ...install import TRAINING_INSTALL, runtime_distributions
from ...training import (
    BaseLearningRate,
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
    OrtBenchError,
)
from ...training.estimators.base import BaseTrainer
from ...training.graphs.nodes import rewrite_linear_nodes
from ...training.graphs.outputs import select_outputs, training_output
from ...training.losses import loss_from_name
from ...training.runtime.build import TRAINING_VERSION, runtime_problem
from ...training.runtime.devices import check_device
from ..counters import RuntimeCounts, count_runtime
from ..problems import Problem
from .base import Contender, as_prediction


class OrtContender(Contender):
    """A contender that trains the problem's ONNX model with one of the engine's trainers."""

    #: The trainers' ``intra_op_threads`` (the ``ThreadChoice`` asv suite sets others).
    intra_op_threads: str | int | None = "auto"

    @abstractmethod
    def _trainer(self) -> BaseTrainer:
        """A new, unfitted trainer for this cell."""

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        if runtime_problem():
            return (
                f"needs onnxruntime-training {TRAINING_VERSION} (installed: "
                f"{runtime_distributions()}): {TRAINING_INSTALL}"
            )
        try:
            check_device(device)
        except OrtBenchError as e:
            return str(e)
        return None

    def _sgd(self) -> LearningRateSGD:
        return LearningRateSGD(self.problem.eta0, learning_rate="constant")

    def _common(self) -> dict:
        return dict(
            batch_size=self.batch_size,
            device=self.device,
            shuffle=self.shuffle,
            random_state=self.problem.seed,
            weights_to_train=self.problem.weights and list(self.problem.weights),
            intra_op_threads=self.intra_op_threads,
        )

    def _fit(self, epochs: int) -> list[float]:
        data = self.problem.data
        self.trainer = self._trainer().set_params(max_iter=epochs)
        self.trainer.fit(data.X_train, data.y_train, data.w_train)
        return list(self.trainer.train_losses_)

    def _continue(self, epochs: int) -> None:
        data = self.problem.data
        self.trainer.set_params(warm_start=True, max_iter=epochs).fit(
            data.X_train, data.y_train, data.w_train
        )

    def predict(self, X: np.ndarray) -> np.ndarray:
        classifier = self.problem.loss_name == "log"
        if not hasattr(self, "trainer"):
            model = rewrite_linear_nodes(self.problem.onnx_model)
            session = onnxruntime.InferenceSession(
                select_outputs(model, [training_output(model)]).SerializeToString(),
                providers=["CPUExecutionProvider"],
            )
            output = session.run(None, {session.get_inputs()[0].name: X})[0]
        elif classifier:
            output = self.trainer.predict_proba(X)
        else:
            output = self.trainer.predict(X)
        return as_prediction(output, classifier)

    def session_threads(self) -> float:
        """The trainer's choice (``intra_op_threads_``), 0 for onnxruntime's pool."""
        return self.trainer.intra_op_threads_ or 0

    def runtime_counts(self) -> RuntimeCounts:
        """Counts over one more epoch (call ``fit`` first)."""
        with count_runtime(self.trainer) as counts:
            self.continue_fit(1)
        return counts


class OrtFull(OrtContender):
    """onnxruntime's on-device training API: the loss is in the graph (``FullTrainer``)."""

    name = "ort-full"

    def _trainer(self) -> BaseTrainer:
        return FullTrainer(
            self.problem.onnx_model,
            loss=self.problem.loss_name,
            learning_rate=self._sgd(),
            **self._common(),
        )


class OrtForwardBackward(OrtContender):
    """TrainingAgent forward/backward with ONNX loss and update graphs, plain SGD."""

    name = "ort-fwbw"

    def _rate(self) -> BaseLearningRate:
        return self._sgd()

    def _trainer(self) -> BaseTrainer:
        return ForwardBackwardTrainer(
            self.problem.onnx_model,
            learning_loss=loss_from_name(self.problem.loss_name),
            learning_rate=self._rate(),
            **self._common(),
        )


class OrtForwardBackwardNesterov(OrtForwardBackward):
    """Forward/backward training with Nesterov momentum, as MLPRegressor(solver='sgd') runs it."""

    name = "ort-fwbw-nesterov"

    def _rate(self) -> BaseLearningRate:
        return LearningRateSGDNesterov(
            self.problem.eta0, learning_rate="constant", momentum=self.problem.momentum
        )


class OrtPortableForwardBackward(OrtForwardBackward):
    """``ForwardBackwardTrainer(backend='portable')``: forward, loss, gradient, update graphs
    of standard operators."""

    name = "ort-portable-fwbw"

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        return OrtPortableFull.unavailable(problem, batch_size, device)

    def _trainer(self) -> BaseTrainer:
        return super()._trainer().set_params(backend="portable")


class OrtPortableFull(OrtContender):
    """``FullTrainer(backend='portable')``: one fused graph of standard operators per step."""

    name = "ort-portable-full"

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        try:  # any onnxruntime build runs it: no training build needed
            check_device(device, "portable")
        except OrtBenchError as e:
            return str(e)
        return None

    def _rate(self):
        return self._sgd()

    def _trainer(self) -> BaseTrainer:
        return FullTrainer(
            self.problem.onnx_model,
            loss=self.problem.loss_name,
            learning_rate=self._rate(),
            backend="portable",
            **self._common(),
        )


class OrtPortableNesterov(OrtPortableFull):
    """The portable step with Nesterov momentum (the on-device API has none): on CPU the
    step graph, then the stacked momentum update."""

    name = "ort-portable-nesterov"

    def _rate(self):
        return LearningRateSGDNesterov(
            self.problem.eta0, learning_rate="constant", momentum=self.problem.momentum
        )


class OrtPortableLoop(OrtPortableFull):
    """The portable fused step run as one ``Scan`` per epoch: one onnxruntime run per
    epoch (``FullTrainer(epoch_loop=True)``)."""

    name = "ort-portable-loop"

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        if device != "cpu":
            return "the epoch loop runs on the CPU only"
        return super().unavailable(problem, batch_size, device)

    def _trainer(self) -> BaseTrainer:
        return super()._trainer().set_params(epoch_loop=True)
