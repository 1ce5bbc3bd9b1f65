"""The model's outputs: the one a loss trains, a classifier's probabilities and the
scores behind them, a model cut down to some outputs, and class labels put back."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import OrtBenchError
from .batch_axis import constant_shapes
from .nodes import ancestors, subgraph_reads, unique_name
from .shapes import inferred_shapes
from .weights import FLOAT_TYPES, trainable_initializers


def training_output(onx: onnx.ModelProto, ignored: tuple[str, ...] = ()) -> str:
    """The output a loss applies to: the first float tensor output, looking through ZipMap,
    among those not ``ignored`` (a loss the model outputs)."""
    producers = {o: n for n in onx.graph.node for o in n.output}
    for out in onx.graph.output:
        if out.name in ignored:
            continue
        node = producers.get(out.name)
        if node is not None and node.op_type == "ZipMap":
            return node.input[0]
        tensor = out.type.tensor_type
        if out.type.HasField("tensor_type") and tensor.elem_type in FLOAT_TYPES:
            return out.name
    raise OrtBenchError("the model has no float output to train through")


@dataclass
class ClassifierOutput:
    """Where a classifier graph's class probabilities come from.

    ``probabilities`` is the (n, classes) probability tensor (behind ZipMap when there is
    one); ``scores`` the raw scores a Sigmoid or a Softmax turns into them (the same
    tensor when no such function was found); ``function`` is ``'sigmoid'``,
    ``'softmax'`` or None (the output holds decision scores, not probabilities);
    ``columns`` is the width of ``scores`` when the graph declares or implies it.
    """

    probabilities: str
    scores: str
    function: str | None
    columns: int | None


def classifier_output(onx: onnx.ModelProto) -> ClassifierOutput | None:
    """The probability output of a classifier graph, or None for another graph.

    A classifier graph outputs labels (an int64 or string tensor) and scores, or a ZipMap
    of probabilities. The raw scores are the input of the Sigmoid or Softmax closest to
    the probabilities (or of skl2onnx's one-vs-rest ``1 / (1 + exp(-s))``), provided every
    weight the probabilities read is read before it.
    """
    graph = onx.graph
    producers = {o: n for n in graph.node for o in n.output}
    kinds = []
    for out in graph.output:
        node = producers.get(out.name)
        if node is not None and node.op_type == "ZipMap":
            kinds.append("zipmap")
        elif out.type.HasField("tensor_type"):
            elem = out.type.tensor_type.elem_type
            kinds.append("float" if elem in FLOAT_TYPES else "label")
    if "zipmap" not in kinds and not ("label" in kinds and "float" in kinds):
        return None
    probabilities = training_output(onx)
    scores, function = _probability_function(onx, producers, probabilities)
    columns = static_width(onx, scores)
    return ClassifierOutput(probabilities, scores, function, columns)


def sigmoid_output(onx: onnx.ModelProto) -> ClassifierOutput | None:
    """The probabilities of a plain graph whose output is a ``Sigmoid``'s (a classifier as
    torch's ``BCELoss`` trains it: one column for two classes, else one per class), or
    None for another graph.

    Its log loss is the binary one of each column, -(y log p + (1 - y) log(1 - p)), which
    the log loss gives on the Sigmoid's scores (``probability_function='sigmoid'``); on
    the probabilities themselves it would count each row's own class only.
    """
    output = training_output(onx)
    node = last_node(onx, output)
    if node is None or node.op_type != "Sigmoid":
        return None
    return ClassifierOutput(output, node.input[0], "sigmoid", static_width(onx, output))


def last_node(onx: onnx.ModelProto, name: str) -> onnx.NodeProto | None:
    """The node that makes ``name``, through Identity nodes (None for an input or an
    initializer)."""
    producers = {o: n for n in onx.graph.node for o in n.output}
    node = producers.get(name)
    while node is not None and node.op_type == "Identity":
        node = producers.get(node.input[0])
    return node


def log_loss_output(onx: onnx.ModelProto) -> ClassifierOutput | None:
    """What the log loss trains of a graph: a classifier's probabilities
    (:func:`classifier_output`) or a plain graph's Sigmoid (:func:`sigmoid_output`); None
    when the trained output is read as probabilities as it is."""
    return classifier_output(onx) or sigmoid_output(onx)


def _probability_function(onx, producers, probabilities: str) -> tuple[str, str | None]:
    """(raw scores, 'sigmoid' | 'softmax') behind ``probabilities``, or (it, None)."""
    constants = {i.name: numpy_helper.to_array(i) for i in onx.graph.initializer}

    def constant_is(name, value):
        return name in constants and np.allclose(constants[name], value)

    def producer(name, op_type):
        node = producers.get(name)
        return node if node is not None and node.op_type == op_type else None

    queue, seen = [probabilities], set()
    while queue:
        name = queue.pop(0)
        node = producers.get(name)
        if node is None or name in seen:
            continue
        seen.add(name)
        found = None
        if node.op_type in ("Sigmoid", "Softmax"):
            found = node.input[0], node.op_type.lower()
        elif node.op_type == "Reciprocal":  # skl2onnx's one-vs-rest 1 / (exp(-s) + 1)
            add = producer(node.input[0], "Add")
            exp = add and next((producer(i, "Exp") for i in add.input if producer(i, "Exp")), None)
            if exp and any(constant_is(i, 1.0) for i in add.input):
                neg = producer(exp.input[0], "Mul")
                if neg and constant_is(neg.input[1], -1.0):
                    found = neg.input[0], "sigmoid"
                elif producer(exp.input[0], "Neg"):
                    found = producers[exp.input[0]].input[0], "sigmoid"
        if found and _weights_read(onx, producers, found[0]) == _weights_read(
            onx, producers, probabilities
        ):
            return found
        queue.extend(node.input)
    return probabilities, None


def _weights_read(onx, producers, name: str) -> set[str]:
    """The trainable initializers a tensor depends on."""
    return ancestors(producers, [name]) & set(trainable_initializers(onx))


def static_width(onx: onnx.ModelProto, name: str) -> int | None:
    """The second dimension of a 2-D tensor, when shape inference knows it."""
    try:
        shape = inferred_shapes(onx)[0].get(name)
    except onnx.shape_inference.InferenceError:
        return None
    return shape[1] if shape is not None and len(shape) == 2 else None


def flattening_reshape(model: onnx.ModelProto, output: str) -> str | None:
    """The tensor of two or more columns that a last ``Reshape`` to ``(-1, 1)`` turns into
    ``output``, or None.

    skl2onnx's MLPRegressor converter ends with that node whatever the number of targets:
    with two or more, it stacks their columns into one."""
    producer = next((n for n in model.graph.node if output in n.output), None)
    if producer is None or producer.op_type != "Reshape" or len(producer.input) < 2:
        return None
    shape = constant_shapes(model.graph).get(producer.input[1])
    if shape is None or shape.tolist() != [-1, 1]:
        return None
    width = static_width(model, producer.input[0])
    return producer.input[0] if width is not None and width > 1 else None


def select_outputs(onx: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """A copy with exactly these outputs and only the nodes, initializers and inputs they need."""
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    graph = model.graph
    shapes = {v.name: v for v in list(graph.output) + list(graph.value_info)}
    needed = set(names)
    kept = []
    for node in reversed(graph.node):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(node.input)
            needed.update(subgraph_reads(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))
    del graph.output[:]
    graph.output.extend(
        shapes[n] if n in shapes else helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
        for n in names
    )
    used = {name for node in graph.node for name in [*node.input, *subgraph_reads(node)]}
    used |= set(names)
    kept_inits = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)
    kept_inputs = [i for i in graph.input if i.name in used]
    del graph.input[:]
    graph.input.extend(kept_inputs)
    return model


def with_class_labels(
    onx: onnx.ModelProto, probabilities: str, classes: np.ndarray
) -> onnx.ModelProto:
    """A copy of a classifier graph whose labels are ``classes``, as a fitted trainer's
    ``predict`` answers them: the label output becomes ``classes[argmax(probabilities)]``
    and a ZipMap's keys become ``classes``.

    Parameters
    ----------
    onx : onnx.ModelProto
        The classifier graph.
    probabilities : str
        The (n, len(classes)) probability tensor.
    classes : numpy.ndarray
        The fitted class labels (integers or strings).

    Raises
    ------
    OrtBenchError
        For labels that are neither integers nor strings.
    """
    whole = classes.dtype.kind == "f" and np.array_equal(classes, np.round(classes))
    if classes.dtype.kind in "iub" or whole:  # labels read as floats (0., 1.): integers
        labels = classes.astype(np.int64)
    elif classes.dtype.kind in "USO" and all(isinstance(c, str) for c in classes.tolist()):
        labels = np.array([str(c) for c in classes], dtype=object)
    else:
        raise OrtBenchError(
            f"an ONNX classifier's labels are integers or strings, the fitted classes_ are "
            f"{classes.dtype} {classes[:3].tolist()}: fit with integer or string labels"
        )
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    names = {o for node in graph.node for o in node.output} | {i.name for i in graph.initializer}
    constant = unique_name(names, "classes")
    tensor = numpy_helper.from_array(labels, constant)
    graph.initializer.append(tensor)
    for out in graph.output:
        node = producers.get(out.name)
        if node is not None and node.op_type == "ZipMap":
            kept = [a for a in node.attribute if not a.name.startswith("classlabels_")]
            del node.attribute[:]
            node.attribute.extend(kept)
            key = "classlabels_int64s" if labels.dtype != object else "classlabels_strings"
            node.attribute.append(helper.make_attribute(key, labels.tolist()))
            out.type.sequence_type.elem_type.map_type.key_type = tensor.data_type
        elif out.type.HasField("tensor_type") and out.type.tensor_type.elem_type not in FLOAT_TYPES:
            index = unique_name(names, f"{out.name}_index")
            names.add(index)
            if node is not None:
                old = unique_name(names, out.name)
                names.add(old)
                node.output[list(node.output).index(out.name)] = old
            graph.node.extend(
                [
                    helper.make_node("ArgMax", [probabilities], [index], axis=1, keepdims=0),
                    helper.make_node("Gather", [constant, index], [out.name]),
                ]
            )
            out.type.tensor_type.elem_type = tensor.data_type
    return select_outputs(model, [o.name for o in graph.output])
