"""Graphs made ready for onnxruntime-training's gradient builder, and its failures named.

The builder of onnxruntime-training 1.19.2 differentiates torch's exports only in the
forms its gradient functions expect. :func:`prepare_for_gradient_builder` rewrites the
others, keeping what the model computes:

- ``LayerNormalization``: its gradient reads the node's optional mean and inverse standard
  deviation outputs, which ``torch.onnx.export`` leaves out; they are added.
- ``Dropout``: likewise its gradient reads the mask output, added.
- ``MaxPool``, ``AveragePool``: their gradient kernels size the input's gradient from the
  static shape the graph declares for it, and crash without one (a ``Reshape`` to a
  computed shape, as torch writes ``unflatten``, hides it from onnx's inference);
  onnxruntime's symbolic shape inference supplies it.
- ``AveragePool`` whose batch dimension is dynamic: its gradient kernel reads that
  dimension from the declared shape too, so it becomes the same average as a ``Conv`` of
  each channel with a uniform kernel (times a constant map where the pads are not counted).
- ``BatchNormalization`` in inference form (frozen statistics): the builder has no gradient
  for it; it becomes a per-channel ``x * a + c`` whose ``a`` and ``c`` are computed from
  the scale, bias, mean and variance, so that the scale and bias still train.
- ``CastLike`` (torch's default exporter without its optimizer): the builder has no
  gradient for it; it becomes the ``Cast`` to its second input's type.
- ``Gelu`` with ``approximate="tanh"``: the builder gives it the gradient of the exact
  (erf) form; it becomes onnxruntime's ``FastGelu``, the same function, whose gradient is
  the tanh form's.
- ``LSTM`` and ``GRU`` whose sequence length the graph fixes: the builder's gradient
  kernels run the forward direction only (a bidirectional network failed to build) and
  train slower than the same equations unrolled over the time steps
  (:mod:`~ortbench.training.graphs.recurrent`), which they become; any other keeps the
  builder's kernels. ``RNN`` (no gradient in the builder) becomes its unrolled form too.

:func:`gradient_builder_error` turns what the builder raises into one line naming the
operator and node it stopped at, without the runtime's source text.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import helper

from ..errors import NoGradientError, OrtBenchError
from ..graphs.builder import GraphBuilder
from ..graphs.loading import fit_runtime
from ..graphs.nodes import node_attributes, refuse_training_forms
from ..graphs.recurrent import unroll_recurrent
from ..graphs.shapes import inferred_shapes
from ..graphs.weights import FLOAT_TYPES
from ..runtime import capi
from ..runtime.sessions import first_line, session_options

_REWRITTEN = (
    "LayerNormalization",
    "BatchNormalization",
    "Dropout",
    "MaxPool",
    "AveragePool",
    "Gelu",
    "CastLike",
)
_POOLS = ("MaxPool", "AveragePool")


def prepare_for_gradient_builder(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose nodes onnxruntime-training's builder can differentiate.

    Parameters
    ----------
    model : onnx.ModelProto
        The model (weights as initializers or inputs).

    Returns
    -------
    onnx.ModelProto
        The same computation with the outputs LayerNormalization's and Dropout's gradients
        read added, inference BatchNormalization written with elementwise operators,
        CastLike as Cast and the tanh form of Gelu as onnxruntime's FastGelu.

    Raises
    ------
    NoGradientError
        For Dropout or BatchNormalization in a training form
        (:func:`~ortbench.training.graphs.nodes.refuse_training_forms`), which the builder would
        differentiate with random masks and each batch's statistics (padded rows
        included).
    """
    refuse_training_forms(model.graph.node, "onnxruntime-training")
    model = _unrolled_where_possible(model)
    prepared = onnx.ModelProto()
    prepared.CopyFrom(model)
    graph = prepared.graph
    if not any(n.op_type in _REWRITTEN for n in graph.node):
        return prepared
    shapes, types = inferred_shapes(prepared)
    b = GraphBuilder("prepared", prefix="ortbench_prepared_")
    nodes = []
    for node in graph.node:
        if node.op_type == "LayerNormalization" and node.domain in ("", "ai.onnx"):
            outputs = list(node.output) + [""] * (3 - len(node.output))
            base = node.output[0]
            outputs[1] = outputs[1] or f"{base}_ortbench_mean"
            outputs[2] = outputs[2] or f"{base}_ortbench_inv_std"
            node.output[:] = outputs
            nodes.append(node)
        elif node.op_type == "Dropout" and node.domain in ("", "ai.onnx"):
            if len(node.output) < 2 or not node.output[1]:
                node.output[:] = [node.output[0], f"{node.output[0]}_ortbench_mask"]
            nodes.append(node)
        elif _dynamic_average_pool(node, shapes):
            start = len(b.nodes)
            _average_as_conv(b, node, shapes)
            nodes.extend(b.nodes[start:])
        elif _inference_batch_norm(node) and shapes.get(node.input[0]) is not None:
            start = len(b.nodes)
            _elementwise_batch_norm(b, node, len(shapes[node.input[0]]))
            nodes.extend(b.nodes[start:])
        elif node.op_type == "CastLike" and types.get(node.input[1]):
            cast = helper.make_node("Cast", node.input[:1], node.output[:1], node.name)
            cast.attribute.append(helper.make_attribute("to", types[node.input[1]]))
            nodes.append(cast)
        elif _tanh_gelu(node):
            nodes.append(
                helper.make_node(
                    "FastGelu", [node.input[0]], [node.output[0]], node.name, domain="com.microsoft"
                )
            )
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(b.initializers)
    _declare_pool_shapes(prepared, shapes)
    if any(n.domain == "com.microsoft" for n in nodes) and not any(
        o.domain == "com.microsoft" for o in prepared.opset_import
    ):
        prepared.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return prepared


