"""Reading and rewriting nodes: attributes, the tensors a node (and its subgraphs)
reads, a tensor's ancestors (and a graph cut to what its outputs read), fresh names, and
scikit-learn's linear nodes rewritten into trainable MatMul and Add."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import NoGradientError, OrtBenchError
from .loading import load_model


def ancestors(producers: dict, names: list[str]) -> set[str]:
    """Every tensor name the given tensors are computed from, themselves included."""
    seen, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is not None:
            stack.extend(node.input)
            stack.extend(subgraph_reads(node))
    return seen


def drop_unread(graph: onnx.GraphProto) -> None:
    """Remove, in place, the nodes and initializers that none of ``graph``'s outputs is
    computed from."""
    producers = {name: node for node in graph.node for name in node.output}
    read = ancestors(producers, [o.name for o in graph.output])
    nodes = [node for node in graph.node if read.intersection(node.output)]
    initializers = [i for i in graph.initializer if i.name in read]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Names the subgraphs of a node (If, Loop, Scan) read from the outer scope."""
    names = set()
    for attribute in node.attribute:
        for sub in (
            [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs
        ):
            for inner in sub.node:
                names.update(inner.input)
                names |= subgraph_reads(inner)
    return names


#: The ai.onnx.ml operators :func:`rewrite_linear_nodes` writes in standard operators.
REWRITTEN_ML = ("LinearRegressor", "LinearClassifier", "Scaler", "Normalizer", "Imputer")
#: Those of them that preprocess the features, before any weight.
_PREPROCESSING = ("Scaler", "Normalizer", "Imputer")


def rewrite_linear_nodes(onx) -> onnx.ModelProto:
    """Load a model and rewrite its ai.onnx.ml LinearRegressor, LinearClassifier, Scaler,
    Normalizer and Imputer nodes in standard operators.

    skl2onnx stores a linear model's weights as node attributes, which leaves nothing to
    train; the rewritten graph has the same outputs from MatMul + Add over initializers
    ``<node>_coef`` and ``<node>_intercept``. A Scaler (a StandardScaler, RobustScaler or
    MaxAbsScaler before the model), Normalizer or Imputer (SimpleImputer) becomes the
    same function over constants, which shape inference reads through (it does not
    through those nodes) and which no step trains. Accepts what :func:`load_model`
    accepts.
    """
    model = load_model(onx)
    if not any(n.op_type in REWRITTEN_ML for n in model.graph.node):
        return model
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    nodes = []
    for k, node in enumerate(graph.node):
        preprocessing = node.op_type in _PREPROCESSING and node.domain == "ai.onnx.ml"
        nodes.extend(_preprocessing(node, k, graph, opset) if preprocessing else [node])
    del graph.node[:]
    graph.node.extend(nodes)
    nodes = []
    for k, node in enumerate(graph.node):
        if node.op_type == "LinearRegressor":
            nodes.extend(_linear_regressor(node, k, model))
        elif node.op_type == "LinearClassifier":
            nodes.extend(_linear_classifier(node, k, model))
        else:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(n.domain == "ai.onnx.ml" for n in graph.node):
        kept = [o for o in model.opset_import if o.domain != "ai.onnx.ml"]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return model


def node_attributes(node: onnx.NodeProto) -> dict:
    """A node's attributes by name, as Python values."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _linear_weights(node, k, graph, n_rows, rows=slice(None)):
    """The node's coefficients (features x rows kept) and intercepts as initializers."""
    attrs = node_attributes(node)
    coef = np.asarray(attrs["coefficients"], dtype=np.float32).reshape(n_rows, -1)[rows].T
    intercept = np.asarray(attrs.get("intercepts", np.zeros(n_rows)), dtype=np.float32)[rows]
    n_rows = len(intercept)
    base = node.name or f"linear{k}"
    names = (f"{base}_coef", f"{base}_intercept")
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.ascontiguousarray(coef), names[0]),
            numpy_helper.from_array(intercept.reshape(n_rows), names[1]),
        ]
    )
    return attrs, base, names


