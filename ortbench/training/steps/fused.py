"""Full training on graphs of standard operators (the portable backend).

The model with its loss and the loss's gradient with respect to every weight (built by
:mod:`ortbench.training.gradients.portable`) are one ONNX graph, which runs on any
onnxruntime build; the learning rate's update is more nodes of the same graph, or with
momentum on CPU a second small graph (see :class:`FusedSteps`). Momentum, which the
on-device API's optimizers lack, is just nodes too. Weights and optimizer states are
double-buffered (:class:`WeightBuffers`): a step reads one parity and writes the other,
and every binding is made once per batch and parity before the first step.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import onnx
from onnx import TensorProto, helper

from ..errors import OrtBenchError
from ..gradients.portable import vjp_graph
from ..graphs.builder import GraphBuilder
from ..graphs.loss_graph import LossHead, tensor_names
from ..graphs.nodes import drop_unread, unique_name
from ..graphs.outputs import static_width
from ..graphs.recurrent import unroll_recurrent
from ..graphs.weights import get_initializers, weights_as_inputs
from ..learning_rates import BaseLearningRate, LearningRateAdamW
from ..runtime import capi
from ..runtime.devices import ScalarInput
from ..runtime.sessions import SessionMaker
from .batch_losses import BatchLosses
from .batches import Batch, BatchLoader
from .buffers import DoubleBufferedSteps, WeightBuffers


def step_graph(
    with_loss: onnx.ModelProto, weights: list[str], loss_name: str, head: LossHead | None = None
) -> onnx.ModelProto:
    """Forward, loss and backward as one graph, whose gradients come out as the steps.

    The loss's gradient is seeded with the step factor instead of 1, so every gradient
    comes out as the step itself: no ``Mul`` per weight. With a ``head``, the gradient of
    the loss with respect to the model's prediction is the head's hand-written one, which
    reads the step factor in ``head.grad_scale``, and only the model is differentiated
    node by node; the head writes the loss too, shaped (1, 1) (see :class:`LossHead`).
    Inputs: the model's data inputs (X, labels, sample weights or scale columns), each
    weight ``<w>``, then without a head ``step_scale`` (scalar, the rate's step factor,
    -lr for SGD).
    Outputs: ``<w>_grad`` for each weight (the step ``e``), then the loss of the batch (a
    scalar, or (1, 1) with a head: :func:`loss_shape`).
    """
    # RNN, LSTM and GRU unrolled here, so that the forward nodes counted below are vjp_graph's
    model = unroll_recurrent(weights_as_inputs(with_loss, weights))
    if head is None:
        return vjp_graph(model, weights, seeds={loss_name: "step_scale"})
    graph = model.graph
    columns = static_width(model, head.predicted)
    # the head writes the loss again, with its gradient: the model's loss nodes go
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(head.predicted, TensorProto.FLOAT, None))
    drop_unread(graph)
    forward = len(graph.node)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 21)
    b = GraphBuilder("loss_gradient", opset=opset, prefix="loss_gradient_")
    seed = head.nodes(b, loss_name, columns)
    step = vjp_graph(model, weights, seeds={head.predicted: seed})
    # the seed was an input of the differentiated graph: the head's nodes compute it,
    # after the model's nodes (they read the prediction), before the gradient's
    graph = step.graph
    inputs = [i for i in graph.input if i.name != seed]
    del graph.input[:]
    graph.input.extend(inputs)
    graph.initializer.extend(b.initializers)
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes[:forward], *b.nodes, *nodes[forward:]])
    graph.output.pop()  # the prediction
    graph.output.append(
        helper.make_tensor_value_info(loss_name, TensorProto.FLOAT, loss_shape(head))
    )
    return step


def fused_step_graph(
    with_loss: onnx.ModelProto,
    weights: list[str],
    rate: BaseLearningRate,
    loss_name: str,
    head: LossHead | None = None,
) -> onnx.ModelProto:
    """One training step as one graph: :func:`step_graph` (with ``head``) and the rate's
    update of each weight.

    Without a state the update ``w + e`` is a ``Sum``, which onnxruntime folds into the
    ``Gemm`` computing a coefficient's step.
    Inputs: those of :func:`step_graph`, then ``<w>_state`` for each weight when the rate
    keeps a state.
    Outputs: ``<w>_new`` (and ``<w>_state_new``) for each weight, then the loss of the
    batch (before the update).
    """
    step = step_graph(with_loss, weights, loss_name, head)
    opset = next((o.version for o in step.opset_import if o.domain in ("", "ai.onnx")), 21)
    b = GraphBuilder("update", opset=opset, prefix="update_")
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in step.graph.input}
    outputs = []
    for weight in weights:
        states = [b.input(f"{weight}_state", shapes[weight])] if rate.n_states else []
        new_weight, new_states = rate.update_nodes(b, weight, f"{weight}_grad", states)
        outputs.append(b.rename(new_weight, f"{weight}_new"))
        outputs += [b.rename(s, f"{weight}_state_new") for s in new_states]
    graph = step.graph
    graph.input.extend(b.inputs)
    graph.initializer.extend(b.initializers)
    graph.node.extend(b.nodes)
    del graph.output[:]
    graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs)
    graph.output.append(
        helper.make_tensor_value_info(loss_name, TensorProto.FLOAT, loss_shape(head))
    )
    return step


def predicting(step: onnx.ModelProto, loss_name: str, head: LossHead) -> onnx.ModelProto:
    """``step`` (of :func:`step_graph` or :func:`fused_step_graph` with ``head``) giving the
    head's prediction, shaped like the labels, in place of the loss output, and without the
    nodes only the loss read: the losses are computed after the epoch
    (:mod:`~ortbench.training.steps.batch_losses`). The loss's inputs stay, unread."""
    graph = step.graph
    label = next(i for i in graph.input if i.name == head.label)
    prediction = helper.make_tensor_value_info(
        head.predicted, TensorProto.FLOAT, [d.dim_value for d in label.type.tensor_type.shape.dim]
    )
    outputs = [prediction if o.name == loss_name else o for o in graph.output]
    del graph.output[:]
    graph.output.extend(outputs)
    drop_unread(graph)
    return step


