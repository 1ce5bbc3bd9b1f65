"""Reverse-mode differentiation of ONNX graphs into standard ONNX operators only.

onnxruntime-training's gradient graphs use training-only kernels (ReluGrad, FusedMatMul,
BroadcastGradientArgs, YieldOp...), so they run on its 1.19.2 build alone. The graphs built
here use the default ONNX domain only and run on any onnxruntime build, CUDA included.

:func:`vjp_graph` appends, after a model's nodes, the vector-Jacobian product of its float
outputs: given ``<y>_grad`` for each output y, it computes ``<x>_grad`` for the requested
inputs and initializers. :func:`split_forward_backward` cuts that graph in two, the
forward pass handing the backward pass the intermediate values it needs. Each operator's rule is a small function of :data:`RULES`; an
operator without one stops with an error naming it and the node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import NoGradientError, OrtBenchError
from .graph_builder import GraphBuilder
from .graph_tools import FLOAT_TYPES, inferred_shapes, node_attributes
from .relu_gradient import is_large, masked_gradient


class _Context:
    """What a rule needs: the builder, static shapes, and attribute access."""

    def __init__(self, b: GraphBuilder, shapes: dict[str, list]):
        self.b = b
        self.shapes = shapes

    def rank(self, name: str) -> int | None:
        shape = self.shapes.get(name)
        return None if shape is None else len(shape)

    def unbroadcast(self, grad: str, like: str, out: str) -> str:
        """Sum ``grad`` (shaped like ``out``) back to the shape of ``like`` (numpy broadcasting).

        Axes are found from static shapes: leading axes ``out`` has in excess, and axes where
        ``like`` has a static 1 and ``out`` does not. A dynamic dimension of ``like`` is
        taken as not broadcast.
        """
        xs, ys = self.shapes.get(like), self.shapes.get(out)
        if xs is None or ys is None:
            raise OrtBenchError(f"portable gradient: unknown rank for {like!r} or {out!r}")
        lead = len(ys) - len(xs)
        axes = list(range(lead)) + [
            lead + k for k, d in enumerate(xs) if d == 1 and ys[lead + k] != 1
        ]
        if not axes:
            return grad
        b = self.b
        if axes == list(range(lead)):  # leading axes only: dropping them gives the shape
            return b.op("ReduceSum", grad, b.const(axes, np.int64), keepdims=0)
        summed = b.op("ReduceSum", grad, b.const(axes, np.int64), keepdims=1)
        if lead == 0:  # same rank: keeping the summed axes as 1s gives the shape
            return summed
        return b.op("Reshape", summed, self.shape_of(like))

    def shape_of(self, name: str) -> str:
        """The shape of ``name``: a constant when it is fully static, else a Shape node."""
        shape = self.shapes.get(name)
        if shape is not None and all(d is not None for d in shape):
            return self.b.const(shape, np.int64)
        return self.b.op("Shape", name)


def _zeros_like_where(ctx, condition, grad, positive: bool):
    zero = ctx.b.const(0.0)
    return (
        ctx.b.op("Where", condition, grad, zero)
        if positive
        else ctx.b.op("Where", condition, zero, grad)
    )


# Each rule: (ctx, node, output gradients) -> gradients of the node's inputs (None: none).
Rule = Callable[[_Context, onnx.NodeProto, list], list]


def _identity(ctx, node, g):
    return [g[0]]


def _cast(ctx, node, g):
    return [g[0]]  # float to float only: non-float inputs get no gradient anyway


def _add(ctx, node, g):
    a, b = node.input
    return [ctx.unbroadcast(g[0], a, node.output[0]), ctx.unbroadcast(g[0], b, node.output[0])]


def _sub(ctx, node, g):
    a, b = node.input
    negated = ctx.b.op("Neg", g[0])
    return [ctx.unbroadcast(g[0], a, node.output[0]), ctx.unbroadcast(negated, b, node.output[0])]


def _mul(ctx, node, g):
    a, b = node.input
    y = node.output[0]
    return [
        ctx.unbroadcast(ctx.b.op("Mul", g[0], b), a, y),
        ctx.unbroadcast(ctx.b.op("Mul", g[0], a), b, y),
    ]


def _div(ctx, node, g):
    a, b = node.input
    y = node.output[0]
    ga = ctx.b.op("Div", g[0], b)
    gb = ctx.b.op("Neg", ctx.b.op("Mul", ga, y))  # -g * a / b^2 = -(g / b) * y
    return [ctx.unbroadcast(ga, a, y), ctx.unbroadcast(gb, b, y)]


def _neg(ctx, node, g):
    return [ctx.b.op("Neg", g[0])]


def _matmul(ctx, node, g):
    a, b = node.input
    ranks = {ctx.rank(a), ctx.rank(b)}
    if ranks != {2}:
        raise OrtBenchError(f"portable gradient: MatMul of rank {ranks} tensors is not supported")
    # Gemm's transpose flags read the operands in place: no Transpose node
    return [ctx.b.op("Gemm", g[0], b, transB=1), ctx.b.op("Gemm", a, g[0], transA=1)]


def _gemm(ctx, node, g):
    attrs = node_attributes(node)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    trans_a, trans_b = attrs.get("transA", 0), attrs.get("transB", 0)
    a, b = node.input[:2]
    bld = ctx.b
    # dY/dA: alpha * G @ op(B)^T, transposed back when A was; likewise for B
    ga = (
        bld.op("Gemm", g[0], b, alpha=alpha, transB=0 if trans_b else 1)
        if not trans_a
        else bld.op("Gemm", b, g[0], alpha=alpha, transA=trans_b, transB=1)
    )
    gb = (
        bld.op("Gemm", a, g[0], alpha=alpha, transA=0 if trans_a else 1)
        if not trans_b
        else bld.op("Gemm", g[0], a, alpha=alpha, transA=1, transB=trans_a)
    )
    grads = [ga, gb]
    if len(node.input) > 2 and node.input[2]:
        scaled = g[0] if beta == 1.0 else bld.op("Mul", g[0], bld.const(beta))
        grads.append(ctx.unbroadcast(scaled, node.input[2], node.output[0]))
    return grads


def _relu(ctx, node, g):
    if is_large(ctx.shapes.get(node.output[0])):
        return [masked_gradient(ctx.b, node.input[0], g[0])]
    positive = ctx.b.op("Greater", node.input[0], ctx.b.const(0.0))
    return [_zeros_like_where(ctx, positive, g[0], True)]


def _leaky_relu(ctx, node, g):
    alpha = node_attributes(node).get("alpha", 0.01)
    positive = ctx.b.op("Greater", node.input[0], ctx.b.const(0.0))
    return [ctx.b.op("Where", positive, g[0], ctx.b.op("Mul", g[0], ctx.b.const(alpha)))]


def _sigmoid(ctx, node, g):
    y = node.output[0]
    slope = ctx.b.op("Mul", y, ctx.b.op("Sub", ctx.b.const(1.0), y))
    return [ctx.b.op("Mul", g[0], slope)]


def _tanh(ctx, node, g):
    y = node.output[0]
    slope = ctx.b.op("Sub", ctx.b.const(1.0), ctx.b.op("Mul", y, y))
    return [ctx.b.op("Mul", g[0], slope)]


def _softmax(ctx, node, g):
    y, axis = node.output[0], node_attributes(node).get("axis", -1)
    gy = ctx.b.op("Mul", g[0], y)
    total = ctx.b.op("ReduceSum", gy, ctx.b.const([axis], np.int64), keepdims=1)
    return [ctx.b.op("Sub", gy, ctx.b.op("Mul", y, total))]


def _log_softmax(ctx, node, g):
    y, axis = node.output[0], node_attributes(node).get("axis", -1)
    total = ctx.b.op("ReduceSum", g[0], ctx.b.const([axis], np.int64), keepdims=1)
    return [ctx.b.op("Sub", g[0], ctx.b.op("Mul", ctx.b.op("Exp", y), total))]


def _exp(ctx, node, g):
    return [ctx.b.op("Mul", g[0], node.output[0])]


def _log(ctx, node, g):
    return [ctx.b.op("Div", g[0], node.input[0])]


def _abs(ctx, node, g):
    return [ctx.b.op("Mul", g[0], ctx.b.op("Sign", node.input[0]))]


def _sqrt(ctx, node, g):
    return [ctx.b.op("Div", g[0], ctx.b.op("Mul", node.output[0], ctx.b.const(2.0)))]


def _pow(ctx, node, g):
    x, p = node.input
    y = node.output[0]
    # d/dx x^p = p * x^(p-1); d/dp x^p = y * log(x)
    lowered = ctx.b.op("Pow", x, ctx.b.op("Sub", p, ctx.b.const(1.0)))
    gx = ctx.b.op("Mul", g[0], ctx.b.op("Mul", p, lowered))
    gp = ctx.b.op("Mul", g[0], ctx.b.op("Mul", y, ctx.b.op("Log", x)))
    return [ctx.unbroadcast(gx, x, y), ctx.unbroadcast(gp, p, y)]


def _clip(ctx, node, g):
    x = node.input[0]
    keep = None
    for position, op in ((1, "GreaterOrEqual"), (2, "LessOrEqual")):
        if len(node.input) > position and node.input[position]:
            inside = ctx.b.op(op, x, node.input[position])
            keep = inside if keep is None else ctx.b.op("And", keep, inside)
    return [g[0] if keep is None else _zeros_like_where(ctx, keep, g[0], True)]


def _where(ctx, node, g):
    condition, a, b = node.input
    y = node.output[0]
    return [
        None,
        ctx.unbroadcast(_zeros_like_where(ctx, condition, g[0], True), a, y),
        ctx.unbroadcast(_zeros_like_where(ctx, condition, g[0], False), b, y),
    ]


def _reshape_back(ctx, node, g):
    return [ctx.b.op("Reshape", g[0], ctx.shape_of(node.input[0]))]


def _transpose(ctx, node, g):
    perm = node_attributes(node).get("perm")
    if perm is None:
        perm = list(reversed(range(ctx.rank(node.input[0]))))
    inverse = [int(k) for k in np.argsort(perm)]
    return [ctx.b.op("Transpose", g[0], perm=inverse)]


def _concat(ctx, node, g):
    axis = node_attributes(node)["axis"] % ctx.rank(node.output[0])
    if ctx.b.opset >= 15:
        sizes = [ctx.b.op("Shape", x, start=axis, end=axis + 1) for x in node.input]
    else:
        bounds = ctx.b.const([axis], np.int64), ctx.b.const([axis + 1], np.int64)
        sizes = [ctx.b.op("Slice", ctx.b.op("Shape", x), *bounds) for x in node.input]
    split = ctx.b.op("Concat", *sizes, axis=0) if len(sizes) > 1 else sizes[0]
    if len(node.input) == 1:
        return [g[0]]
    return list(ctx.b.op("Split", g[0], split, axis=axis, outputs=len(node.input)))


def _positions(ctx, data: str) -> str:
    """An int64 tensor shaped like ``data`` holding each element's flat position."""
    b = ctx.b
    count = b.op("Size", data)
    flat = b.op("Range", b.const(0, np.int64), count, b.const(1, np.int64))
    return b.op("Reshape", flat, b.op("Shape", data))