def _preprocessing(node, k, graph, opset: int) -> list[onnx.NodeProto]:
    """A Scaler, Normalizer or Imputer in standard operators, as onnxruntime computes it,
    over float X (cast first where the graph does not declare it float); constants as
    Constant nodes, which no step trains."""
    attrs = node_attributes(node)
    base = f"{node.name or node.op_type.lower()}_{k}"
    declared = {v.name: v.type.tensor_type.elem_type for v in graph.input}
    x, out = node.input[0], node.output[0]
    nodes = []

    def op(op_type, *inputs, **attributes):
        name = f"{base}_{len(nodes)}"
        nodes.append(helper.make_node(op_type, list(inputs), [name], **attributes))
        return name

    def const(value, dtype=np.float32):
        tensor = numpy_helper.from_array(np.asarray(value, dtype), f"{base}_c{len(nodes)}")
        nodes.append(helper.make_node("Constant", [], [tensor.name], value=tensor))
        return tensor.name

    def row_reduce(op_type, value):  # over axis 1, kept; axes an input from these opsets
        if opset >= {"ReduceSum": 13, "ReduceMax": 18}[op_type]:
            return op(op_type, value, const([1], np.int64), keepdims=1)
        return op(op_type, value, axes=[1], keepdims=1)

    if declared.get(x) != TensorProto.FLOAT:
        x = op("Cast", x, to=TensorProto.FLOAT)
    if node.op_type == "Scaler":  # (X - offset) * scale, per column or for all
        centred = op("Sub", x, const(attrs.get("offset", [0.0])))
        op("Mul", centred, const(attrs.get("scale", [1.0])))
    elif node.op_type == "Normalizer":  # each row over its norm (a zero row stays zero)
        norm = attrs.get("norm", b"MAX")
        norm = norm.decode() if isinstance(norm, bytes) else norm
        if norm == "L2":
            size = op("Sqrt", row_reduce("ReduceSum", op("Mul", x, x)))
        elif norm == "L1":
            size = row_reduce("ReduceSum", op("Abs", x))
        else:  # MAX: the row's largest value, signed, as onnxruntime's kernel takes it
            size = row_reduce("ReduceMax", x)
        zero = op("Equal", size, const(0.0))
        op("Div", x, op("Where", zero, const(1.0), size))
    else:  # Imputer: the replaced value (NaN by default) becomes the imputed one
        replaced = float(attrs.get("replaced_value_float", np.nan))
        missing = op("IsNaN", x) if np.isnan(replaced) else op("Equal", x, const(replaced))
        op("Where", missing, const(attrs.get("imputed_value_floats", [0.0])), x)
    nodes[-1].output[0] = out  # the last node writes the node's output
    return nodes


def _linear_regressor(node, k, model):
    graph = model.graph
    attrs = node_attributes(node)
    if attrs.get("post_transform", b"NONE") not in (b"NONE", "NONE"):
        raise OrtBenchError(f"LinearRegressor {node.name!r}: post_transform is not supported")
    _, base, (coef, intercept) = _linear_weights(node, k, graph, int(attrs.get("targets", 1)))
    return [
        helper.make_node("MatMul", [node.input[0], coef], [f"{base}_matmul"]),
        helper.make_node("Add", [f"{base}_matmul", intercept], [node.output[0]]),
    ]


