"""The rule of Conv (1-D, 2-D and more; stride, padding, dilation, groups).

The input's gradient is the transposed convolution of the output's gradient with the same
weight; the weight's gradient is a convolution of the input by the output's gradient with
the batch and channel axes swapped (strides and dilations trade places), grouped when the
convolution is.
"""

from __future__ import annotations

import numpy as np

from ...errors import OrtBenchError
from ...graphs.nodes import node_attributes
from .registry import rule


def window_geometry(ctx, node) -> tuple[list[int], list[int], list[int], list[int]]:
    """Kernel, strides, pads (begins then ends) and dilations of a Conv or pooling node."""
    attrs = node_attributes(node)
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    if auto_pad not in (b"NOTSET", "NOTSET"):
        raise OrtBenchError(
            f"portable gradient of {node.op_type} (node {node.name!r}): auto_pad is not "
            f"supported, only explicit pads"
        )
    if node.op_type == "Conv":
        kernel = ctx.static_shape(node.input[1], node, start=2)
    else:
        kernel = list(attrs["kernel_shape"])
    n = len(kernel)
    strides = list(attrs.get("strides", [1] * n))
    pads = list(attrs.get("pads", [0] * 2 * n))
    dilations = list(attrs.get("dilations", [1] * n))
    return kernel, strides, pads, dilations


def transposed_window(ctx, node, grad: str, weight: str, group: int = 1) -> str:
    """ConvTranspose of ``grad`` by ``weight`` over the window of ``node``, padded back to
    the spatial size of the node's input (the rows a stride left out get zeros)."""
    kernel, strides, pads, dilations = window_geometry(ctx, node)
    n = len(kernel)
    spatial = (ctx.shapes.get(node.input[0]) or [None] * (n + 2))[2:]
    static = None not in spatial
    extra = [
        (spatial[k] + pads[k] + pads[n + k] - dilations[k] * (kernel[k] - 1) - 1) % strides[k]
        if static
        else 0
        for k in range(n)
    ]
    back = ctx.b.op(
        "ConvTranspose",
        grad,
        weight,
        strides=strides,
        pads=pads,
        dilations=dilations,
        group=group,
        output_padding=extra,
    )
    if static or all(s == 1 for s in strides):
        return back
    missing = ctx.b.op("Sub", ctx.dims(node.input[0], 2), ctx.dims(back, 2))
    return ctx.b.op("Pad", back, ctx.joined([0] * (n + 2) + [0, 0], missing))


@rule("Conv")
def _conv(ctx, node, g):
    x, w = node.input[:2]
    b = ctx.b
    group = node_attributes(node).get("group", 1)
    kernel, strides, pads, dilations = window_geometry(ctx, node)
    n = len(kernel)
    grads: list = [None, None]
    if ctx.needs(x):
        grads[0] = transposed_window(ctx, node, g[0], w, group)
    if ctx.needs(w):
        in_per_group = ctx.static_shape(w, node)[1]
        swap = [1, 0, *range(2, n + 2)]
        # the input as a batch of its channels, each group's samples as that group's
        # channels: (C/group, group * N, *spatial); the gradient as the weight
        if group == 1:
            xs = b.op("Transpose", x, perm=swap)
        else:
            spatial = ctx.dims(x, 2)
            xs = b.op("Reshape", x, ctx.joined([0, group, in_per_group], spatial))
            xs = b.op("Transpose", xs, perm=[2, 1, 0, *range(3, n + 3)])
            xs = b.op("Reshape", xs, ctx.joined([in_per_group, -1], spatial))
        window = b.op(
            "Conv",
            xs,
            b.op("Transpose", g[0], perm=swap),
            strides=dilations,
            dilations=strides,
            pads=pads,
            group=group,
        )
        # the last offsets can reach past the kernel where the pads end beyond the windows
        window = b.op(
            "Slice",
            window,
            b.const([0] * n, np.int64),
            b.const(kernel, np.int64),
            b.const(list(range(2, n + 2)), np.int64),
        )
        grads[1] = b.op("Transpose", window, perm=swap)
    if len(node.input) > 2 and ctx.needs(node.input[2]):
        grads.append(ctx.reduce("ReduceSum", g[0], [0, *range(2, n + 2)], keepdims=0))
    return grads
