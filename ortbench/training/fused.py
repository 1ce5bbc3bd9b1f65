"""Full training in one graph of standard operators (the portable backend).

The model with its loss, the loss's gradient with respect to every weight (built by
:mod:`ortbench.training.portable`) and the learning rate's update are one ONNX graph, so a
step is one onnxruntime run on any onnxruntime build, and momentum (which the on-device
API's optimizers lack) is just more nodes of the same graph. Weights and optimizer states
are double-buffered (:class:`WeightBuffers`): the run reads one parity and writes the
other, and every binding is made once per batch and parity before the first step.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .errors import OrtBenchError
from .graph_builder import GraphBuilder
from .graph_tools import get_initializers, weights_as_inputs
from .iobinding import CachedBinding, make_session
from .learning_rates import BaseLearningRate, LearningRateAdamW
from .portable import vjp_graph
from .runtime import cpu_scalar, ort_device
from .weights import WeightBuffers, flat_width


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
    Inputs: the model's data inputs (X, labels, sample weights), each weight ``<w>``, each
    flat group ``<g>`` (when it is not a weight itself), ``step_scale`` (scalar, the
    rate's step factor, -lr for SGD), then ``<g>_state`` when the rate keeps a state.
    Outputs: ``<g>_new`` (and ``<g>_state_new``) for each group, then the loss of the
    batch (before the update).
    """
    weights = [w for names in groups.values() for w in names]
    step = vjp_graph(weights_as_inputs(with_loss, weights), weights, fill_grad=True)
    opset = next((o.version for o in step.opset_import if o.domain in ("", "ai.onnx")), 21)
    b = GraphBuilder("update", opset=opset, prefix="update_")
    step_scale = b.input("step_scale", [])
    shapes = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in step.graph.input}
    outputs = []
    for group, names in groups.items():
        if names == [group]:
            weight, grad, shape = group, f"{group}_grad", shapes[group]
        else:  # one flat update: the per-weight nodes would cost 1 to 3 us each
            size = int(sum(np.prod(shapes[n]) for n in names))
            shape = [flat_width(size)]
            weight = b.input(group, shape)
            flat = [b.op("Reshape", f"{n}_grad", b.const([-1], np.int64)) for n in names]
            if shape[0] > size:  # the flat tensor's zero padding (see weights.py)
                flat.append(b.const(np.zeros(shape[0] - size)))
            grad = b.op("Concat", *flat, axis=0)
        states = [b.input(f"{group}_state", shape)] if rate.n_states else []
        new_weight, new_states = rate.update_nodes(b, step_scale, weight, grad, states)
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


class FusedSteps:
    """Training steps of a model that outputs its loss, one fused run each."""

    def __init__(
        self,
        with_loss: onnx.ModelProto,
        weights: list[str],
        rate: BaseLearningRate,
        device: str,
        session_options,
        providers: list,
        loss_name: str,
    ):
        if isinstance(rate, LearningRateAdamW):
            raise OrtBenchError("LearningRateAdamW runs only with backend='ort-training'")
        self.weights = weights
        self._rate = rate
        self._data_inputs = [i.name for i in with_loss.graph.input if i.name not in weights]
        initial = get_initializers(with_loss, weights)
        self._buffers = WeightBuffers(initial, rate.n_states, ort_device(device), set())
        model = fused_step_graph(with_loss, self._buffers.groups, rate, loss_name)
        self.graphs = {"fused_step": model}
        self._session = make_session(
            model.SerializeToString(), session_options("fused_step"), providers
        )
        self._loss_name = loss_name
        self._step_scale = np.zeros((), dtype=np.float32)
        self._loss_out = np.zeros((), dtype=np.float32)
        self._parity = 0

    def set_learning_rate(self, value: float) -> None:
        # bound once: every step reads this memory
        self._step_scale[()] = self._rate.step_factor(value)

    def start_fit(self, batches: list[tuple[tuple, int]]) -> None:
        """Bind each batch's feeds (in the graph's input order) for both parities."""
        buffers, self._steps = self._buffers, []
        for feeds, length in batches:
            pair = []
            for src, dst in ((0, 1), (1, 0)):
                binding = CachedBinding(self._session)
                for name, value in zip(self._data_inputs, feeds):
                    binding.bind_input(name, value)
                binding.bind_input("step_scale", cpu_scalar(self._step_scale))
                for name, value in zip(self.weights, buffers.weights[src]):
                    binding.bind_input(name, value)  # views of the groups below on CPU
                for i, (group, names) in enumerate(buffers.groups.items()):
                    if names != [group]:
                        binding.bind_input(group, buffers.group_weights[src][i])
                    binding.bind_output(f"{group}_new", buffers.group_weights[dst][i])
                    if buffers.has_state:
                        binding.bind_input(f"{group}_state", buffers.states[src][i])
                        binding.bind_output(f"{group}_state_new", buffers.states[dst][i])
                binding.bind_output(self._loss_name, cpu_scalar(self._loss_out))
                pair.append(binding)
            self._steps.append((pair, length))

    def run_epoch(self) -> float:
        parity, total, count, out = self._parity, 0.0, 0, self._loss_out
        for pair, length in self._steps:
            pair[parity].run()
            parity = 1 - parity
            total += float(out) * length
            count += length
        self._parity = parity
        return total / count

    def get_state(self) -> dict[str, np.ndarray]:
        return self._buffers.get(self._parity)

    def get_optimizer_state(self) -> list[np.ndarray] | None:
        """Copies of the momentum state, None without one."""
        buffers = self._buffers
        return buffers.get_states(self._parity) if buffers.has_state else None

    def set_optimizer_state(self, arrays: list[np.ndarray]) -> None:
        self._buffers.set_states(self._parity, arrays)

    def shape(self, name: str) -> tuple:
        return self._buffers.shape(name)

    def set(self, name: str, array: np.ndarray) -> None:
        self._buffers.set(self._parity, name, array)
