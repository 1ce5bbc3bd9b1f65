"""The one table of vector-Jacobian rules, and what a rule is handed.

A rule is a function ``(ctx, node, grads) -> input gradients``: ``grads`` holds the
gradient of each of the node's outputs (None for an output nothing reads), and the rule
returns one name or None per input of the node. Rules append standard ONNX nodes to
``ctx.b`` only. Each family module registers its rules with :func:`rule`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from ...errors import OrtBenchError
from ...graphs.builder import GraphBuilder
from ..kernel_forms import COLUMN_SUM_FROM, column_sum

Rule = Callable[["RuleContext", onnx.NodeProto, list], list]

#: The vector-Jacobian rule of each operator of the default ONNX domain, by type.
RULES: dict[str, Rule] = {}


def rule(*op_types: str) -> Callable[[Rule], Rule]:
    """Register the decorated function as the rule of ``op_types``."""

    def register(function: Rule) -> Rule:
        for op_type in op_types:
            RULES[op_type] = function
        return function

    return register


class RuleContext:
    """What a rule needs: the builder, static shapes, and which values need a gradient.

    Parameters
    ----------
    b : GraphBuilder
        Where the gradient nodes go.
    shapes : dict of str to list
        Static shapes (None for an unknown dimension) from onnx's shape inference.
    needed : set of str
        The values whose gradient leads to a requested one; a rule may skip the others.
    """

    def __init__(self, b: GraphBuilder, shapes: dict[str, list], needed: set[str]):
        self.b = b
        self.shapes = shapes
        self.needed = needed

    def needs(self, name: str) -> bool:
        """Whether the gradient of ``name`` is used."""
        return bool(name) and name in self.needed

    def rank(self, name: str) -> int | None:
        shape = self.shapes.get(name)
        return None if shape is None else len(shape)

    def static_shape(self, name: str, node: onnx.NodeProto, start: int = 0) -> list[int]:
        """The dimensions of ``name`` from ``start`` on, every one known, else an error
        naming ``node``."""
        shape = self.shapes.get(name)
        if shape is None or any(d is None for d in shape[start:]):
            raise OrtBenchError(
                f"portable gradient of {node.op_type} (node {node.name!r}) needs the static "
                f"shape of {name!r}, which onnx cannot infer"
            )
        return shape[start:]

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
        if axes == [0] and len(ys) == 2 and None not in ys:
            if len(xs) == 2:  # a (1, n) bias: a Gemm, which takes in the update's Sum
                return column_sum(self.b, grad, ys[0], keepdims=True)
            if ys[0] * ys[1] >= COLUMN_SUM_FROM:
                return column_sum(self.b, grad, ys[0], keepdims=False)
        if axes == list(range(lead)):  # leading axes only: dropping them gives the shape
            return self.reduce("ReduceSum", grad, axes, keepdims=0)
        summed = self.reduce("ReduceSum", grad, axes, keepdims=1)
        if lead == 0:  # same rank: keeping the summed axes as 1s gives the shape
            return summed
        return self.b.op("Reshape", summed, self.shape_of(like))

    def reduce(self, op_type: str, x: str, axes: list[int], keepdims: int = 1) -> str:
        """``op_type`` (ReduceSum, ReduceMean...) over ``axes``, in the opset's form: the axes
        are an input from opset 13 for ReduceSum and 18 for the others, an attribute before."""
        since = 13 if op_type == "ReduceSum" else 18
        if self.b.opset >= since:
            return self.b.op(op_type, x, self.b.const(axes, np.int64), keepdims=keepdims)
        return self.b.op(op_type, x, axes=list(axes), keepdims=keepdims)

    def shape_of(self, name: str) -> str:
        """The shape of ``name``: a constant when it is fully static, else a Shape node."""
        shape = self.shapes.get(name)
        if shape is not None and all(d is not None for d in shape):
            return self.b.const(shape, np.int64)
        return self.b.op("Shape", name)

    def dims(self, name: str, start: int = 0) -> str:
        """The 1-D int64 tensor of the dimensions of ``name`` from ``start`` on: a constant
        when they are static, else read from the tensor at run time."""
        shape = self.shapes.get(name)
        if shape is not None and all(d is not None for d in shape[start:]):
            return self.b.const(shape[start:], np.int64)
        if self.b.opset >= 15:
            return self.b.op("Shape", name, start=start)
        bounds = self.b.const([start], np.int64), self.b.const([np.iinfo(np.int64).max], np.int64)
        return self.b.op("Slice", self.b.op("Shape", name), *bounds)

    def joined(self, head: list[int], tail: str) -> str:
        """The 1-D int64 tensor ``head`` followed by the tensor ``tail``."""
        return self.b.op("Concat", self.b.const(head, np.int64), tail, axis=0)

    def zeros_like(self, name: str) -> str:
        """A float tensor of zeros shaped like ``name``."""
        zero = onnx.numpy_helper.from_array(np.zeros(1, np.float32))
        return self.b.op("ConstantOfShape", self.shape_of(name), value=zero)

    def where_else_zero(self, condition: str, grad: str, positive: bool = True) -> str:
        """``grad`` where ``condition`` holds (where it does not, with ``positive=False``),
        zero elsewhere."""
        zero = self.b.const(0.0)
        if positive:
            return self.b.op("Where", condition, grad, zero)
        return self.b.op("Where", condition, zero, grad)
