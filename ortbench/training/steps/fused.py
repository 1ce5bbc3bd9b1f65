"""Full training in one graph of standard operators (the portable backend).

The model with its loss, the loss's gradient with respect to every weight (built by
:mod:`ortbench.training.gradients.portable`) and the learning rate's update are one ONNX graph, so a
step is one onnxruntime run on any onnxruntime build, and momentum (which the on-device
API's optimizers lack) is just more nodes of the same graph. Weights and optimizer states
are double-buffered (:class:`WeightBuffers`): the run reads one parity and writes the
other, and every binding is made once per batch and parity before the first step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import OrtBenchError
from ..gradients.portable import vjp_graph
from ..graphs.builder import GraphBuilder
from ..graphs.loading import fit_runtime
from ..graphs.weights import get_initializers, weights_as_inputs
from ..learning_rates import BaseLearningRate, LearningRateAdamW
from ..runtime import capi
from ..runtime.devices import ScalarInput, cpu_scalar
from ..runtime.sessions import SessionMaker
from .batches import Batch, BatchLoader
from .buffers import DoubleBufferedSteps, WeightBuffers, flat_width


def fused_step_graph(
    with_loss: onnx.ModelProto,
    groups: dict[str, list[str]],
    rate: BaseLearningRate,
    loss_name: str,
) -> onnx.ModelProto:
    """One training step as one graph.

    ``groups`` maps each tensor the update writes to the weights it holds: one flat
    tensor for every weight on CPU (their per-weight inputs view it, and it ends with zero
    padding to whole cache lines), or each weight alone.
    Inputs: the model's data inputs (X, labels, sample weights), each weight ``<w>``,
    ``step_scale`` (scalar, the rate's step factor, -lr for SGD), each flat group ``<g>``
    (when it is not a weight itself), then ``<g>_state`` when the rate keeps a state.
    Outputs: ``<g>_new`` (and ``<g>_state_new``) for each group, then the loss of the
    batch (before the update).
    """
    weights = [w for names in groups.values() for w in names]
    # the loss's gradient is seeded with the step factor instead of 1, so every gradient
    # comes out as the step itself: no Mul per group (per weight in the epoch loop)
    model = weights_as_inputs(with_loss, weights)
    step = vjp_graph(model, weights, seeds={loss_name: "step_scale"})
    opset = next((o.version for o in step.opset_import if o.domain in ("", "ai.onnx")), 21)
    b = GraphBuilder("update", opset=opset, prefix="update_")
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in step.graph.input}
    outputs = []
    for group, names in groups.items():
        if names == [group]:
            weight, grad, shape = group, f"{group}_grad", shapes[group]
        else:  # one flat update: per-weight nodes would each cost a kernel launch
            size = int(sum(np.prod(shapes[n]) for n in names))
            shape = [flat_width(size)]
            weight = b.input(group, shape)
            flat = [b.op("Reshape", f"{n}_grad", b.const([-1], np.int64)) for n in names]
            if shape[0] > size:  # the flat tensor's zero padding (see buffers.py)
                flat.append(b.const(np.zeros(shape[0] - size)))
            grad = b.op("Concat", *flat, axis=0)
        states = [b.input(f"{group}_state", shape)] if rate.n_states else []
        new_weight, new_states = rate.update_nodes(b, weight, grad, states)
        outputs.append(b.rename(new_weight, f"{group}_new"))
        outputs += [b.rename(s, f"{group}_state_new") for s in new_states]
    graph = step.graph
    graph.input.extend(b.inputs)
    graph.initializer.extend(b.initializers)
    graph.node.extend(b.nodes)
    del graph.output[:]
    graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs)
    graph.output.append(helper.make_tensor_value_info(loss_name, TensorProto.FLOAT, []))
    return step


class FusedStep(NamedTuple):
    """What one step of :class:`FusedSteps` runs over one staged batch."""

    #: The fused run reading the weights of parity 0, then the one reading parity 1.
    runs: tuple[capi.Binding, capi.Binding]
    #: The batch's real rows (the last batch may be padded).
    length: int


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
    ):
        if isinstance(rate, LearningRateAdamW):
            raise OrtBenchError("LearningRateAdamW runs only with backend='ort-training'")
        self.weights = weights
        self._rate = rate
        self._sessions = sessions
        self._feeds = feeds
        self._loss_name = loss_name
        self._data_inputs = [i.name for i in with_loss.graph.input if i.name not in weights]
        initial = get_initializers(with_loss, weights)
        self._buffers = WeightBuffers(initial, rate.n_states, sessions.ort_device, set())
        self._step_scale = ScalarInput(sessions.ort_device)
        self._parity = 0

    def set_learning_rate(self, value: float) -> None:
        """Make the next steps use the learning rate ``value``."""
        self._step_scale.set(self._rate.step_factor(value))  # bound once, read by every run


class FusedSteps(OneGraphSteps):
    """Training steps of a model that outputs its loss, one fused run each (the parameters
    of :class:`OneGraphSteps`)."""

    def __init__(
        self,
        with_loss: onnx.ModelProto,
        weights: list[str],
        rate: BaseLearningRate,
        sessions: SessionMaker,
        feeds: Callable[[Batch], tuple],
        loss_name: str,
    ):
        super().__init__(with_loss, weights, rate, sessions, feeds, loss_name)
        # without a state each weight is its own group: a coefficient's update then folds
        # into the Gemm that computes its step, where a flat update would first copy every
        # step into one tensor; a momentum update keeps the buffers' groups, as its nodes
        # per group would cost more than that copy (benchmarks/README.md)
        per_weight = {w: [w] for w in weights}
        self._groups = self._buffers.groups if rate.n_states else per_weight
        model = fused_step_graph(with_loss, self._groups, rate, loss_name)
        self.graphs = {"fused_step": model}
        self._session = sessions.session(fit_runtime(model).SerializeToString(), "fused_step")
        self._loss_out = np.zeros((), dtype=np.float32)

    def start_fit(self, loader: BatchLoader) -> None:
        """Bind each staged batch's feeds, for both parities."""
        self._n_samples = loader.n_samples
        self._records = [
            FusedStep(tuple(self._bind(batch, p) for p in (0, 1)), batch.length)
            for batch in loader.batches
        ]

    def _bind(self, batch: Batch, src: int) -> capi.Binding:
        """The fused run over ``batch`` reading parity ``src`` and writing the other one."""
        buffers, dst = self._buffers, 1 - src
        binding = capi.Binding(self._session)
        for name, value in zip(self._data_inputs, self._feeds(batch)):
            binding.bind_input(name, value)
        binding.bind_input("step_scale", self._step_scale.value)
        for name, value in zip(self.weights, buffers.weights[src]):
            binding.bind_input(name, value)  # views of the flat buffers on CPU
        binding.bind_output(self._loss_name, cpu_scalar(self._loss_out))
        if self._groups is not buffers.groups:  # each weight its own group
            for name, value in zip(self.weights, buffers.weights[dst]):
                binding.bind_output(f"{name}_new", value)
            return binding
        for i, (group, names) in enumerate(buffers.groups.items()):
            if names != [group]:
                binding.bind_input(group, buffers.group_weights[src][i])
            binding.bind_output(f"{group}_new", buffers.group_weights[dst][i])
            if buffers.has_state:
                binding.bind_input(f"{group}_state", buffers.states[src][i])
                binding.bind_output(f"{group}_state_new", buffers.states[dst][i])
        return binding

    def run_epoch(self) -> float:
        """Train on every staged batch; return the epoch's loss (mean over samples)."""
        parity, total, out = self._parity, 0.0, self._loss_out
        for runs, length in self._records:
            runs[parity].run()
            parity = 1 - parity
            total += float(out) * length
        self._parity = parity
        return total / self._n_samples