def _scatter_back(ctx, data: str, picked: str, grad: str) -> str:
    """Add ``grad`` into zeros shaped like ``data`` at the flat positions ``picked``."""
    b = ctx.b
    if b.opset < 16:
        raise OrtBenchError(
            f"portable gradient of a gather needs opset >= 16 (ScatterElements with "
            f"reduction), the model has {b.opset}"
        )
    minus_one = b.const([-1], np.int64)
    flat_size = b.op("Reshape", b.op("Size", data), b.const([1], np.int64))
    zeros = b.op(
        "ConstantOfShape", flat_size, value=numpy_helper.from_array(np.zeros(1, np.float32))
    )
    scattered = b.op(
        "ScatterElements",
        zeros,
        b.op("Reshape", picked, minus_one),
        b.op("Reshape", grad, minus_one),
        axis=0,
        reduction="add",
    )
    return b.op("Reshape", scattered, b.op("Shape", data))


def _slice(ctx, node, g):
    # slicing the positions with the node's own arguments says where each output came from
    picked = ctx.b.op("Slice", _positions(ctx, node.input[0]), *node.input[1:])
    return [_scatter_back(ctx, node.input[0], picked, g[0])]


def _gather(ctx, node, g):
    axis = node_attributes(node).get("axis", 0)
    picked = ctx.b.op("Gather", _positions(ctx, node.input[0]), node.input[1], axis=axis)
    return [_scatter_back(ctx, node.input[0], picked, g[0]), None]


