"""Rules of the pooling operators: MaxPool, AveragePool, GlobalAveragePool."""

from __future__ import annotations

import numpy as np
import onnx

from ...errors import OrtBenchError
from ...graphs.nodes import node_attributes
from .conv import transposed_window, window_geometry
from .reduce import spread
from .registry import rule
from .shape import scatter_back


@rule("MaxPool")
def _max_pool(ctx, node, g):
    attrs = node_attributes(node)
    if attrs.get("storage_order", 0):
        raise OrtBenchError(
            f"portable gradient of MaxPool (node {node.name!r}): storage_order=1 is not supported"
        )
    # each output's gradient goes to the element it took: the node's indices output, or the
    # same pooling run again for them (flat positions over the whole tensor)
    if len(node.output) > 1 and node.output[1]:
        indices = node.output[1]
    else:
        indices = ctx.b.op("MaxPool", node.input[0], outputs=2, **attrs)[1]
    return [scatter_back(ctx, node.input[0], indices, g[0])]


@rule("AveragePool")
def _average_pool(ctx, node, g):
    attrs = node_attributes(node)
    if attrs.get("ceil_mode", 0) or any(d != 1 for d in attrs.get("dilations", [])):
        raise OrtBenchError(
            f"portable gradient of AveragePool (node {node.name!r}): ceil_mode and "
            f"dilations are not supported"
        )
    kernel, strides, pads, _ = window_geometry(ctx, node)
    b = ctx.b
    share = g[0]
    if any(pads) and not attrs.get("count_include_pad", 0):
        # a window's divisor is its count of real elements; the same pooling of ones with
        # the pads counted gives that count over the kernel's size
        one = onnx.numpy_helper.from_array(np.ones(1, np.float32))
        ones = b.op("ConstantOfShape", ctx.joined([1, 1], ctx.dims(node.input[0], 2)), value=one)
        real = b.op(
            "AveragePool",
            ones,
            kernel_shape=kernel,
            strides=strides,
            pads=pads,
            count_include_pad=1,
        )
        share = b.op("Div", share, real)
    # every channel of every sample on its own, spread back by one uniform window
    rows = b.op("Reshape", share, ctx.joined([-1, 1], ctx.dims(node.output[0], 2)))
    window = b.const(np.full([1, 1, *kernel], 1.0 / np.prod(kernel), np.float32))
    spread_back = transposed_window(ctx, node, rows, window)
    return [b.op("Reshape", spread_back, ctx.shape_of(node.input[0]))]


@rule("GlobalAveragePool")
def _global_average_pool(ctx, node, g):
    return [spread(ctx, g[0], node.input[0], node.output[0], mean=True)]
