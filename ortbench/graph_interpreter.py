"""What the ONNX graph runners over torch (:mod:`ortbench.torch_graph`) and JAX
(:mod:`ortbench.jax_graph`) share: a node's attributes, operator helpers written once for
any array library, the nodes some outputs need, and the one-line refusal of an operator a
runner lacks. Importing this module imports neither library.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper


class Node:
    """A node's attributes (with defaults) and the graph's opset."""

    def __init__(self, node: onnx.NodeProto, opset: int):
        self.proto = node
        self.opset = opset
        self.attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}

    def get(self, name: str, default=None):
        value = self.attributes.get(name, default)
        return value.decode() if isinstance(value, bytes) else value


#: An operator: (node, input values, None for an omitted input) -> output values.
Op = Callable[[Node, list], list]


def ints(tensor) -> list[int]:
    """A static integer tensor (a shape, axes; any library's, on any device) as a list."""
    return [int(v) for v in tensor.reshape(-1).tolist()]


def axis_argument(node: Node, inputs: list, position: int, name: str = "axes"):
    """An axes list given as an input (newer opsets) or an attribute (older ones)."""
    if len(inputs) > position and inputs[position] is not None:
        return ints(inputs[position])
    value = node.get(name)
    return None if value is None else list(value)


def unary(function) -> Op:
    return lambda node, x: [function(x[0])]


def binary(function) -> Op:
    return lambda node, x: [function(x[0], x[1])]


def variadic(function) -> Op:
    """An operator of any number of inputs, folded pairwise (Sum, Max, Min)."""

    def op(node, x):
        out = x[0]
        for other in x[1:]:
            out = function(out, other)
        return [out]

    return op


def softmax(function, axis: str) -> Op:
    """Softmax or LogSoftmax through a library's ``function``, whose keyword ``axis``
    names the axis: over one axis from opset 13, over the flattened tail before."""

    def op(node, x):
        data = x[0]
        if node.opset >= 13:
            return [function(data, **{axis: node.get("axis", -1)})]
        start = node.get("axis", 1) % data.ndim
        flat = data.reshape(math.prod(data.shape[:start]), -1)
        return [function(flat, **{axis: 1}).reshape(data.shape)]

    return op


def reduce(function, axis: str, keep: str) -> Op:
    """ReduceSum or ReduceMean through a library's ``function``, whose keywords ``axis``
    and ``keep`` take the axes (a tuple) and keepdims. ReduceSum takes its axes as an
    input from opset 13, the others from opset 18."""

    def op(node, x):
        data = x[0]
        axes = axis_argument(node, x, 1)
        if not axes:
            if node.get("noop_with_empty_axes", 0):
                return [data]
            axes = range(data.ndim)
        axes = tuple(a % data.ndim for a in axes)
        return [function(data, **{axis: axes, keep: bool(node.get("keepdims", 1))})]

    return op


def gemm(node: Node, x: list) -> list:
    """``Gemm`` with the array methods torch tensors and jax arrays share."""
    a = x[0].T if node.get("transA", 0) else x[0]
    b = x[1].T if node.get("transB", 0) else x[1]
    out = node.get("alpha", 1.0) * (a @ b)
    if len(x) > 2 and x[2] is not None:
        out = out + node.get("beta", 1.0) * x[2]
    return [out]


def reshape(node: Node, x: list) -> list:
    """``Reshape``: a 0 copies the input's dimension unless ``allowzero``."""
    data, shape = x[0], ints(x[1])
    if not node.get("allowzero", 0):
        shape = [data.shape[k] if d == 0 else d for k, d in enumerate(shape)]
    return [data.reshape(shape)]


def flatten(node: Node, x: list) -> list:
    """``Flatten``: the axes before ``axis`` as rows, the others as columns."""
    data = x[0]
    axis = node.get("axis", 1) % (data.ndim + 1) if data.ndim else 0
    return [data.reshape(math.prod(data.shape[:axis]), -1)]


def constant_array(node: Node) -> np.ndarray:
    """The value of a ``Constant`` node."""
    for name, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if name in node.attributes:
            return np.array(node.get(name), dtype)
    for name, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if name in node.attributes:
            return np.array(list(node.get(name)), dtype)
    return np.array(numpy_helper.to_array(node.get("value")))


def needed_nodes(graph: onnx.GraphProto, outputs: Sequence[str]) -> list[onnx.NodeProto]:
    """The nodes the outputs are computed from, in graph order."""
    producers = {o: n for n in graph.node for o in n.output}
    needed, stack = set(), list(outputs)
    while stack:
        node = producers.get(stack.pop())
        if node is not None and id(node) not in needed:
            needed.add(id(node))
            stack.extend(node.input)
    return [n for n in graph.node if id(n) in needed]


def unsupported(
    model: onnx.ModelProto, outputs: Sequence[str], ops: dict[str, Op], library: str
) -> str | None:
    """Why ``library`` cannot run the nodes the outputs need with ``ops``, or None.

    Parameters
    ----------
    model : onnx.ModelProto
        The graph.
    outputs : sequence of str
        The tensors to compute.
    ops : dict
        The operators (default domain) the runner executes.
    library : str
        The runner's name in the message.

    Returns
    -------
    str or None
        ``<library> runs no ONNX operator <op> (node <name>)`` for the first node it cannot
        run.
    """
    for node in needed_nodes(model.graph, outputs):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ops:
            domain = f"{node.domain}." if node.domain else ""
            return f"{library} runs no ONNX operator {domain}{node.op_type} (node {node.name!r})"
    return None


def graph_opset(model: onnx.ModelProto) -> int:
    """The model's ai.onnx opset."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def run_nodes(nodes: list[Node], ops: dict[str, Op], env: dict) -> dict:
    """Run ``nodes`` in order on the values of ``env`` (by name), adding their outputs."""
    for node in nodes:
        arguments = [env[name] if name else None for name in node.proto.input]
        results = ops[node.proto.op_type](node, arguments)
        for name, value in zip(node.proto.output, results):
            if name:
                env[name] = value
    return env
