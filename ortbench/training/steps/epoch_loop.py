"""A whole epoch in one onnxruntime run: an ONNX ``Scan`` whose body is the fused step.

Each run of :class:`~ortbench.training.steps.fused.FusedSteps` pays onnxruntime's per-run
dispatch. Here the body is :func:`~ortbench.training.steps.fused.fused_step_graph` with each
weight its own group; the ``Scan`` hands it batch ``i`` of the staged epoch (every batch
stacked, ``(n_batches, batch_size, ...)``, in the epoch's shuffled order) and carries the
weights and the optimizer state from one iteration to the next. The per-batch losses come
out as the scan's output, so the epoch's loss is the same weighted mean as the per-step
run's; where the loss is a hand-written head, the scan gives every batch's prediction
instead and nodes after it compute all the batches' losses at once, so that the body runs
only the nodes the step needs (at batch 1, a squared error's gradient is then one node:
see :class:`~ortbench.training.steps.fused.OneGraphSteps`). The last batch needs no special
case: the loader pads it with rows of sample weight 0, as it does for the per-step run,
and its loss weighs its real rows only.

``Scan`` rather than ``Loop``: a ``Loop`` body would slice batch ``i`` with one ``Gather``
per data input and pass its condition through, nodes that ``Scan``'s own slicing saves
(``benchmarks/README.md`` has the counts).

The outer graph reads the weights of one parity through per-weight views of the flat
buffers (:class:`~ortbench.training.steps.buffers.WeightBuffers`) and writes the other parity's;
the flat optimizer state is split into per-weight tensors before the scan and joined after
it, once per epoch. Every binding is made once per fit: an epoch is one run.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from ..errors import OrtBenchError
from ..graphs.builder import GraphBuilder
from ..graphs.loss_graph import LossHead
from ..graphs.nodes import drop_unread
from ..learning_rates import BaseLearningRate
from ..losses import batch_losses_nodes
from ..runtime import capi
from ..runtime.sessions import SessionMaker
from .batch_losses import BatchLosses
from .batches import Batch, BatchLoader
from .fused import OneGraphSteps, fused_step_graph, loss_shape, predicting


def _dims(value: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value for d in value.type.tensor_type.shape.dim]


def epoch_loop_graph(
    with_loss: onnx.ModelProto,
    weights: list[str],
    rate: BaseLearningRate,
    loss_name: str,
    n_batches: int,
    state_width: int | None = None,
    head: LossHead | None = None,
) -> onnx.ModelProto:
    """One epoch of training as one graph: a ``Scan`` over the staged batches.

    Parameters
    ----------
    with_loss : onnx.ModelProto
        The model with a static batch dimension, whose one output is the loss.
    weights : list of str
        The trained weights.
    rate : BaseLearningRate
        The update (SGD, with or without momentum).
    loss_name : str
        The model's loss output.
    n_batches : int
        The batches of an epoch (the scan's length).
    state_width : int, optional
        The length of the flat optimizer state (see
        :class:`~ortbench.training.steps.buffers.WeightBuffers`), for a rate with a state.
    head : LossHead, optional
        The loss appended to the model, whose gradient is written by hand (see
        :func:`~ortbench.training.steps.fused.step_graph`).

    Returns
    -------
    onnx.ModelProto
        Inputs: ``<x>_epoch`` for each data input ``<x>`` of ``with_loss``, its batches
        stacked on a new first axis; ``<w>_before`` for each weight; without a head
        ``step_scale`` (scalar, the rate's step factor); then ``state_before`` (flat)
        when the rate keeps a state. Outputs: ``<w>_after`` for each weight,
        ``state_after`` (flat) with a state, then ``losses``, the loss of each batch
        before its update (``(n_batches, 1, 1)`` with a head, computed after the scan by
        :func:`~ortbench.training.losses.batch_losses_nodes`).
    """
    step = fused_step_graph(with_loss, weights, rate, loss_name, head)
    if head is not None:
        # the body gives its prediction instead of its loss, and keeps only the loss's
        # gradient: the losses are computed after the scan, over the whole epoch
        step = predicting(step, loss_name, head)
    body = step.graph
    opset = next(o.version for o in step.opset_import if o.domain in ("", "ai.onnx"))
    inputs = {i.name: i for i in body.input}
    data = [i.name for i in with_loss.graph.input if i.name not in weights]
    carried = [w for w in weights for w in ([w, f"{w}_state"] if rate.n_states else [w])]

    # the body is the fused step, its inputs reordered as Scan reads them (the carried
    # values, then batch i of each staged input the body reads); step_scale, where read,
    # is the outer graph's
    outputs = {o.name: o for o in body.output}
    read = {name for node in body.node for name in node.input}
    sliced = [name for name in data if name in read]
    scan_body = helper.make_graph(
        list(body.node),
        "epoch_step",
        [*(inputs[name] for name in carried), *(inputs[name] for name in sliced)],
        [*(outputs[f"{name}_new"] for name in carried), body.output[-1]],
        list(body.initializer),
    )

    b = GraphBuilder("epoch_loop", opset=opset, prefix="epoch_")
    for name in data:
        b.input(f"{name}_epoch", [n_batches, *_dims(inputs[name])])
    initial = {w: b.input(f"{w}_before", _dims(inputs[w])) for w in weights}
    if head is None:
        b.input("step_scale", [])
    if rate.n_states:
        sizes = [int(np.prod(_dims(inputs[w]))) for w in weights]
        padding = state_width - sum(sizes)
        pieces = b.op(
            "Split",
            b.input("state_before", [state_width]),
            b.const([*sizes, padding] if padding else sizes, np.int64),
            outputs=len(sizes) + bool(padding),
        )
        pieces = pieces if isinstance(pieces, tuple) else (pieces,)
        for w, piece in zip(weights, pieces):
            shape = b.const(_dims(inputs[w]), np.int64)
            initial[f"{w}_state"] = b.op("Reshape", piece, shape)
    finals = [f"{name}_after" for name in carried]
    b.nodes.append(
        helper.make_node(
            "Scan",
            [*(initial[name] for name in carried), *(f"{name}_epoch" for name in sliced)],
            [*finals, "losses" if head is None else "predictions"],
            name="epoch_loop",
            body=scan_body,
            num_scan_inputs=len(sliced),
        )
    )
    if head is not None:
        label, shares = f"{head.label}_epoch", f"{head.loss_scale}_epoch"
        batch_losses_nodes(head.loss, b, label, "predictions", shares, "losses")
    for name in weights:
        b.output(f"{name}_after", _dims(inputs[name]))
    if rate.n_states:
        states = [f for f, name in zip(finals, carried) if name not in weights]
        flat = [b.op("Reshape", f, b.const([-1], np.int64)) for f in states]
        if padding:
            flat.append(b.const(np.zeros(padding)))
        b.op("Concat", *flat, axis=0, name="state_after")
        b.output("state_after", [state_width])
    b.output("losses", [n_batches, *loss_shape(head)])
    model = b.to_model()
    drop_unread(model.graph)  # the loss's derivative, which the head's nodes write too
    return model


class EpochLoopSteps(OneGraphSteps):
    """Training steps of a model that outputs its loss: one run per epoch.

    The parameters of :class:`~ortbench.training.steps.fused.OneGraphSteps`; each loop
    iteration runs the step of :class:`~ortbench.training.steps.fused.FusedSteps`.

    Raises
    ------
    OrtBenchError
        For ``LearningRateAdamW``, or a device other than the CPU (the staged epoch is one
        host buffer there only).
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
        if not self._buffers.on_cpu:
            raise OrtBenchError("the epoch loop runs on the CPU only: use device='cpu'")
        self.graphs: dict[str, onnx.ModelProto | bytes] = {}
        self._n_batches = 0
        self._losses = BatchLosses(None, loss_shape(head), sessions)  # the loop writes them

    def start_fit(self, loader: BatchLoader) -> None:
        """Build the loop for the loader's number of batches (when it changed) and bind
        the staged epoch, for both parities."""
        self._use_loader(loader)
        if len(loader) != self._n_batches:
            self._n_batches = len(loader)
            width = self._buffers.group_shapes["weights"][0]
            model = epoch_loop_graph(
                self._with_loss,
                self.weights,
                self._rate,
                self._loss_name,
                self._n_batches,
                width if self._buffers.has_state else None,
                self._head,
            )
            self.graphs = {"epoch_loop": model}
            self._session = self._sessions.graph_session(model, "epoch_loop")
        self._losses.bind(loader)
        epoch = loader.staged_epoch()
        self._runs = tuple(self._bind(epoch, p) for p in (0, 1))

    def _bind(self, epoch: Batch, src: int) -> capi.Binding:
        """The run over the staged ``epoch`` reading parity ``src``, writing the other."""
        buffers, dst = self._buffers, 1 - src
        binding = capi.Binding(self._session)
        for name, value in zip(self._data_inputs, self._feeds(epoch)):
            binding.bind_input(f"{name}_epoch", value)
        self._bind_step_scale(binding)
        for name, before, after in zip(self.weights, buffers.weights[src], buffers.weights[dst]):
            binding.bind_input(f"{name}_before", before)  # views of the flat buffers
            binding.bind_output(f"{name}_after", after)
        if buffers.has_state:
            binding.bind_input("state_before", buffers.states[src][0])
            binding.bind_output("state_after", buffers.states[dst][0])
        binding.bind_output("losses", self._losses.every_batch())
        return binding

    def run_epoch(self) -> float:
        """Train on every staged batch in one run; return the epoch's loss (mean over
        samples)."""
        self._runs[self._parity].run()
        self._parity = 1 - self._parity
        return self._losses.mean()
