"""RNN, LSTM and GRU nodes unrolled over their time steps into standard ONNX operators.

No portable gradient rule or peer runner reads a recurrent node as a whole. Where the
sequence length is static (torch's exporter fixes it, with a dynamic batch), the ONNX
spec's equations written step by step compute the same outputs from MatMul, Add, Split,
Squeeze, Unsqueeze, Concat, Sigmoid, Tanh, Relu, Mul and Sub, which every backend has:
:func:`unroll_recurrent` rewrites a whole model (what the torch and JAX peers run), and
:func:`unroll_node` writes one node's unrolled form into a builder (the portable backend
differentiates it there, the forward pass keeping onnxruntime's own kernel).

Supported: ``direction`` forward, reverse and bidirectional, ``layout`` 0 and 1, the
biases ``B``, ``initial_h`` (and ``initial_c``), GRU's ``linear_before_reset`` 0 and 1,
the default activations, and an RNN's Tanh, Relu or Sigmoid (torch's ``nn.RNN`` exports
its ``nonlinearity`` so). Refused in one line: ``clip``, other ``activations``,
``input_forget``, peepholes ``P``, a ``sequence_lens`` input, a sequence length shape
inference cannot tell.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import OrtBenchError
from .builder import GraphBuilder
from .nodes import node_attributes
from .shapes import inferred_shapes

#: The recurrent operators unrolled, with the number of gates each stacks in W and R.
GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}

#: The activations the unrolled equations apply, per direction.
_DEFAULT_ACTIVATIONS = {
    "RNN": ["Tanh"],
    "LSTM": ["Sigmoid", "Tanh", "Tanh"],
    "GRU": ["Sigmoid", "Tanh"],
}
#: The activations an RNN node may name, each direction its own.
_RNN_ACTIVATIONS = ("Tanh", "Relu", "Sigmoid")


def is_recurrent(node: onnx.NodeProto) -> bool:
    """Whether ``node`` is an RNN, LSTM or GRU node of the default domain."""
    return node.op_type in GATES and node.domain in ("", "ai.onnx")


@dataclass(frozen=True)
class Recurrence:
    """What one RNN, LSTM or GRU node computes, checked: its sizes, directions and inputs.

    Attributes
    ----------
    node : onnx.NodeProto
        The node.
    hidden : int
        ``hidden_size``.
    steps : int
        The static sequence length.
    reverse : tuple of bool
        For each direction, whether it runs from the last step to the first.
    layout : int
        0: (seq, batch, ...) tensors; 1: (batch, seq, ...).
    linear_before_reset : int
        GRU's: whether the reset gate multiplies the hidden state's product with R.
    bias, initial_h, initial_c : str or None
        The optional inputs given, by name.
    activations : tuple of str
        An RNN's activation in each direction (empty for LSTM and GRU, which have their
        defaults).
    """

    node: onnx.NodeProto
    hidden: int
    steps: int
    reverse: tuple[bool, ...]
    layout: int
    linear_before_reset: int
    bias: str | None
    initial_h: str | None
    initial_c: str | None
    activations: tuple[str, ...] = ()

    @property
    def gates(self) -> int:
        return GATES[self.node.op_type]


def _refuse(node: onnx.NodeProto, what: str) -> OrtBenchError:
    return OrtBenchError(
        f"{node.op_type} node {node.name!r} uses {what}, which ortbench does not unroll: "
        f"export it without (torch's nn.{node.op_type} does)"
    )


def _optional_input(node: onnx.NodeProto, position: int) -> str | None:
    """The name of the node's input at ``position``, None when absent or empty."""
    return node.input[position] if len(node.input) > position and node.input[position] else None


