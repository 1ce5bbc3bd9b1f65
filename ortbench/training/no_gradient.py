"""Which node a gradient builder fails on.

onnxruntime-training's builder reports a failure with its own source location, not the
node it could not differentiate. :func:`explain` builds the gradient of each node on the
way from the weights to the outputs alone, in graph order, and names the first that fails.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx
from onnx import helper

from .errors import NoGradientError, OrtBenchError
from .graph_tools import FLOAT_TYPES, inferred_shapes
from .runtime import first_line

#: Builds a gradient graph of (model, weights, inputs); raises when it cannot.
Build = Callable[[onnx.ModelProto, list[str], list[str]], object]


def _downstream(graph: onnx.GraphProto, sources: set[str]) -> set[str]:
    """The tensors computed from ``sources``, themselves included."""
    reached = set(sources)
    for node in graph.node:
        if reached.intersection(node.input):
            reached.update(node.output)
    return reached


def _alone(model, node, reached, shapes, types) -> tuple[onnx.ModelProto, list, list] | None:
    """A model of the node alone, the weights and the inputs to differentiate in it."""
    initializers = {i.name: i for i in model.graph.initializer}
    inputs, weights, kept, seen = [], [], [], set()
    for name in node.input:
        if not name or name in seen:
            continue
        seen.add(name)
        if name in initializers:
            kept.append(initializers[name])
            if name in reached and types.get(name) in FLOAT_TYPES:
                weights.append(name)
        else:
            shape = shapes.get(name)
            inputs.append(helper.make_tensor_value_info(name, types.get(name, 1), shape))
    wrt = [i.name for i in inputs if i.name in reached and types.get(i.name) in FLOAT_TYPES]
    outputs = [
        helper.make_tensor_value_info(o, types[o], shapes.get(o))
        for o in node.output
        if o and types.get(o) in FLOAT_TYPES
    ]
    if not outputs or not (wrt or weights):
        return None
    graph = helper.make_graph([node], "alone", inputs, outputs, kept)
    alone = helper.make_model(graph, opset_imports=model.opset_import)
    alone.ir_version = model.ir_version
    return alone, weights, wrt


def explain(
    model: onnx.ModelProto, wrt: list[str], error: Exception, build: Build
) -> OrtBenchError:
    """The error to raise for a model whose gradient ``build`` could not make.

    Parameters
    ----------
    model : onnx.ModelProto
        The model whose gradient failed.
    wrt : list of str
        The weights and inputs it was differentiated with respect to.
    error : Exception
        The builder's error.
    build : callable
        ``build(model, weights, inputs)``: the same builder, raising on failure.

    Returns
    -------
    OrtBenchError
        A :class:`NoGradientError` naming the first node whose gradient alone fails,
        else an error with the builder's first line.
    """
    try:
        shapes, types = inferred_shapes(model)
    except onnx.shape_inference.InferenceError:
        shapes, types = {}, {}
    reached = _downstream(model.graph, set(wrt))
    for node in model.graph.node:
        alone = _alone(model, node, reached, shapes, types) if types else None
        if alone is None:
            continue
        try:
            build(*alone)
        except Exception:  # the builder's own error types: this node is the one
            return NoGradientError(
                f"onnxruntime-training has no gradient for {node.op_type} (node {node.name!r})",
                node.op_type,
                node.name,
            )
    return OrtBenchError(f"onnxruntime cannot differentiate this model: {first_line(error)}")