def scaled_label_form(
    with_loss: onnx.ModelProto, head: LossHead
) -> tuple[onnx.ModelProto, LossHead]:
    """``with_loss`` and ``head`` with the gradient as one product where it can be.

    Where the batch has one row and the loss's gradient is ``k (p - y)``
    (:meth:`~ortbench.training.losses.BaseLearningLoss.derivative_slope`), return a copy of
    ``with_loss`` with one more data input, after the others, ``<label>_scaled`` shaped like
    the labels (the labels times the gradient scale, which
    :meth:`~ortbench.training.steps.batches.BatchLoader.stage_scaled_labels` stages), and
    the head that reads it (see :meth:`LossHead.nodes`); else both unchanged. A graph
    that computes the loss in the same run still reads the difference ``p - y``; one
    that drops the loss (:func:`predicting`) has a ``Sub`` fewer.
    """
    label = next(i for i in with_loss.graph.input if i.name == head.label)
    shape = [d.dim_value for d in label.type.tensor_type.shape.dim]
    if len(shape) != 2 or shape[0] != 1 or head.loss.derivative_slope() is None:
        return with_loss, head
    head = head._replace(
        scaled_label=unique_name(tensor_names(with_loss.graph), f"{head.label}_scaled")
    )
    model = onnx.ModelProto()
    model.CopyFrom(with_loss)
    model.graph.input.append(
        helper.make_tensor_value_info(head.scaled_label, TensorProto.FLOAT, shape)
    )
    return model, head