def recurrence(node: onnx.NodeProto, shapes: dict[str, list]) -> Recurrence:
    """Check ``node`` against what the unrolled equations compute and read its sizes.

    Parameters
    ----------
    node : onnx.NodeProto
        An RNN, LSTM or GRU node.
    shapes : dict of str to list
        Static shapes by name (None for an unknown dimension), as
        :func:`~ortbench.training.graphs.shapes.inferred_shapes` gives them.

    Returns
    -------
    Recurrence

    Raises
    ------
    OrtBenchError
        In one line naming the node and the attribute or input not supported, or saying
        that the sequence length is not static.
    """
    attributes = node_attributes(node)
    direction = attributes.get("direction", b"forward").decode()
    count = 2 if direction == "bidirectional" else 1
    activations = [a.decode() for a in attributes.get("activations", [])]
    rnn = node.op_type == "RNN"
    if rnn and len(activations) == count and set(activations) <= set(_RNN_ACTIVATIONS):
        pass  # one of the RNN's own per direction
    elif activations and activations != _DEFAULT_ACTIVATIONS[node.op_type] * count:
        raise _refuse(node, f"activations={activations}")
    for name in ("activation_alpha", "activation_beta", "clip"):
        if name in attributes:
            raise _refuse(node, f"{name}={attributes[name]}")
    if attributes.get("input_forget", 0):
        raise _refuse(node, "input_forget=1")
    if _optional_input(node, 4):
        raise _refuse(node, f"a sequence_lens input ({node.input[4]!r})")
    if node.op_type == "LSTM" and _optional_input(node, 7):
        raise _refuse(node, f"peepholes (input P {node.input[7]!r})")
    layout = attributes.get("layout", 0)
    shape = shapes.get(node.input[0])
    steps = shape[1 if layout else 0] if shape is not None and len(shape) == 3 else None
    if steps is None:
        raise OrtBenchError(
            f"{node.op_type} node {node.name!r} reads a sequence of unknown length "
            f"(input {node.input[0]!r} of shape {shape}): ortbench unrolls it over its time "
            f"steps; export the model with a fixed sequence length"
        )
    hidden = attributes.get("hidden_size") or (shapes.get(node.input[2]) or [None] * 3)[2]
    if not hidden:
        raise OrtBenchError(
            f"{node.op_type} node {node.name!r} has no hidden_size and R of unknown shape: "
            f"export it with hidden_size"
        )
    reverse = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
    return Recurrence(
        node=node,
        hidden=int(hidden),
        steps=int(steps),
        reverse=reverse[direction],
        layout=layout,
        linear_before_reset=attributes.get("linear_before_reset", 0),
        bias=_optional_input(node, 3),
        initial_h=_optional_input(node, 5),
        initial_c=_optional_input(node, 6) if node.op_type == "LSTM" else None,
        activations=tuple(activations or ["Tanh"] * count) if rnn else (),
    )


def _per_direction(b: GraphBuilder, name: str | None, count: int, axis: int) -> list:
    """``name`` cut along its direction axis into one tensor per direction (None for an
    absent input)."""
    if name is None:
        return [None] * count
    axes = b.const([axis], np.int64)
    if count == 1:
        return [b.op("Squeeze", name, axes)]
    parts = b.op("Split", name, b.const([1] * count, np.int64), axis=axis, outputs=count)
    return [b.op("Squeeze", part, axes) for part in parts]


def _split(b: GraphBuilder, name: str, sizes: list[int], axis: int = -1) -> tuple[str, ...]:
    """``name`` cut along ``axis`` into pieces of ``sizes``."""
    return b.op("Split", name, b.const(sizes, np.int64), axis=axis, outputs=len(sizes))


def _add(b: GraphBuilder, left: str | None, right: str | None) -> str | None:
    """``left + right``, either one alone when the other is absent (a zero state)."""
    if left is None or right is None:
        return right if left is None else left
    return b.op("Add", left, right)


def _time_steps(b: GraphBuilder, projected: str, steps: int, axis: int) -> list[str]:
    """The (batch, width) slice of each time step of ``projected`` along ``axis``."""
    axes = b.const([axis], np.int64)
    parts = [projected] if steps == 1 else _split(b, projected, [1] * steps, axis)
    return [b.op("Squeeze", part, axes) for part in parts]