def _reduce_axes(ctx, node):
    attrs = node_attributes(node)
    if len(node.input) > 1 and node.input[1]:
        return node.input[1], attrs.get("keepdims", 1)
    if "axes" in attrs:  # opsets before 13 (ReduceMean before 18)
        return ctx.b.const(attrs["axes"], np.int64), attrs.get("keepdims", 1)
    return None, attrs.get("keepdims", 1)


def _reduce_sum(ctx, node, g, mean: bool = False):
    x = node.input[0]
    axes, keepdims = _reduce_axes(ctx, node)
    grad = g[0]
    if not keepdims:
        rank = ctx.rank(x)
        all_axes = ctx.b.const(list(range(rank)), np.int64) if axes is None else axes
        grad = ctx.b.op("Unsqueeze", grad, all_axes)
    expanded = ctx.b.op("Expand", grad, ctx.b.op("Shape", x))
    if mean:
        count = ctx.b.op(
            "Div",
            ctx.b.op("Cast", ctx.b.op("Size", x), to=TensorProto.FLOAT),
            ctx.b.op("Cast", ctx.b.op("Size", node.output[0]), to=TensorProto.FLOAT),
        )
        expanded = ctx.b.op("Div", expanded, count)
    return [expanded]


def _reduce_mean(ctx, node, g):
    return _reduce_sum(ctx, node, g, mean=True)


