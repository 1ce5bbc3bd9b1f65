"""Rules of the matrix products: MatMul (batched and broadcast) and Gemm."""

from __future__ import annotations

import numpy as np

from ...errors import OrtBenchError
from ...graphs.nodes import node_attributes
from .registry import rule


def _swap_last(rank: int) -> list[int]:
    return [*range(rank - 2), rank - 1, rank - 2]


@rule("MatMul")
def _matmul(ctx, node, g):
    a, b = node.input
    y = node.output[0]
    ra, rb = ctx.rank(a), ctx.rank(b)
    if ra is None or rb is None or min(ra, rb) < 2:
        raise OrtBenchError(
            f"portable gradient of MatMul (node {node.name!r}): both operands need a known "
            f"rank of at least 2, got {ra} and {rb}"
        )
    bld = ctx.b
    if ra == rb == 2:  # Gemm's transpose flags read the operands in place: no Transpose node
        return [
            bld.op("Gemm", g[0], b, transB=1) if ctx.needs(a) else None,
            bld.op("Gemm", a, g[0], transA=1) if ctx.needs(b) else None,
        ]
    ga = gb = None
    if ctx.needs(a):  # G @ B^T, summed over the batch axes A was broadcast along
        ga = bld.op("MatMul", g[0], bld.op("Transpose", b, perm=_swap_last(rb)))
        ga = ctx.unbroadcast(ga, a, y)
    if ctx.needs(b):
        if rb == 2:  # a weight shared by every batch: one product over the stacked rows
            k, n = ctx.static_shape(b, node)
            rows_a = bld.op("Reshape", a, bld.const([-1, k], np.int64))
            rows_g = bld.op("Reshape", g[0], bld.const([-1, n], np.int64))
            gb = bld.op("Gemm", rows_a, rows_g, transA=1)
        else:
            gb = bld.op("MatMul", bld.op("Transpose", a, perm=_swap_last(ra)), g[0])
            gb = ctx.unbroadcast(gb, b, y)
    return [ga, gb]


@rule("Gemm")
def _gemm(ctx, node, g):
    attrs = node_attributes(node)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    trans_a, trans_b = attrs.get("transA", 0), attrs.get("transB", 0)
    a, b = node.input[:2]
    bld = ctx.b
    ga = gb = None
    # dY/dA: alpha * G @ op(B)^T, transposed back when A was; likewise for B
    if ctx.needs(a):
        ga = (
            bld.op("Gemm", g[0], b, alpha=alpha, transB=0 if trans_b else 1)
            if not trans_a
            else bld.op("Gemm", b, g[0], alpha=alpha, transA=trans_b, transB=1)
        )
    if ctx.needs(b):
        gb = (
            bld.op("Gemm", a, g[0], alpha=alpha, transA=0 if trans_a else 1)
            if not trans_b
            else bld.op("Gemm", g[0], a, alpha=alpha, transA=1, transB=trans_a)
        )
    grads = [ga, gb]
    if len(node.input) > 2 and ctx.needs(node.input[2]):
        scaled = g[0] if beta == 1.0 else bld.op("Mul", g[0], bld.const(beta))
        grads.append(ctx.unbroadcast(scaled, node.input[2], node.output[0]))
    return grads
