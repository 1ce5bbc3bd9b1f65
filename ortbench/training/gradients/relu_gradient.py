"""The gradient of Relu as a product with its mask, where that is faster than the kernels.

onnxruntime's CPU ``ReluGrad`` (the training build's gradient graphs) and ``Where`` (what
the portable rule of Relu used) run far below memory speed on large tensors, while
``Greater``, ``Cast`` and ``Mul`` are vectorised: on a 1024 x 512 tensor the three nodes
take a fifth of one ``ReluGrad``. On small tensors the extra nodes cost more than they save,
so the product is used from :data:`MASK_FROM` elements (figures in
``benchmarks/README.md``). Both forms give the same gradient for finite values.
"""

from __future__ import annotations

import numpy as np
import onnx

from ..graphs.builder import GraphBuilder
from ..graphs.shapes import inferred_shapes

#: Elements of the Relu's output from which the mask product replaces the one-node forms.
MASK_FROM = 4096


def is_large(shape: list | None) -> bool:
    """Whether a Relu of this static ``shape`` (None or a None dimension: unknown) is large
    enough for :func:`masked_gradient`."""
    if shape is None or any(d is None for d in shape):
        return False
    return int(np.prod(shape)) >= MASK_FROM


def masked_gradient(b: GraphBuilder, relu_side: str, grad: str, name: str | None = None) -> str:
    """Append ``grad * float(relu_side > 0)`` to ``b``; return its name.

    Parameters
    ----------
    b : GraphBuilder
        Where the three nodes go.
    relu_side : str
        The Relu's input or output (both are positive at the same places).
    grad : str
        The gradient of the Relu's output.
    name : str, optional
        The name of the result.

    Returns
    -------
    str
        The gradient of the Relu's input.
    """
    positive = b.op("Greater", relu_side, b.const(0.0))
    return b.op("Mul", grad, b.op("Cast", positive, to=onnx.TensorProto.FLOAT), name=name)


def mask_relu_gradients(model: onnx.ModelProto) -> int:
    """Replace, in place, every large ``ReluGrad(dY, Y)`` of ``model`` by the mask product.

    Parameters
    ----------
    model : onnx.ModelProto
        A gradient graph built by onnxruntime-training whose forward shapes are static
        (the Relu outputs' shapes are read from onnx's shape inference).

    Returns
    -------
    int
        How many ``ReluGrad`` nodes were replaced (none when onnx cannot infer the graph's
        shapes).
    """
    graph = model.graph
    try:
        shapes, _ = inferred_shapes(model)
    except onnx.shape_inference.InferenceError:
        return 0  # an optimisation only: a graph onnx cannot infer runs as it is
    b = GraphBuilder("relu_grad", prefix="ortbench_relu_grad_")
    nodes, replaced = [], 0
    for node in graph.node:
        if node.op_type == "ReluGrad" and is_large(shapes.get(node.input[1])):
            start = len(b.nodes)
            masked_gradient(b, node.input[1], node.input[0], name=node.output[0])
            nodes.extend(b.nodes[start:])
            replaced += 1
        else:
            nodes.append(node)
    if replaced:
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(b.initializers)
    return replaced