def _and_scaled_label(feeds: Callable[[Batch], tuple], batch: Batch) -> tuple:
    """What ``feeds`` gives of ``batch``, then its scaled labels (see
    :func:`scaled_label_form`)."""
    return (*feeds(batch), batch.scaled_label)


def loss_shape(head: LossHead | None) -> list[int]:
    """The shape of the batch loss :func:`step_graph` outputs: (1, 1) when a head writes
    it (no node reduces it further), else a scalar."""
    return [1, 1] if head is not None else []


class OneGraphSteps(DoubleBufferedSteps):
    """What the step objects whose whole update is one graph of standard operators share:
    the weights in :class:`WeightBuffers`, and the rate's step factor, bound once.

    Parameters
    ----------
    with_loss : onnx.ModelProto
        The model with a static batch dimension, whose one output is the loss.
    weights : list of str
        The trained weights.
    rate : BaseLearningRate
        The update (SGD, with or without momentum).
    sessions : SessionMaker
        Device, threads and labels of the sessions.
    feeds : callable
        What the graph reads of a staged :class:`~ortbench.training.steps.batches.Batch`
        (see :func:`ortbench.training.estimators.full.batch_feeds`).
    loss_name : str
        The model's loss output.
    head : LossHead, optional
        The loss appended to the model, whose gradient is then written by hand (see
        :func:`step_graph`): the step factor is then in the batches' gradient scales
        (:meth:`BatchLoader.set_gradient_factor`), which ``feeds`` gives after the loss
        scales. On the CPU, where the losses are computed after the steps from their
        predictions, a one-row batch and a loss whose gradient is ``k (p - y)`` make the
        gradient one ``Gemm`` of the gradient scale by the prediction, less the labels
        times the scale, which the loader stages (:func:`scaled_label_form`).

    Raises
    ------
    OrtBenchError
        For ``LearningRateAdamW``, which only the on-device API runs.
    """

    large_sessions = 1

    def __init__(
        self,
        with_loss: onnx.ModelProto,
        weights: list[str],
        rate: BaseLearningRate,
        sessions: SessionMaker,
        feeds: Callable[[Batch], tuple],
        loss_name: str,
        head: LossHead | None = None,
    ):
        if isinstance(rate, LearningRateAdamW):
            raise OrtBenchError("LearningRateAdamW runs only with backend='ort-training'")
        self.weights = weights
        self._rate = rate
        self._sessions = sessions
        self._loss_name = loss_name
        self._loader: BatchLoader | None = None
        initial = get_initializers(with_loss, weights)
        self._buffers = WeightBuffers(initial, rate.n_states, sessions.ort_device, set())
        if head is not None and self._buffers.on_cpu:
            with_loss, head = scaled_label_form(with_loss, head)
        self._with_loss, self._head = with_loss, head
        scaled = head is not None and head.scaled_label is not None
        self._feeds = partial(_and_scaled_label, feeds) if scaled else feeds
        self._data_inputs = [i.name for i in with_loss.graph.input if i.name not in weights]
        self._step_scale = ScalarInput(sessions.ort_device)
        self._parity = 0

    def set_learning_rate(self, value: float) -> None:
        """Make the next steps use the learning rate ``value``."""
        factor = self._rate.step_factor(value)
        self._step_scale.set(factor)  # bound once, read by every run
        if self._head is not None and self._loader is not None:
            self._loader.set_gradient_factor(factor)

    def _use_loader(self, loader: BatchLoader) -> None:
        """Keep the loader whose batches the runs read: with a head, its gradient scales
        hold the step factor."""
        self._loader = loader
        if self._head is not None:
            loader.set_gradient_factor(float(self._step_scale))
            if self._head.scaled_label is not None:
                loader.stage_scaled_labels()

    def _bind_step_scale(self, binding: capi.Binding) -> None:
        """Bind the step factor, which a graph without a head reads."""
        if self._head is None:
            binding.bind_input("step_scale", self._step_scale.value)