def _lstm_step(b, projected, h, c, rt, hidden):
    """One LSTM step: gates i, o, f, c from the input's projection (biases included) and
    the previous state (None: zeros); returns the new hidden and cell states. The three
    sigmoid gates, contiguous in ONNX's order, go through one Sigmoid."""
    gates = _add(b, projected, None if h is None else b.op("MatMul", h, rt))
    sigmoid_gates, g = _split(b, gates, [3 * hidden, hidden])
    i, o, f = _split(b, b.op("Sigmoid", sigmoid_gates), [hidden] * 3)
    update = b.op("Mul", i, b.op("Tanh", g))
    kept = None if c is None else b.op("Mul", f, c)
    cell = _add(b, kept, update)
    return b.op("Mul", o, b.op("Tanh", cell)), cell


def _gru_step(b, projected, h, rt, recurrent_bias, hidden, linear_before_reset):
    """One GRU step: gates z, r, h from the input's projection (with W's bias, and R's
    too unless ``linear_before_reset``) and the previous state (None: zeros). ``rt`` is
    R transposed, cut in its (z, r) and h columns unless ``linear_before_reset``. The
    z and r gates go through one Sigmoid."""
    mixed = None  # what the previous state adds to the gates z, r (and h)
    if linear_before_reset:
        # r multiplies (h R_h + Rb_h): R's bias stays on this side
        mixed = _add(b, None if h is None else b.op("MatMul", h, rt), recurrent_bias)
    elif h is not None:
        mixed = b.op("MatMul", h, rt[0])
    if mixed is None:  # a zero state: r multiplies zeros
        xz, _, xh = _split(b, projected, [hidden] * 3)
        z, candidate = b.op("Sigmoid", xz), b.op("Tanh", xh)
    else:
        x_zr, xh = _split(b, projected, [2 * hidden, hidden])
        if linear_before_reset:
            mixed, hh = _split(b, mixed, [2 * hidden, hidden])
        z, r = _split(b, b.op("Sigmoid", b.op("Add", x_zr, mixed)), [hidden] * 2)
        if linear_before_reset:
            candidate = b.op("Tanh", b.op("Add", xh, b.op("Mul", r, hh)))
        else:
            candidate = b.op("Tanh", b.op("Add", xh, b.op("MatMul", b.op("Mul", r, h), rt[1])))
    # (1 - z) * candidate + z * h
    if h is None:
        return b.op("Sub", candidate, b.op("Mul", z, candidate))
    return b.op("Add", candidate, b.op("Mul", z, b.op("Sub", h, candidate)))


def _direction(b: GraphBuilder, rec: Recurrence, d: int, w, r, bias, h, c):
    """The hidden state at each time step of direction ``d`` (in time order), and its
    last hidden and cell states (c None for a GRU)."""
    x = rec.node.input[0]
    hidden, gates, time_axis = rec.hidden, rec.gates, 1 if rec.layout else 0
    projected = b.op("MatMul", x, b.op("Transpose", w, perm=[1, 0]))
    rt = b.op("Transpose", r, perm=[1, 0])
    if rec.node.op_type == "GRU" and not rec.linear_before_reset:
        rt = _split(b, rt, [2 * hidden, hidden], axis=1)  # the (z, r) and h columns
    recurrent_bias = None
    if bias is not None:
        wb, rb = _split(b, bias, [gates * hidden] * 2)
        if rec.node.op_type == "GRU" and rec.linear_before_reset:
            projected, recurrent_bias = b.op("Add", projected, wb), rb
        else:
            projected = b.op("Add", projected, b.op("Add", wb, rb))
    inputs = _time_steps(b, projected, rec.steps, time_axis)
    order = range(rec.steps - 1, -1, -1) if rec.reverse[d] else range(rec.steps)
    states = [None] * rec.steps
    for t in order:
        if rec.node.op_type == "RNN":
            h = b.op(
                rec.activations[d], _add(b, inputs[t], None if h is None else b.op("MatMul", h, rt))
            )
        elif rec.node.op_type == "LSTM":
            h, c = _lstm_step(b, inputs[t], h, c, rt, hidden)
        else:
            h = _gru_step(b, inputs[t], h, rt, recurrent_bias, hidden, rec.linear_before_reset)
        states[t] = h
    return states, h, c


def _concat(b: GraphBuilder, parts: list[str], axis: int) -> str:
    return b.op("Concat", *parts, axis=axis) if len(parts) > 1 else parts[0]


