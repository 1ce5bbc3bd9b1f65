"""Rules of the normalizations: BatchNormalization (inference statistics),
LayerNormalization, InstanceNormalization, Softmax and LogSoftmax."""

from __future__ import annotations

import numpy as np

from ...errors import OrtBenchError
from ...graphs.nodes import node_attributes
from .registry import rule


def _statistics(ctx, x: str, axes: list[int], epsilon: float) -> tuple[str, str]:
    """The mean of ``x`` over ``axes`` and the inverse of its standard deviation (with
    ``epsilon`` added to the variance), both with ones on these axes."""
    b = ctx.b
    mean = ctx.reduce("ReduceMean", x, axes)
    deviation = b.op("Sub", x, mean)
    var = ctx.reduce("ReduceMean", b.op("Mul", deviation, deviation), axes)
    inv_std = b.op("Reciprocal", b.op("Sqrt", b.op("Add", var, b.const(epsilon))))
    return mean, inv_std


def _through_standardization(ctx, gn: str, normalized: str, inv_std: str, axes: list[int]) -> str:
    """The gradient of x from the gradient ``gn`` of ``normalized`` = (x - mean) * inv_std,
    the statistics over ``axes``: inv_std (gn - mean(gn) - n mean(gn n)), n = normalized."""
    b = ctx.b
    centered = b.op("Sub", gn, ctx.reduce("ReduceMean", gn, axes))
    along = b.op("Mul", normalized, ctx.reduce("ReduceMean", b.op("Mul", gn, normalized), axes))
    return b.op("Mul", b.op("Sub", centered, along), inv_std)


@rule("Softmax")
def _softmax(ctx, node, g):
    y, axis = node.output[0], node_attributes(node).get("axis", -1)
    gy = ctx.b.op("Mul", g[0], y)
    total = ctx.reduce("ReduceSum", gy, [axis])
    return [ctx.b.op("Sub", gy, ctx.b.op("Mul", y, total))]


@rule("LogSoftmax")
def _log_softmax(ctx, node, g):
    y, axis = node.output[0], node_attributes(node).get("axis", -1)
    total = ctx.reduce("ReduceSum", g[0], [axis])
    return [ctx.b.op("Sub", g[0], ctx.b.op("Mul", ctx.b.op("Exp", y), total))]


@rule("BatchNormalization")
def _batch_normalization(ctx, node, g):
    attrs = node_attributes(node)
    x, scale, bias, mean, var = node.input
    b = ctx.b
    rank = ctx.rank(x)
    if rank is None:
        raise OrtBenchError(f"portable gradient of BatchNormalization: unknown rank of {x!r}")
    others = [0, *range(2, rank)]  # every axis but the channels'

    def per_channel(name: str) -> str:  # (C,) as (C, 1, ...) against (N, C, ...)
        if rank == 2:
            return name
        return b.op("Unsqueeze", name, b.const(list(range(1, rank - 1)), np.int64))

    eps = b.const(attrs.get("epsilon", 1e-5))
    inv_std = b.op("Reciprocal", b.op("Sqrt", b.op("Add", var, eps)))
    centered = b.op("Sub", x, per_channel(mean))
    grads: list = [None] * 5
    if ctx.needs(x):
        grads[0] = b.op("Mul", g[0], per_channel(b.op("Mul", scale, inv_std)))
    summed = ctx.reduce("ReduceSum", g[0], others, keepdims=0)
    if ctx.needs(scale) or ctx.needs(var):
        weighted = ctx.reduce("ReduceSum", b.op("Mul", g[0], centered), others, keepdims=0)
        if ctx.needs(scale):
            grads[1] = b.op("Mul", weighted, inv_std)
        if ctx.needs(var):  # d/dvar (var + eps)^-1/2 = -1/2 inv_std^3
            cubed = b.op("Mul", inv_std, b.op("Mul", inv_std, inv_std))
            grads[4] = b.op("Mul", b.op("Mul", weighted, scale), b.op("Mul", cubed, b.const(-0.5)))
    if ctx.needs(bias):
        grads[2] = summed
    if ctx.needs(mean):
        grads[3] = b.op("Neg", b.op("Mul", summed, b.op("Mul", scale, inv_std)))
    return grads


@rule("LayerNormalization")
def _layer_normalization(ctx, node, g):
    attrs = node_attributes(node)
    if any(grad is not None for grad in g[1:]):
        raise OrtBenchError(
            f"portable gradient of LayerNormalization (node {node.name!r}): its mean and "
            f"inverse standard deviation outputs are read downstream, which is not supported"
        )
    x, scale = node.input[:2]
    y = node.output[0]
    b = ctx.b
    rank = ctx.rank(x)
    if rank is None:
        raise OrtBenchError(f"portable gradient of LayerNormalization: unknown rank of {x!r}")
    axes = list(range(attrs.get("axis", -1) % rank, rank))
    # the statistics again (the node's optional outputs hold them when it has them)
    if len(node.output) > 2 and node.output[1] and node.output[2]:
        mean, inv_std = node.output[1], node.output[2]
    else:
        mean, inv_std = _statistics(ctx, x, axes, attrs.get("epsilon", 1e-5))
    normalized = b.op("Mul", b.op("Sub", x, mean), inv_std)
    grads: list = [None, None, None]
    if ctx.needs(x):
        grads[0] = _through_standardization(
            ctx, b.op("Mul", g[0], scale), normalized, inv_std, axes
        )
    if ctx.needs(scale):
        grads[1] = ctx.unbroadcast(b.op("Mul", g[0], normalized), scale, y)
    if len(node.input) > 2 and ctx.needs(node.input[2]):
        grads[2] = ctx.unbroadcast(g[0], node.input[2], y)
    return grads


@rule("InstanceNormalization")
def _instance_normalization(ctx, node, g):
    # each sample's channel standardized over the spatial axes, then a scale and a bias
    # per channel
    x, scale, bias = node.input
    b = ctx.b
    rank = ctx.rank(x)
    if rank is None or rank < 3:
        raise OrtBenchError(
            f"portable gradient of InstanceNormalization: unknown rank, or no spatial axis, "
            f"of {x!r}"
        )
    axes = list(range(2, rank))

    def per_channel(name: str) -> str:  # (C,) as (C, 1, ...) against (N, C, ...)
        return b.op("Unsqueeze", name, b.const(list(range(1, rank - 1)), np.int64))

    mean, inv_std = _statistics(ctx, x, axes, node_attributes(node).get("epsilon", 1e-5))
    normalized = b.op("Mul", b.op("Sub", x, mean), inv_std)
    grads: list = [None, None, None]
    if ctx.needs(x):
        gn = b.op("Mul", g[0], per_channel(scale))
        grads[0] = _through_standardization(ctx, gn, normalized, inv_std, axes)
    if ctx.needs(scale):
        grads[1] = ctx.reduce("ReduceSum", b.op("Mul", g[0], normalized), [0, *axes], keepdims=0)
    if ctx.needs(bias):
        grads[2] = ctx.reduce("ReduceSum", g[0], [0, *axes], keepdims=0)
    return grads
