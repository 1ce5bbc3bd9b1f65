"""Gradient nodes in forms that onnxruntime's CPU kernels run fast, for both kinds of
gradient graph: the portable rules write them, :func:`rewrite_gradient_kernels` puts them
into onnxruntime-training's graphs.

- **Relu's gradient as a mask product.** onnxruntime's CPU ``ReluGrad`` (the training
  build's gradient graphs), ``Where`` and ``Mul`` by a ``Sign`` (the portable rule's small
  form) run far below memory speed on large tensors. The mask product is made of
  vectorised kernels: a ``HardSigmoid`` of slope :data:`MASK_SCALE` (the side scaled, then
  clipped to [0, 1]: 1 wherever the Relu is positive, 0 elsewhere) and ``Mul`` by the
  gradient, in one pass over the side fewer than ``Mul`` then ``Clip``, and far less time
  than ``Greater``, ``Cast`` and ``Mul``, whose ``Cast`` from booleans is not vectorised.
  It gives the same gradient for finite values but positive denormals below 2**-127,
  which the engine's sessions read as zero anyway (``session.set_denormal_as_zero``).
- **A bias's gradient as a product by ones.** The sum of a matrix's rows is a product by
  ones instead of a ``ReduceSum`` over the first axis, which runs several times slower, on
  the pool slower still: a ``MatMul`` by a vector of ones for a bias of shape (n,), a
  ``Gemm`` by a row of ones for one of shape (1, n). onnxruntime folds a ``Sum`` that reads
  a ``Gemm``'s output into the ``Gemm``: the portable rules write the ``Gemm`` at every
  size, so that the fused step's update of such a bias is no node of its own.
- **A small Relu's gradient as ``ReluGrad``, where the build has it.** Below
  :data:`MASK_FROM` the portable rule of Relu writes :func:`relu_side_gradient`,
  ``Mul(dY, Sign(Y))``: standard operators that read no broadcast constant, far fewer
  instructions than ``Where(Greater(Y, 0), dY, 0)``. On the CPU of the training build,
  :func:`with_training_kernels` turns each such pair into one ``ReluGrad`` node when a
  session is made; the graphs the trainers keep stay standard ONNX.

On small tensors a kernel's set-up outweighs its arithmetic, and the forms with fewer
nodes win (one ``ReluGrad`` or the ``Sign`` pair, a ``ReduceSum``): each fast form but
the ``Gemm`` is used from a size on (:data:`MASK_FROM`, :data:`COLUMN_SUM_FROM`; figures
in ``benchmarks/README.md``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np
import onnx

from ..graphs.builder import GraphBuilder
from ..graphs.nodes import node_attributes, subgraph_reads
from ..graphs.shapes import inferred_shapes

#: Elements of the Relu's output from which the mask product replaces the smaller forms.
MASK_FROM = 2048

#: Elements of a matrix from which the sum of its rows is a product by ones.
COLUMN_SUM_FROM = 4096

#: The slope of the mask product's ``HardSigmoid``, which clips the scaled Relu's side to
#: [0, 1]: the largest power of two a float holds, so that every positive normal float
#: reaches 1.
MASK_SCALE = 2.0**127


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
        Where the two nodes go (``HardSigmoid``, ``Mul``).
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
    mask = b.op("HardSigmoid", relu_side, alpha=MASK_SCALE, beta=0.0)
    return b.op("Mul", grad, mask, name=name)


def relu_side_gradient(b: GraphBuilder, relu_output: str, grad: str) -> str:
    """Append ``grad * Sign(relu_output)`` to ``b``; return its name.

    A Relu's output is 0 or positive, so its sign is the Relu's derivative, taken as 0 at
    0 as the engine's other forms of it do.

    Parameters
    ----------
    b : GraphBuilder
        Where the two nodes go (``Sign``, ``Mul``).
    relu_output : str
        The Relu's output (not its input: the sign of a negative input is -1).
    grad : str
        The gradient of the Relu's output.

    Returns
    -------
    str
        The gradient of the Relu's input.
    """
    return b.op("Mul", grad, b.op("Sign", relu_output))


def column_sum(
    b: GraphBuilder, matrix: str, rows: int, keepdims: bool, name: str | None = None
) -> str:
    """Append the sum of the rows of ``matrix`` (``rows`` of them) as a product by ones: a
    ``Gemm`` by a row of ones with ``keepdims``, a ``MatMul`` by a vector of ones without.

    Parameters
    ----------
    b : GraphBuilder
        Where the node goes.
    matrix : str
        A float matrix of ``rows`` rows.
    rows : int
        Its number of rows.
    keepdims : bool
        True for a (1, columns) result (a row of ones), False for (columns,) (a vector).
    name : str, optional
        The name of the result.

    Returns
    -------
    str
        The sum.
    """
    if keepdims:
        return b.op("Gemm", b.const(np.ones([1, rows], np.float32)), matrix, name=name)
    return b.op("MatMul", b.const(np.ones(rows, np.float32)), matrix, name=name)


def _row_sum_keepdims(node: onnx.NodeProto, constants: dict, shapes: dict, types: dict):
    """The ``keepdims`` of ``node`` when it is a ``ReduceSum`` over the first axis of a
    large float matrix, else None."""
    if node.op_type != "ReduceSum" or types.get(node.input[0]) != onnx.TensorProto.FLOAT:
        return None
    shape = shapes.get(node.input[0])
    if shape is None or len(shape) != 2 or None in shape or shape[0] * shape[1] < COLUMN_SUM_FROM:
        return None
    attributes = node_attributes(node)
    if len(node.input) > 1 and node.input[1]:
        axes = constants.get(node.input[1])
        axes = None if axes is None else axes.tolist()
    else:
        axes = attributes.get("axes")
    return bool(attributes.get("keepdims", 1)) if axes in ([0], [-2]) else None


def rewrite_gradient_kernels(model: onnx.ModelProto) -> int:
    """Put the fast forms into a gradient graph built by onnxruntime-training, in place:
    every large ``ReluGrad(dY, Y)`` becomes the mask product, every large ``ReduceSum``
    over a matrix's rows a product by ones.

    Parameters
    ----------
    model : onnx.ModelProto
        A gradient graph whose forward shapes are static (shapes are read from onnx's
        shape inference).

    Returns
    -------
    int
        How many nodes were replaced (none when onnx cannot infer the graph's shapes).
    """
    graph = model.graph
    try:
        shapes, types = inferred_shapes(model)
    except onnx.shape_inference.InferenceError:
        return 0  # an optimisation only: a graph onnx cannot infer runs as it is
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    b = GraphBuilder("gradient_kernels", opset, prefix="ortbench_kernels_")
    nodes, replaced = [], 0
    for node in graph.node:
        start = len(b.nodes)
        keepdims = _row_sum_keepdims(node, constants, shapes, types)
        if node.op_type == "ReluGrad" and is_large(shapes.get(node.input[1])):
            masked_gradient(b, node.input[1], node.input[0], name=node.output[0])
        elif keepdims is not None:
            rows = shapes[node.input[0]][0]
            column_sum(b, node.input[0], rows, keepdims, name=node.output[0])
        else:
            nodes.append(node)
            continue
        nodes.extend(b.nodes[start:])
        replaced += 1
    if replaced:
        del graph.node[:]
        graph.node.extend(nodes)
        graph.initializer.extend(b.initializers)
    return replaced


#: The domain of onnxruntime-training's gradient kernels.
TRAINING_DOMAIN = "com.microsoft"


def with_training_kernels(model: onnx.ModelProto, relu_outputs: Iterable[str] = ()) -> int:
    """Replace each ``Mul(dY, Sign(Y))`` of :func:`relu_side_gradient`, where ``Y`` is the
    float output of a ``Relu``, by onnxruntime-training's ``ReluGrad(dY, Y)``, in place, in
    every graph of ``model`` (``Scan`` and ``Loop`` bodies included).

    One node instead of two, the same values (``ReluGrad`` passes ``dY`` where ``Y > 0``,
    which is where ``Sign(Y)`` is 1). Only the training build's CPU provider has the
    kernel (:func:`~ortbench.training.runtime.build.has_training_kernels`).

    Parameters
    ----------
    model : onnx.ModelProto
        A model whose element types onnx can infer.
    relu_outputs : iterable of str, optional
        Inputs of ``model`` that are Relu outputs of another graph (the stashed
        activations a backward graph reads from its forward graph).

    Returns
    -------
    int
        How many pairs were replaced (none when onnx cannot infer the model).
    """
    if "Sign" not in _op_types(model.graph):
        return 0  # no shape inference for the models without the pair
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except onnx.shape_inference.InferenceError:
        return 0  # an optimisation only: a graph onnx cannot infer runs as it is
    inputs = {i.name for i in model.graph.input}
    float_relus = set(relu_outputs) & inputs & _float_values(inferred.graph)
    replaced = _relu_signs_to_relu_grad(model.graph, inferred.graph, float_relus)
    if replaced and not any(o.domain == TRAINING_DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(TRAINING_DOMAIN, 1))
    return replaced


def _float_values(graph: onnx.GraphProto) -> set[str]:
    values = [*graph.input, *graph.output, *graph.value_info]
    floats = {v.name for v in values if v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT}
    return floats | {i.name for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT}


def _op_types(graph: onnx.GraphProto) -> set[str]:
    """The operator types of ``graph`` and of its subgraphs."""
    types = set()
    for node in graph.node:
        types.add(node.op_type)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                types |= _op_types(attribute.g)
    return types


def _relu_signs_to_relu_grad(
    graph: onnx.GraphProto, inferred: onnx.GraphProto, float_relus: set[str]
) -> int:
    """:func:`with_training_kernels` on ``graph`` (``inferred``: its inferred twin, node for
    node; ``float_relus``: the float Relu outputs of the enclosing graphs)."""
    floats = _float_values(inferred)
    float_relus = float_relus | {
        n.output[0] for n in graph.node if n.op_type == "Relu" and n.output[0] in floats
    }
    replaced = 0
    for node, twin in zip(graph.node, inferred.node):
        for attribute, twin_attribute in zip(node.attribute, twin.attribute):
            if attribute.type == onnx.AttributeProto.GRAPH:
                replaced += _relu_signs_to_relu_grad(attribute.g, twin_attribute.g, float_relus)
    # a node's subgraphs count once for what they read: any such read keeps the Sign
    reads = Counter(o.name for o in graph.output)
    for node in graph.node:
        reads.update([*node.input, *subgraph_reads(node)])
    signs = {
        n.output[0]: n
        for n in graph.node
        if n.op_type == "Sign" and n.input[0] in float_relus and reads[n.output[0]] == 1
    }
    dropped = []
    for node in graph.node:
        if node.op_type != "Mul" or node.domain not in ("", "ai.onnx"):
            continue
        side = next((k for k, name in enumerate(node.input) if name in signs), None)
        if side is None:
            continue
        sign = signs[node.input[side]]
        node.op_type, node.domain = "ReluGrad", TRAINING_DOMAIN
        node.input[:] = [node.input[1 - side], sign.input[0]]
        dropped.append(sign)
        replaced += 1
    for sign in dropped:
        graph.node.remove(sign)
    return replaced
