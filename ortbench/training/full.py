"""Full training: the loss is in the graph, onnxruntime computes loss, gradients and update.

Two backends run the steps: ``'ort-training'`` the on-device training API
(:mod:`ortbench.training.on_device`, two runs per step, SGD or AdamW) and ``'portable'``
one fused graph of standard operators (:mod:`ortbench.training.fused`, one run per step,
any onnxruntime build, momentum included).
"""

from __future__ import annotations

import numpy as np

from .base import BaseTrainer
from .data import Batch, BatchLoader
from .errors import OrtBenchError
from .fused import FusedSteps
from .graph_tools import select_outputs
from .learning_rates import BaseLearningRate
from .loss_graph import add_loss_output, scalar_loss, tensor_names, unique_name
from .losses import BaseLearningLoss, loss_from_name
from .on_device import OnDeviceSteps


class FullTrainer(BaseTrainer):
    """Train an ONNX model whose loss onnxruntime differentiates and whose update it runs.

    ``loss`` is one of 'squared_error', 'absolute_error', 'elastic' or 'log' (see
    :func:`add_loss_output`), or a loss object; None (the default) is 'log' for a
    classifier graph and 'squared_error' otherwise; ``penalty={'coef': {'l1': a, 'l2': b}}`` regularises named
    weights. ``learning_rate`` is ``LearningRateSGD`` (default) or ``LearningRateAdamW``
    (the runtime's on-device optimizers), and also ``LearningRateSGDNesterov`` with
    ``backend='portable'``. A model that already outputs ``loss_output_name`` is trained
    as it is, its other inputs fed with the labels (and weights).
    """

    def __init__(
        self,
        model_onnx=None,
        weights_to_train: list[str] | None = None,
        loss: str | None = None,
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
        backend: str | None = None,
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
        self.backend = backend

    def _learning_loss(self) -> BaseLearningLoss | None:
        return None if self.loss is None else loss_from_name(self.loss)

    def _loss_outputs(self, model) -> tuple[str, ...]:
        outputs = [o.name for o in model.graph.output]
        return (self.loss_output_name,) if self.loss_output_name in outputs else ()

    def _prepare_model(self) -> None:
        self._loss_in_model = False
        super()._prepare_model()
        self._loss_in_model = bool(self._loss_outputs(self.model_))

    def _prediction_model(self):
        model = self.get_trained_onnx()
        if self._loss_in_model:
            outputs = [o.name for o in model.graph.output if o.name != self.loss_output_name]
            model = select_outputs(model, outputs)
        return model

    def _build(self) -> None:
        loss_name = self.loss_output_name
        if self._loss_in_model:
            with_loss = scalar_loss(self.model_, loss_name)
        else:
            # new names the model does not use (an input may be called 'label')
            names = tensor_names(self._train_model.graph)
            loss_name = unique_name(names, loss_name)
            with_loss = add_loss_output(
                self._train_model,
                score_name=self.learning_loss_,
                loss_name=loss_name,
                scale_name=unique_name(names, "loss_scale"),
                penalty=self.penalty,
            )
        with_loss = self._static_batch(select_outputs(with_loss, [loss_name]))
        self._n_feeds = sum(i.name not in self.weights_ for i in with_loss.graph.input)
        if self._backend == "portable":
            self._steps = FusedSteps(
                with_loss,
                self.weights_,
                self.learning_rate_,
                self.device,
                self._session_options,
                self._providers(),
                loss_name,
            )
        else:
            self._steps = OnDeviceSteps(
                with_loss, self.weights_, self.learning_rate_, self.device, self._session_options
            )

    def _set_learning_rate(self, value: float) -> None:
        self._steps.set_learning_rate(value)

    def _start_fit(self, loader: BatchLoader) -> None:
        self._steps.start_fit([(self._batch_feeds(b), b.length) for b in loader.batches])

    def _batch_feeds(self, batch: Batch) -> tuple:
        """What the graph reads of a batch, in its input order: X, the labels, then the
        loss scale column (the loss this trainer appends) or the sample weights (a loss
        the model already outputs)."""
        if self._loss_in_model:
            return batch.values[: self._n_feeds]
        return (*batch.values[:2], batch.loss_scale)

    def _run_epoch(self, batches) -> float:
        return self._steps.run_epoch()

    def get_state(self) -> dict[str, np.ndarray]:
        self._check_built()
        return self._steps.get_state()

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self._check_built()
        for name, array in state.items():
            if name not in self.weights_:
                raise OrtBenchError(f"unknown weight {name!r}: trained weights are {self.weights_}")
            if not np.isfinite(array).all():
                raise OrtBenchError(f"weight {name!r} contains NaN or infinity")
            expected = self._steps.shape(name)
            array = np.ascontiguousarray(array, dtype=np.float32)
            if array.shape != expected:
                raise OrtBenchError(f"weight {name!r} has shape {expected}, got {array.shape}")
            self._steps.set(name, array)
        self._predictor = None

    def _optimizer_state(self) -> list[np.ndarray] | None:
        self._check_built()
        return self._steps.get_optimizer_state()

    def _set_optimizer_state(self, arrays: list[np.ndarray]) -> None:
        self._check_built()
        self._steps.set_optimizer_state(arrays)

    def _check_built(self) -> None:
        self._restore_pickled()
        if not hasattr(self, "_steps"):
            raise OrtBenchError(f"this {type(self).__name__} is not fitted yet: call fit first")

    def _graphs(self) -> dict:
        return dict(self._steps.graphs)


OrtGradientOptimizer = FullTrainer
