"""Rules of the operators that move values without changing them: reshapes, transposes,
concatenation and splits, slices, gathers, broadcasts."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from ...errors import OrtBenchError
from ...graphs.nodes import node_attributes
from .registry import rule


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape_back(ctx, node, g):
    return [ctx.b.op("Reshape", g[0], ctx.shape_of(node.input[0]))]


@rule("Transpose")
def _transpose(ctx, node, g):
    perm = node_attributes(node).get("perm")
    if perm is None:
        perm = list(reversed(range(ctx.rank(node.input[0]))))
    inverse = [int(k) for k in np.argsort(perm)]
    return [ctx.b.op("Transpose", g[0], perm=inverse)]


@rule("Expand")
def _expand(ctx, node, g):
    return [ctx.unbroadcast(g[0], node.input[0], node.output[0]), None]


def _sizes_along(ctx, names: list[str], axis: int) -> str:
    """The 1-D tensor of the sizes of ``names`` along ``axis``."""
    b = ctx.b
    if b.opset >= 15:
        sizes = [b.op("Shape", x, start=axis, end=axis + 1) for x in names]
    else:
        bounds = b.const([axis], np.int64), b.const([axis + 1], np.int64)
        sizes = [b.op("Slice", b.op("Shape", x), *bounds) for x in names]
    return b.op("Concat", *sizes, axis=0) if len(sizes) > 1 else sizes[0]


@rule("Concat")
def _concat(ctx, node, g):
    if len(node.input) == 1:
        return [g[0]]
    axis = node_attributes(node)["axis"] % ctx.rank(node.output[0])
    split = _sizes_along(ctx, list(node.input), axis)
    return list(ctx.b.op("Split", g[0], split, axis=axis, outputs=len(node.input)))


@rule("Split")
def _split(ctx, node, g):
    axis = node_attributes(node).get("axis", 0) % ctx.rank(node.input[0])
    parts = [grad if grad is not None else ctx.zeros_like(out) for grad, out in zip(g, node.output)]
    joined = ctx.b.op("Concat", *parts, axis=axis) if len(parts) > 1 else parts[0]
    return [joined, None]


def _positions(ctx, data: str) -> str:
    """An int64 tensor shaped like ``data`` holding each element's flat position."""
    b = ctx.b
    count = b.op("Size", data)
    flat = b.op("Range", b.const(0, np.int64), count, b.const(1, np.int64))
    return b.op("Reshape", flat, b.op("Shape", data))


def scatter_back(ctx, data: str, picked: str, grad: str) -> str:
    """Add ``grad`` into zeros shaped like ``data`` at the flat positions ``picked``.

    Parameters
    ----------
    ctx : RuleContext
        The rule's context.
    data : str
        The tensor the values were picked from.
    picked : str
        An int64 tensor shaped like ``grad``: the flat position in ``data`` of each value.
    grad : str
        The gradient of the picked values.

    Returns
    -------
    str
        The gradient of ``data``.
    """
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


@rule("Slice")
def _slice(ctx, node, g):
    # slicing the positions with the node's own arguments says where each output came from
    picked = ctx.b.op("Slice", _positions(ctx, node.input[0]), *node.input[1:])
    return [scatter_back(ctx, node.input[0], picked, g[0])]


@rule("Gather")
def _gather(ctx, node, g):
    axis = node_attributes(node).get("axis", 0)
    picked = ctx.b.op("Gather", _positions(ctx, node.input[0]), node.input[1], axis=axis)
    return [scatter_back(ctx, node.input[0], picked, g[0]), None]