class FusedSteps(OneGraphSteps):
    """Training steps of a model that outputs its loss (the parameters of
    :class:`OneGraphSteps`).

    Without a state, a step is one fused run and each weight is its own group: a
    coefficient's update then folds into the ``Gemm`` that computes its step. With momentum
    on CPU, a step is two runs: :func:`step_graph` writes the steps into the step row of the
    stacked buffers (see :mod:`.buffers`), then the momentum update reads each of the
    weight, state and step rows once (two matrix-vector products). Fused, that update
    would first copy every step into one flat tensor and then pass over it several times,
    each pass a node (figures in ``benchmarks/README.md``). On CUDA each weight is its own
    group, state included, in one fused run.
    """

    def __init__(
        self,
        with_loss: onnx.ModelProto,
        weights: list[str],
        rate: BaseLearningRate,
        sessions: SessionMaker,
        feeds: Callable[[Batch], tuple],
        loss_name: str,
        head: LossHead | None = None,
    ):
        super().__init__(with_loss, weights, rate, sessions, feeds, loss_name, head)
        with_loss, head = self._with_loss, self._head
        buffers = self._buffers
        self._stacked = buffers.has_state and buffers.on_cpu
        # with a head on the CPU, a step writes its prediction, and the losses are
        # computed after the epoch; otherwise each step writes its loss
        after_epoch = head is not None and buffers.on_cpu
        self._losses = BatchLosses(head.loss if after_epoch else None, loss_shape(head), sessions)
        self._written = head.predicted if after_epoch else loss_name
        if self._stacked:
            model = step_graph(with_loss, weights, loss_name, head)
            update, self._update_session, self._updates = buffers.stacked_update(rate, sessions)
            graphs = {"train_step": model, "update": update}
        else:
            model = fused_step_graph(with_loss, weights, rate, loss_name, head)
            graphs = {"fused_step": model}
        if after_epoch:
            model = predicting(model, loss_name, head)
        label = "train_step" if self._stacked else "fused_step"
        self._session = sessions.graph_session(model, label)
        self.graphs = {**graphs, **self._losses.graphs}

    def start_fit(self, loader: BatchLoader) -> None:
        """Bind each staged batch's feeds and its loss's slot, for both parities."""
        self._use_loader(loader)
        slots = self._losses.bind(loader)
        self._records = [
            tuple(self._bind(batch, p, slot) for p in (0, 1))
            for batch, slot in zip(loader.batches, slots)
        ]

    def _bind(self, batch: Batch, src: int, slot: capi.OrtValue) -> capi.Binding:
        """The run over ``batch`` reading the weights of parity ``src``: the fused step
        writes the other parity, the stacked steps' first run writes the step row; either
        writes the batch's loss, or its prediction, into ``slot``."""
        buffers, dst = self._buffers, 1 - src
        binding = capi.Binding(self._session)
        for name, value in zip(self._data_inputs, self._feeds(batch)):
            binding.bind_input(name, value)
        self._bind_step_scale(binding)
        binding.bind_output(self._written, slot)
        for i, name in enumerate(self.weights):
            binding.bind_input(name, buffers.weights[src][i])  # views of the flat buffers on CPU
            if self._stacked:
                binding.bind_output(f"{name}_grad", buffers.grads[i])
                continue
            binding.bind_output(f"{name}_new", buffers.weights[dst][i])
            if buffers.has_state:
                binding.bind_input(f"{name}_state", buffers.states[src][i])
                binding.bind_output(f"{name}_state_new", buffers.states[dst][i])
        return binding

    def run_epoch(self) -> float:
        """Train on every staged batch; return the epoch's loss (mean over samples)."""
        parity = self._parity
        if self._stacked:
            updates = self._updates
            for runs in self._records:
                runs[parity].run()
                updates[parity].run()
                parity = 1 - parity
        else:
            for runs in self._records:
                runs[parity].run()
                parity = 1 - parity
        self._parity = parity
        return self._losses.mean()