def _stacked_sequence(b: GraphBuilder, rec: Recurrence, sequences: list[list[str]]) -> str:
    """Y: (seq, directions, batch, hidden), or (batch, seq, directions, hidden) with
    layout 1, from each direction's hidden states."""
    time_axis, direction_axis = (1, 2) if rec.layout else (0, 1)
    axes = b.const([time_axis, direction_axis], np.int64)
    per_direction = [
        _concat(b, [b.op("Unsqueeze", h, axes) for h in states], time_axis) for states in sequences
    ]
    return _concat(b, per_direction, direction_axis)


def _stacked_state(b: GraphBuilder, rec: Recurrence, states: list[str]) -> str:
    """Y_h or Y_c: (directions, batch, hidden), or (batch, directions, hidden) with
    layout 1."""
    axis = 1 if rec.layout else 0
    axes = b.const([axis], np.int64)
    return _concat(b, [b.op("Unsqueeze", s, axes) for s in states], axis)


def unroll_node(
    b: GraphBuilder, node: onnx.NodeProto, shapes: dict[str, list], wanted: list[bool]
) -> list[str | None]:
    """Write the unrolled form of an RNN, LSTM or GRU node into ``b``.

    Parameters
    ----------
    b : GraphBuilder
        Where the nodes (and their int64 constants) go; they read the node's inputs by
        their names.
    node : onnx.NodeProto
        The RNN, LSTM or GRU node.
    shapes : dict of str to list
        Static shapes by name; the sequence length must be known.
    wanted : list of bool
        For each output of the node (Y, Y_h, Y_c), whether to compute it.

    Returns
    -------
    list of str or None
        The name of the value standing for each output of the node, None where not
        wanted (or absent).

    Raises
    ------
    OrtBenchError
        See :func:`recurrence`.
    """
    rec = recurrence(node, shapes)
    count = len(rec.reverse)
    state_axis = 1 if rec.layout else 0
    w = _per_direction(b, node.input[1], count, 0)
    r = _per_direction(b, node.input[2], count, 0)
    bias = _per_direction(b, rec.bias, count, 0)
    h0 = _per_direction(b, rec.initial_h, count, state_axis)
    c0 = _per_direction(b, rec.initial_c, count, state_axis)
    runs = [_direction(b, rec, d, w[d], r[d], bias[d], h0[d], c0[d]) for d in range(count)]
    wanted = [k < len(node.output) and bool(node.output[k]) and wanted[k] for k in range(3)]
    results: list[str | None] = [None, None, None]
    if wanted[0]:
        results[0] = _stacked_sequence(b, rec, [states for states, _, _ in runs])
    if wanted[1]:
        results[1] = _stacked_state(b, rec, [h for _, h, _ in runs])
    if wanted[2] and node.op_type == "LSTM":
        results[2] = _stacked_state(b, rec, [c for _, _, c in runs])
    return results[: len(node.output)]


def unroll_recurrent(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every RNN, LSTM and GRU node of its main graph unrolled
    (:func:`unroll_node`).

    Parameters
    ----------
    model : onnx.ModelProto
        The model, not changed.

    Returns
    -------
    onnx.ModelProto
        ``model`` itself when it has no recurrent node, else a copy whose unrolled nodes
        write the recurrent nodes' outputs under their names (the outputs nothing reads
        are left out).

    Raises
    ------
    OrtBenchError
        See :func:`recurrence`.
    """
    if not any(is_recurrent(n) for n in model.graph.node):
        return model
    shapes, _ = inferred_shapes(model)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    nodes = []
    for k, node in enumerate(graph.node):
        if not is_recurrent(node):
            nodes.append(node)
            continue
        b = GraphBuilder("unrolled", opset=opset, prefix=f"{node.name or node.op_type}_{k}_")
        values = unroll_node(b, node, shapes, [o in read for o in node.output])
        for value, name in zip(values, node.output):
            if value is not None:
                b.rename(value, name)
        nodes.extend(b.nodes)
        graph.initializer.extend(b.initializers)
    del graph.node[:]
    graph.node.extend(nodes)
    return result