def _unrolled_where_possible(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its RNN, LSTM and GRU nodes unrolled, or as it is where one of them cannot
    be (a sequence length the export left free, an attribute the unrolled form lacks)."""
    try:
        return unroll_recurrent(model)
    except OrtBenchError:
        return model  # the builder's own kernels, forward direction only


def _tanh_gelu(node: onnx.NodeProto) -> bool:
    """Whether the node is the standard Gelu in its tanh approximation."""
    return (
        node.op_type == "Gelu"
        and node.domain in ("", "ai.onnx")
        and node_attributes(node).get("approximate", b"none") == b"tanh"
    )


def _declare_pool_shapes(model: onnx.ModelProto, shapes: dict[str, list]) -> None:
    """Declare the shapes of the pooling nodes' inputs and outputs in the graph, from
    onnx's inference with shape values propagated, else onnxruntime's symbolic one."""
    declared = {v.name for v in [*model.graph.value_info, *model.graph.input]}
    names = [
        name
        for n in model.graph.node
        if n.op_type in _POOLS
        for name in (n.input[0], n.output[0])
        if name not in declared
    ]
    known = [name for name in names if name in shapes and None not in shapes[name][1:]]
    model.graph.value_info.extend(
        helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shapes[name]) for name in known
    )
    hidden = set(names) - set(known)
    if not hidden:
        return
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    try:
        inferred = SymbolicShapeInference.infer_shapes(model, auto_merge=True)
    except Exception:  # an aid only: the builder reports what it cannot do
        return
    model.graph.value_info.extend(v for v in inferred.graph.value_info if v.name in hidden)


def _dynamic_average_pool(node: onnx.NodeProto, shapes: dict[str, list]) -> bool:
    if node.op_type != "AveragePool" or node.domain not in ("", "ai.onnx"):
        return False
    attrs = node_attributes(node)
    x, y = node.input[0], node.output[0]
    return (
        attrs.get("auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET")
        and not attrs.get("ceil_mode", 0)
        and all(d == 1 for d in attrs.get("dilations", []))
        and x in shapes
        and y in shapes
        and shapes[x][0] is None
        and None not in shapes[x][1:] + shapes[y][1:]
    )


def _average_as_conv(b: GraphBuilder, node: onnx.NodeProto, shapes: dict[str, list]) -> None:
    """Append the AveragePool ``node`` as Reshape, Conv with a uniform kernel, Reshape."""
    attrs = node_attributes(node)
    x, y = node.input[0], node.output[0]
    kernel = list(attrs["kernel_shape"])
    n = len(kernel)
    strides = list(attrs.get("strides", [1] * n))
    pads = list(attrs.get("pads", [0] * 2 * n))
    spatial, out = shapes[x][2:], shapes[y][2:]
    size = float(np.prod(kernel))
    rows = b.op("Reshape", x, b.const([-1, 1, *spatial], np.int64))
    window = b.const(np.full([1, 1, *kernel], 1.0 / size, np.float32))
    summed = b.op("Conv", rows, window, strides=strides, pads=pads)
    if any(pads) and not attrs.get("count_include_pad", 0):
        counts = np.ones(out)
        for k in range(n):  # the window's real elements along each axis
            starts = np.arange(out[k]) * strides[k] - pads[k]
            real = np.minimum(starts + kernel[k], spatial[k]) - np.maximum(starts, 0)
            counts = counts * real.reshape([-1 if j == k else 1 for j in range(n)])
        summed = b.op("Mul", summed, b.const((size / counts).astype(np.float32)))
    b.op("Reshape", summed, b.const([-1, *shapes[y][1:]], np.int64), name=y)


def _inference_batch_norm(node: onnx.NodeProto) -> bool:
    return (
        node.op_type == "BatchNormalization"
        and node.domain in ("", "ai.onnx")
        and len(node.output) == 1
        and not node_attributes(node).get("training_mode", 0)
    )


def _elementwise_batch_norm(b: GraphBuilder, node: onnx.NodeProto, rank: int) -> None:
    """Append ``y = x * a + c``, ``a = scale / sqrt(var + eps)``, ``c = bias - mean * a``
    (per channel, axis 1) to ``b``, with the node's output name."""
    x, scale, bias, mean, var = node.input
    eps = b.const(node_attributes(node).get("epsilon", 1e-5))
    a = b.op("Div", scale, b.op("Sqrt", b.op("Add", var, eps)))
    c = b.op("Sub", bias, b.op("Mul", mean, a))
    if rank > 2:  # (C,) against (N, C, ...): (C, 1, ...)
        axes = b.const(list(range(1, rank - 1)), np.int64)
        a, c = b.op("Unsqueeze", a, axes), b.op("Unsqueeze", c, axes)
    b.op("Add", b.op("Mul", x, a), c, name=node.output[0])


def gradient_builder_error(error: Exception, model: onnx.ModelProto) -> OrtBenchError:
    """One line for a failure of onnxruntime-training's gradient builder on ``model``.

    The builder names the operator and node only when it has no gradient function at all;
    otherwise the node is found by building the gradient of each kind of node alone.

    Parameters
    ----------
    error : Exception
        What the builder raised.
    model : onnx.ModelProto
        The model given to the builder.

    Returns
    -------
    OrtBenchError
        A :class:`NoGradientError`: ``no onnxruntime-training gradient for operator 'Op'
        (node 'name')``, with the builder's reason when it is not the runtime's source
        text; an OrtBenchError when no node is found.
    """
    text = first_line(error)
    named = re.search(r"has not been registered: (\S+) for node (.+?)\s*$", text)
    if named:
        return NoGradientError(
            f"no onnxruntime-training gradient for operator {named[1]!r} (node {named[2]!r})",
            named[1],
            named[2],
        )
    source = "onnxruntime_src" in text or "::" in text or re.search(r"\w\.(cc|h):\d+", text)
    reason = "" if source else f": {text}"
    node = _failing_node(model)
    if node is None:
        return OrtBenchError(f"onnxruntime-training cannot differentiate this model{reason}")
    return NoGradientError(
        f"no onnxruntime-training gradient for operator {node.op_type!r} "
        f"(node {node.name!r}){reason}",
        node.op_type,
        node.name,
    )


def missing_gradient_kernel(error: Exception, model: onnx.ModelProto) -> NoGradientError | None:
    """One line for a gradient graph whose session cannot be made because the runtime has
    no kernel for one of its gradient operators (``Could not find an implementation for
    ConvTransposeGrad(1)``: the builder writes gradient nodes that only some devices or
    builds run), naming the forward operator and its first node in ``model``; None for
    any other error.

    Parameters
    ----------
    error : Exception
        What making the session raised.
    model : onnx.ModelProto
        The model whose gradient the session runs.

    Returns
    -------
    NoGradientError or None
    """
    found = re.search(r"Could not find an implementation for (\w+?)Grad\(\d+\)", str(error))
    if found is None:
        return None
    op = found[1]
    node = next((n.name for n in model.graph.node if n.op_type == op), "")
    return NoGradientError(
        f"no onnxruntime-training kernel for the gradient of operator {op!r} (node {node!r}) "
        f"on this build and device",
        op,
        node,
    )


def _failing_node(model: onnx.ModelProto) -> onnx.NodeProto | None:
    """The first node, in graph order, whose gradient the builder cannot build alone."""
    try:
        shapes, types = inferred_shapes(model)
    except onnx.shape_inference.InferenceError:
        return None
    constants = {i.name: i for i in model.graph.initializer}
    tried = set()
    for node in model.graph.node:
        # constants (initializers) need no gradient: the weights are graph inputs here
        floats_in = [
            i for i in node.input if i and types.get(i) in FLOAT_TYPES and i not in constants
        ]
        floats_out = [o for o in node.output if o and types.get(o) in FLOAT_TYPES]
        kind = (node.domain, node.op_type, tuple(bool(o) for o in node.output))
        if not floats_in or not floats_out or kind in tried:
            continue
        tried.add(kind)
        if not _builds_alone(node, floats_in, floats_out, shapes, types, constants, model):
            return node
    return None


def _builds_alone(node, floats_in, floats_out, shapes, types, constants, model) -> bool:
    b = GraphBuilder("one_node", prefix="ortbench_blame_")
    inputs, initializers = [], []
    for name in dict.fromkeys(i for i in node.input if i):
        if name in constants and name not in floats_in:
            initializers.append(constants[name])
        else:
            inputs.append(helper.make_tensor_value_info(name, types[name], shapes.get(name)))
    total = b.add_all([b.op("ReduceSum", o, keepdims=0) for o in floats_out])
    graph = helper.make_graph(
        [node, *b.nodes],
        "one_node",
        inputs,
        [helper.make_tensor_value_info(total, onnx.TensorProto.FLOAT, [])],
        initializers + b.initializers,
    )
    alone = helper.make_model(graph, opset_imports=list(model.opset_import))
    alone.ir_version = model.ir_version
    try:
        capi.GradientGraphBuilder(
            fit_runtime(alone).SerializeToString(),
            {total},
            set(floats_in),
            total,
            session_options(),
        ).build()
    except RuntimeError:
        return False
    return True