RULES: dict[str, Rule] = {
    "Identity": _identity,
    "Cast": _cast,
    "Add": _add,
    "Sub": _sub,
    "Mul": _mul,
    "Div": _div,
    "Neg": _neg,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Relu": _relu,
    "LeakyRelu": _leaky_relu,
    "Sigmoid": _sigmoid,
    "Tanh": _tanh,
    "Softmax": _softmax,
    "LogSoftmax": _log_softmax,
    "Exp": _exp,
    "Log": _log,
    "Abs": _abs,
    "Sqrt": _sqrt,
    "Pow": _pow,
    "Clip": _clip,
    "Where": _where,
    "Reshape": _reshape_back,
    "Flatten": _reshape_back,
    "Squeeze": _reshape_back,
    "Unsqueeze": _reshape_back,
    "Transpose": _transpose,
    "Concat": _concat,
    "Slice": _slice,
    "Gather": _gather,
    "ReduceSum": _reduce_sum,
    "ReduceMean": _reduce_mean,
}


def vjp_graph(model: onnx.ModelProto, wrt: list[str], fill_grad: bool = False) -> onnx.ModelProto:
    """The model plus the gradients of its float outputs with respect to ``wrt``.

    Inputs: the model's, then ``<y>_grad`` for each float output ``y`` (not with
    ``fill_grad``, which takes ones). Outputs: ``<x>_grad`` for each name of ``wrt``, then
    the model's own outputs.
    """
    if _opset(model) < 13:
        raise OrtBenchError(
            f"portable gradients need ai.onnx opset >= 13, the model has {_opset(model)}"
        )
    shapes, types = inferred_shapes(model)
    graph = model.graph
    outputs = [o.name for o in graph.output if types.get(o.name) in FLOAT_TYPES]
    b = GraphBuilder("vjp", opset=_opset(model), prefix="vjp_")
    ctx = _Context(b, shapes)
    grads: dict[str, list[str]] = {}
    for name in outputs:
        if fill_grad:
            ones = numpy_helper.from_array(np.ones(1, np.float32))
            grads[name] = [b.op("ConstantOfShape", b.op("Shape", name), value=ones)]
        else:
            grads[name] = [b.input(f"{name}_grad", shapes.get(name))]
    nodes = list(graph.node)
    for k in sorted(_between(nodes, set(wrt), set(outputs)), reverse=True):
        node = nodes[k]
        upstream = [_total(b, grads.get(o)) for o in node.output]
        if all(u is None for u in upstream):
            continue
        rule = RULES.get(node.op_type)
        if rule is None or node.domain not in ("", "ai.onnx"):
            raise NoGradientError(
                f"no portable gradient for operator {node.op_type!r} (node {node.name!r})",
                node.op_type,
                node.name,
            )
        if any(u is None for u in upstream):
            raise OrtBenchError(f"portable gradient: node {node.name!r} has an unused output")
        for name, grad in zip(node.input, rule(ctx, node, upstream)):
            if grad is not None and name and types.get(name) in FLOAT_TYPES:
                grads.setdefault(name, []).append(grad)
    made = {o for node in b.nodes for o in node.output}
    for name in wrt:
        total = _total(b, grads.get(name))
        if total is None:
            raise OrtBenchError(f"portable gradient: {name!r} does not reach any output")
        if total in made:  # a value of the gradient nodes: give it the output's name
            made.discard(total)
            b.rename(total, f"{name}_grad")
        else:  # an input, or a value already output under another name
            b.op("Identity", total, name=f"{name}_grad")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    result.graph.input.extend(b.inputs)
    result.graph.initializer.extend(b.initializers)
    result.graph.node.extend(b.nodes)
    own = list(result.graph.output)
    del result.graph.output[:]
    result.graph.output.extend(
        helper.make_tensor_value_info(f"{name}_grad", TensorProto.FLOAT, shapes.get(name))
        for name in wrt
    )
    result.graph.output.extend(own)
    return result


