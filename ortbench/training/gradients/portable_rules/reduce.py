"""Rules of the reductions: ReduceSum and ReduceMean."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...graphs.nodes import node_attributes
from .registry import rule


def _reduce_axes(ctx, node) -> tuple[str | None, int]:
    """The reduced axes (a tensor name; None: all of them) and ``keepdims``."""
    attrs = node_attributes(node)
    if len(node.input) > 1 and node.input[1]:
        return node.input[1], attrs.get("keepdims", 1)
    if "axes" in attrs:  # opsets before 13 (ReduceMean before 18)
        return ctx.b.const(attrs["axes"], np.int64), attrs.get("keepdims", 1)
    return None, attrs.get("keepdims", 1)


def spread(ctx, grad: str, x: str, y: str, mean: bool = False) -> str:
    """The gradient of a sum (``mean``: a mean) of ``x`` giving ``y``, whose gradient
    ``grad`` has ``y``'s rank with ones on the reduced axes."""
    expanded = ctx.b.op("Expand", grad, ctx.b.op("Shape", x))
    if not mean:
        return expanded
    count = ctx.b.op(
        "Div",
        ctx.b.op("Cast", ctx.b.op("Size", x), to=TensorProto.FLOAT),
        ctx.b.op("Cast", ctx.b.op("Size", y), to=TensorProto.FLOAT),
    )
    return ctx.b.op("Div", expanded, count)


@rule("ReduceSum", "ReduceMean")
def _reduce(ctx, node, g):
    x = node.input[0]
    axes, keepdims = _reduce_axes(ctx, node)
    grad = g[0]
    if not keepdims:
        rank = ctx.rank(x)
        all_axes = ctx.b.const(list(range(rank)), np.int64) if axes is None else axes
        grad = ctx.b.op("Unsqueeze", grad, all_axes)
    return [spread(ctx, grad, x, node.output[0], mean=node.op_type == "ReduceMean"), None]