def _linear_classifier(node, k, model):
    """Scores and labels as onnxruntime's LinearClassifier kernel computes them."""
    graph = model.graph
    attrs = node_attributes(node)
    if attrs.get("classlabels_ints") is not None:
        labels = np.asarray(attrs["classlabels_ints"], dtype=np.int64)
    else:  # a classifier fitted on string labels
        names = attrs.get("classlabels_strings") or []
        labels = np.array([n.decode() if isinstance(n, bytes) else n for n in names], object)
    n_rows = len(attrs["coefficients"]) // _n_features(model, node)
    post = attrs.get("post_transform", b"NONE")
    post = post.decode() if isinstance(post, bytes) else post
    if post not in ("NONE", "LOGISTIC", "SOFTMAX"):
        raise OrtBenchError(
            f"LinearClassifier {node.name!r}: post_transform {post} is not supported"
        )
    mirrored = post == "LOGISTIC" and len(labels) == 2 and _mirrored_rows(attrs, n_rows)
    rows = slice(1, 2) if mirrored else slice(None)
    attrs, base, (coef, intercept) = _linear_weights(node, k, graph, n_rows, rows)
    label_out, score_out = node.output[0], node.output[1]
    raw = f"{base}_raw"
    out = [
        helper.make_node("MatMul", [node.input[0], coef], [f"{base}_matmul"]),
        helper.make_node("Add", [f"{base}_matmul", intercept], [raw]),
    ]
    classes = numpy_helper.from_array(labels, f"{base}_classes")
    graph.initializer.append(classes)
    if (n_rows == 1 or mirrored) and len(labels) == 2:
        # binary with one row of coefficients: the positive class when the raw score > 0
        # scalars: constants, never mistaken for weights by trainable_initializers
        one = numpy_helper.from_array(np.array(1.0, np.float32), f"{base}_one")
        zero = numpy_helper.from_array(np.array(0.0, np.float32), f"{base}_zero")
        graph.initializer.extend([one, zero])
        # onnxruntime 1.19's kernel writes [1 - s, s] with s the raw score here, whatever
        # post_transform says (checked against the kernel in the tests); with two mirrored
        # rows (-w, w) and a logistic, [1 - p, p] with p the sigmoid of the score of w:
        # the positive class's column alone is trained (two columns would each carry the
        # same log loss, and a fit would report it twice)
        positive = raw
        if mirrored:
            positive = f"{base}_sigmoid"
            out.append(helper.make_node("Sigmoid", [raw], [positive]))
        negative_op = helper.make_node("Sub", [one.name, positive], [f"{base}_neg"])
        out += [
            negative_op,
            helper.make_node("Concat", [f"{base}_neg", positive], [score_out], axis=1),
            helper.make_node("Greater", [raw, zero.name], [f"{base}_gt"]),
            helper.make_node("Cast", [f"{base}_gt"], [f"{base}_index"], to=TensorProto.INT64),
        ]
    else:
        if post == "LOGISTIC":
            out.append(helper.make_node("Sigmoid", [raw], [score_out]))
        elif post == "SOFTMAX":
            out.append(helper.make_node("Softmax", [raw], [score_out], axis=1))
        else:
            out.append(helper.make_node("Identity", [raw], [score_out]))
        out.append(helper.make_node("ArgMax", [raw], [f"{base}_index"], axis=1, keepdims=1))
    out += [
        helper.make_node("Gather", [classes.name, f"{base}_index"], [f"{base}_label2d"]),
        helper.make_node("Flatten", [f"{base}_label2d"], [f"{base}_flat"], axis=0),
        helper.make_node("Squeeze", [f"{base}_flat", _axes0(graph, base)], [label_out]),
    ]
    return out


def _mirrored_rows(attrs: dict, n_rows: int) -> bool:
    """Whether a two-class node's two rows of coefficients and intercepts are each
    other's negation, as skl2onnx writes a binary ``LogisticRegression``."""
    if n_rows != 2:
        return False
    coef = np.asarray(attrs["coefficients"], dtype=np.float32).reshape(2, -1)
    intercept = np.asarray(attrs.get("intercepts", np.zeros(2)), dtype=np.float32)
    return bool(np.array_equal(coef[0], -coef[1]) and intercept[0] == -intercept[1])


def _axes0(graph, base):
    name = f"{base}_axes0"
    graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), name))
    return name


def _n_features(model, node) -> int:
    """Feature count of a linear node's input: the graph's declared shape, or what shape
    inference gives the nodes before it (a PCA's MatMul)."""
    value = {v.name: v for v in model.graph.input}.get(node.input[0])
    if value is None:
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        except onnx.shape_inference.InferenceError:
            inferred = []
        value = next((v for v in inferred if v.name == node.input[0]), None)
    dims = value.type.tensor_type.shape.dim if value is not None else []
    if len(dims) != 2 or dims[1].dim_value <= 0:
        raise OrtBenchError(
            f"{node.op_type} {node.name!r}: its input needs a known feature count (export "
            f"the model with the number of features in its input's shape)"
        )
    return dims[1].dim_value


def refuse_training_forms(nodes: Iterable[onnx.NodeProto], backend: str) -> None:
    """Refuse the training forms of Dropout (a ``training_mode`` input: random masks) and
    BatchNormalization (``training_mode`` set, or the running statistics as outputs:
    statistics of each batch, padded rows included), which a gradient backend would
    otherwise train through silently; both backends call this before building.

    Raises
    ------
    NoGradientError
        ``no <backend> gradient for ...``, naming the first such node.
    """
    for node in nodes:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            what = "Dropout in training form (a training_mode input: random masks)"
        elif node.op_type == "BatchNormalization" and (
            node_attributes(node).get("training_mode", 0) or len(node.output) > 1
        ):
            what = "BatchNormalization in training form (statistics of each batch)"
        else:
            continue
        raise NoGradientError(
            f"no {backend} gradient for {what}, node {node.name!r}: only the inference form "
            f"trains; export the model in eval mode",
            node.op_type,
            node.name,
        )


def unique_name(taken: set[str], base: str) -> str:
    """``base``, or ``base_1``, ``base_2``, ...: the first that is not ``taken``."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name
