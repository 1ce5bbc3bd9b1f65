"""Full training: the loss is in the graph, onnxruntime computes loss, gradients and update.

Two backends run the steps: ``'ort-training'`` the on-device training API
(:mod:`ortbench.training.steps.on_device`, two runs per step, SGD or AdamW) and ``'portable'``
graphs of standard operators (:mod:`ortbench.training.steps.fused`, any onnxruntime build,
momentum included): one fused run per step, or with momentum on CPU the step and then the
momentum update over stacked rows.
"""

from __future__ import annotations

from functools import partial

from onnx import TensorProto, helper

from ..errors import OrtBenchError
from ..graphs.loss_graph import LossHead, add_loss_output, scalar_loss, tensor_names
from ..graphs.nodes import unique_name
from ..graphs.outputs import select_outputs, training_output
from ..learning_rates import BaseLearningRate
from ..losses import BaseLearningLoss, loss_from_name
from ..steps.batches import Batch
from ..steps.epoch_loop import EpochLoopSteps
from ..steps.fused import FusedSteps
from ..steps.on_device import OnDeviceSteps
from .base import BaseTrainer
from .docstrings import shared_docstring


@shared_docstring
class FullTrainer(BaseTrainer):
    """Train an ONNX model whose loss onnxruntime differentiates and whose update it runs.

    The loss is appended to the model as graph nodes (or is already one of its outputs);
    onnxruntime computes loss, gradients and update, on its on-device training API
    (``backend='ort-training'``, two runs per step) or as graphs of standard operators
    (``backend='portable'``, any onnxruntime build: one fused run per step, two with
    momentum on CPU).

    Parameters
    ----------
    {model_parameters}
    loss : {'squared_error', 'absolute_error', 'elastic', 'log'} or BaseLearningLoss, optional
        The loss appended to the model (see :func:`add_loss_output`). By default 'log'
        for a classifier graph (trained through the raw scores behind its Sigmoid or
        Softmax, with a stable log-sigmoid or log-softmax) and 'squared_error' otherwise.
    penalty : dict, optional
        ``{'coef': {'l1': a, 'l2': b}}`` regularises the named weights.
    learning_rate : BaseLearningRate, optional
        ``LearningRateSGD()`` by default, or ``LearningRateAdamW`` (the runtime's
        on-device optimizers); ``LearningRateSGDNesterov`` with ``backend='portable'``.
    {fit_parameters}
    loss_output_name : str, default='loss'
        The loss output; a model that already outputs it is trained as it is, its other
        inputs fed with the labels (and sample weights).
    backend : {'ort-training', 'portable'}, optional
        The runtime that computes the gradients: ort-training where it is installed,
        else portable (always portable with ``epoch_loop=True``).
    epoch_loop : bool, default=False
        Run each epoch as one onnxruntime run, an ONNX ``Scan`` whose body is the
        portable fused step (:mod:`ortbench.training.steps.epoch_loop`): the same trajectory,
        without a run's dispatch per step. Portable backend and CPU only.

    Attributes
    ----------
    {attributes}

    Raises
    ------
    OrtBenchError
        From :meth:`fit`, for bad input, a learning rate the backend cannot run, or a
        diverging loss.
    """

    def __init__(
        self,
        model_onnx=None,
        weights_to_train: list[str] | None = None,
        loss: str | BaseLearningLoss | None = None,
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
        epoch_loop: bool = False,
    ):
        self._keep_params(locals())

    def _check_params(self) -> None:
        if self.epoch_loop not in (True, False):
            raise OrtBenchError(f"epoch_loop must be True or False, got {self.epoch_loop!r}")
        if self.epoch_loop and self.backend not in (None, "portable"):
            raise OrtBenchError(
                f"epoch_loop=True runs the portable fused step: use backend='portable', "
                f"not {self.backend!r}"
            )
        if self.epoch_loop and self.device != "cpu":
            raise OrtBenchError(
                f"epoch_loop=True runs on the CPU only: use device='cpu', not {self.device!r}"
            )
        super()._check_params()
        if self.epoch_loop:
            self._backend = "portable"
        name = self.loss_output_name
        if not isinstance(name, str) or not name:
            raise OrtBenchError(
                f"loss_output_name must be a non-empty string such as 'loss', got {name!r}"
            )

    def _learning_loss(self) -> BaseLearningLoss | None:
        return None if self.loss is None else loss_from_name(self.loss)

    def _loss_outputs(self, model) -> tuple[str, ...]:
        outputs = [o.name for o in model.graph.output]
        return (self.loss_output_name,) if self.loss_output_name in outputs else ()

    def _prepare_model(self) -> None:
        self._loss_in_model = False
        super()._prepare_model()
        self._loss_in_model = bool(self._loss_outputs(self.model_))
        if self._loss_in_model and self.is_classifier_:
            # the model's own loss reads one-hot labels as wide as its label input
            data = [i for i in self.model_.graph.input if i.name not in self.weights_]
            labels = [i for i in data if i.name != self._input.name]
            dims = labels[0].type.tensor_type.shape.dim if labels else []
            if len(dims) == 2 and dims[1].dim_value > 0:
                self._label_columns = dims[1].dim_value

    def _prediction_model(self):
        model = self.get_trained_onnx()
        if self._loss_in_model:
            outputs = [o.name for o in model.graph.output if o.name != self.loss_output_name]
            model = select_outputs(model, outputs)
        return model

    def _steps_class(self) -> type[EpochLoopSteps | FusedSteps | OnDeviceSteps]:
        if self.epoch_loop:
            return EpochLoopSteps
        return FusedSteps if self._backend == "portable" else OnDeviceSteps

    def _build(self) -> None:
        loss_name = self.loss_output_name
        head = None
        if self._loss_in_model:
            with_loss = scalar_loss(self.model_, loss_name)
        else:
            # new names the model does not use (an input may be called 'label')
            names = tensor_names(self._train_model.graph)
            loss_name = unique_name(names, loss_name)
            label, shares = unique_name(names, "label"), unique_name(names, "loss_scale")
            with_loss = add_loss_output(
                self._train_model,
                score_name=self.learning_loss_,
                loss_name=loss_name,
                label_name=label,
                scale_name=shares,
                penalty=self.penalty,
            )
            # static while the prediction is an output: dropping a converter's final
            # Reshape then keeps the prediction's name
            with_loss = self._static_batch(with_loss)
            if self._steps_class() is not OnDeviceSteps:
                head = LossHead.of(
                    self.learning_loss_,
                    self.penalty,
                    predicted=training_output(self._train_model),
                    label=label,
                    grad_scale=unique_name(names, "grad_scale"),
                    loss_scale=shares,
                )
        with_loss = self._static_batch(select_outputs(with_loss, [loss_name]))
        if head is not None:
            # the hand-written gradient's column, the last data input (see batch_feeds)
            column = [self._batch_rows, 1]
            with_loss.graph.input.append(
                helper.make_tensor_value_info(head.grad_scale, TensorProto.FLOAT, column)
            )
        n_feeds = sum(i.name not in self.weights_ for i in with_loss.graph.input)
        feeds = partial(
            batch_feeds,
            n_feeds=n_feeds,
            loss_scale=not self._loss_in_model,
            grad_scale=head is not None,
        )
        steps = self._steps_class()
        if steps is not OnDeviceSteps:
            self._steps = steps(
                with_loss,
                self.weights_,
                self.learning_rate_,
                self._sessions,
                feeds,
                loss_name,
                head,
            )
        else:
            self._steps = OnDeviceSteps(
                with_loss, self.weights_, self.learning_rate_, self._sessions, feeds
            )


def batch_feeds(batch: Batch, n_feeds: int, loss_scale: bool, grad_scale: bool = False) -> tuple:
    """What a full-training graph reads of a staged batch, in its input order.

    Parameters
    ----------
    batch : Batch
        The staged batch.
    n_feeds : int
        How many data inputs the graph has.
    loss_scale : bool
        True for the loss :func:`add_loss_output` appends, which reads X, the labels and
        the loss-scale column; False for a loss the model outputs, which reads the first
        ``n_feeds`` of X, the labels and the sample weights.
    grad_scale : bool, default=False
        With ``loss_scale``: the gradient-scale column too, which a hand-written loss
        gradient reads (see :class:`~ortbench.training.graphs.loss_graph.LossHead`).

    Returns
    -------
    tuple
        The OrtValues to feed.
    """
    if loss_scale:
        scales = (batch.loss_scale, batch.grad_scale) if grad_scale else (batch.loss_scale,)
        return (*batch.values[:2], *scales)
    return batch.values[:n_feeds]