def split_forward_backward(
    model: onnx.ModelProto, wrt: list[str]
) -> tuple[onnx.ModelProto, onnx.ModelProto, list[str]]:
    """The forward and gradient graphs of :func:`vjp_graph`, split so nothing runs twice.

    Returns ``(forward, backward, stash)``. ``forward`` is the model, which also outputs
    ``stash``: the intermediate values the gradient nodes read (activations, matrix
    product inputs...). ``backward`` holds the gradient nodes alone. Its inputs: the
    stash, the model's inputs it reads (weights, X), and ``<y>_grad`` for each float
    output ``y``; its outputs: ``<x>_grad`` for each name of ``wrt``.
    """
    full = vjp_graph(model, wrt)
    graph, count = full.graph, len(model.graph.node)
    forward_nodes, backward_nodes = graph.node[:count], graph.node[count:]
    made = {o for node in backward_nodes for o in node.output}
    needed = list(
        dict.fromkeys(i for node in backward_nodes for i in node.input if i and i not in made)
    )
    forward_made = {o for node in forward_nodes for o in node.output}
    stash = [name for name in needed if name in forward_made]
    shapes, types = inferred_shapes(model)

    def info(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(
            name, types.get(name, TensorProto.FLOAT), shapes.get(name)
        )

    forward = onnx.ModelProto()
    forward.CopyFrom(model)
    own = {o.name for o in forward.graph.output}
    forward.graph.output.extend(info(name) for name in stash if name not in own)
    inputs = {i.name: i for i in graph.input}
    initializers = [i for i in graph.initializer if i.name in needed]
    backward_graph = helper.make_graph(
        list(backward_nodes),
        "backward",
        [inputs[n] for n in needed if n in inputs] + [info(n) for n in stash],
        list(graph.output[: len(wrt)]),
        initializers,
    )
    backward = helper.make_model(backward_graph, opset_imports=list(model.opset_import))
    backward.ir_version = model.ir_version
    return forward, backward, stash


def _total(b: GraphBuilder, parts: list[str] | None) -> str | None:
    """One gradient from several contributions (summed once, then cached)."""
    if not parts:
        return None
    if len(parts) > 1:
        parts[:] = [b.add_all(list(parts))]
    return parts[0]


def _between(nodes: list, sources: set[str], sinks: set[str]) -> set[int]:
    """Positions of the nodes on a path from a source value to a sink value."""
    reach_forward, forward = set(sources), set()
    for k, node in enumerate(nodes):
        if reach_forward.intersection(node.input):
            forward.add(k)
            reach_forward.update(node.output)
    reach_back, both = set(sinks), set()
    for k in reversed(range(len(nodes))):
        if k in forward and reach_back.intersection(nodes[k].output):
            both.add(k)
            reach_back.update(nodes[k].input)
    return both


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 21)
