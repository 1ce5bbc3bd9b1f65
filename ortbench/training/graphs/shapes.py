"""The model's data input and shapes: the one float input it predicts from, the
shape checks the trainers need, onnx's inferred shapes, and Reshape nodes that static
shapes make no-ops."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import OrtBenchError
from .loading import exported_by_torch
from .nodes import ancestors, node_attributes
from .weights import FLOAT_TYPES


def data_input(
    onx: onnx.ModelProto, weights: list[str], ignored_outputs: tuple[str, ...] = ()
) -> tuple[onnx.ModelProto, onnx.ValueInfoProto]:
    """The model without the inputs nothing reads, and the one data input it predicts from.

    ``ignored_outputs`` (a loss the model outputs) do not count: the inputs only they
    read (labels, weights) are not data inputs.

    Returns
    -------
    model : onnx.ModelProto
        ``onx`` itself, or a copy without its unused inputs.
    data : onnx.ValueInfoProto
        The float tensor input the features are fed to.

    Raises
    ------
    OrtBenchError
        When the predictions read no float input, several inputs, or a non-float one.
    """
    graph = onx.graph
    constants = {i.name for i in graph.initializer} | set(weights)
    producers = {o: n for n in graph.node for o in n.output}
    outputs = [o.name for o in graph.output if o.name not in ignored_outputs]
    read = ancestors(producers, outputs)
    everything = ancestors(producers, [o.name for o in graph.output])
    data = [i for i in graph.input if i.name not in constants]
    inputs = [i for i in data if i.name in read]
    if len(inputs) == 1 and inputs[0].type.tensor_type.elem_type in FLOAT_TYPES:
        unused = {i.name for i in data} - everything
        return (_without_inputs(onx, unused) if unused else onx), inputs[0]
    described = ", ".join(f"{i.name!r} ({_type_name(i)})" for i in inputs) or "none"
    how = (
        "export a module whose forward takes one float tensor (cast indices inside it, "
        "e.g. x.long())"
        if exported_by_torch(onx)
        else "convert it with a single float tensor input (e.g. to_onnx(model, "
        "X[:1].astype(np.float32)))"
    )
    raise OrtBenchError(f"ortbench feeds one float input, the model reads {described}: {how}")


def check_shapes(onx: onnx.ModelProto, data: onnx.ValueInfoProto, output: str) -> None:
    """Refuse what the trainers cannot train: a data input that is not a matrix, a trained
    output that is not (n, k), declared shapes that contradict the nodes.

    Raises
    ------
    OrtBenchError
        Naming the tensor and the shape it should have.
    """
    tensor = data.type.tensor_type
    if not tensor.HasField("shape") or len(tensor.shape.dim) != 2:
        shape = _shape_text(tensor)
        raise OrtBenchError(
            f"the model's input {data.name!r} has shape {shape}: ortbench feeds (n, features) "
            f"matrices; convert the model with an input of shape [None, n_features]"
        )
    try:
        inferred = onnx.shape_inference.infer_shapes(onx, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
        if "differ" not in str(e) and "mismatch" not in str(e):
            return  # an operator onnx cannot infer: nothing known to contradict
        reason = " ".join(str(e).split())[:200]
        raise OrtBenchError(
            f"the model's declared shapes contradict its nodes ({reason}): fix or remove the "
            f"declared shapes of its outputs and value infos"
        ) from None
    graph = inferred.graph
    for value in [*graph.value_info, *graph.output]:
        out = value.type.tensor_type
        if value.name == output and out.HasField("shape") and len(out.shape.dim) != 2:
            raise OrtBenchError(
                f"the model's output {output!r} has shape {_shape_text(out)}: ortbench trains "
                f"(n, outputs) outputs; make it (n, 1) (Unsqueeze or Reshape its result)"
            )


def _shape_text(tensor) -> str:
    if not tensor.HasField("shape"):
        return "unknown"
    dims = [d.dim_value if d.HasField("dim_value") else "n" for d in tensor.shape.dim]
    return f"({', '.join(map(str, dims))})"


def _without_inputs(onx: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    kept = [i for i in model.graph.input if i.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model


def _type_name(value: onnx.ValueInfoProto) -> str:
    if not value.type.HasField("tensor_type"):
        return value.type.WhichOneof("value") or "no type"
    return (
        helper.tensor_dtype_to_string(value.type.tensor_type.elem_type)
        .replace("TensorProto.", "")
        .lower()
    )


def drop_noop_copies(onx: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without the nodes that copy their input unchanged: a ``Reshape`` to its
    input's static shape, a ``Cast`` to its input's element type.

    Converters often end a model with ``Reshape(y, [-1, 1])`` on a (n, 1) tensor, and
    skl2onnx starts one with a ``Cast`` of its float input to float. Once the batch
    dimension is static these nodes, and their mirrors in the gradient graph, only cost
    time (see ``benchmarks/README.md``). Their output name is kept: when it is a graph
    output, the tensor it copied takes that name.
    """
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    graph = model.graph
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in graph.node
        for a in n.attribute
    ):
        return model  # a subgraph may read the tensor by its name: leave the model alone
    try:
        shapes, types = inferred_shapes(model)
    except onnx.shape_inference.InferenceError:
        return model  # an optimisation only: a model onnx cannot infer trains as it is
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    sources = {i.name for i in graph.input} | set(constants)
    outputs = {o.name for o in graph.output}
    for node in list(graph.node):
        if not _copies(node, shapes, types, constants):
            continue
        source, target = node.input[0], node.output[0]
        if target in outputs:
            if source in sources or source in outputs:
                continue  # the copy is what gives a graph input or output a second name
            old, new = source, target
        else:
            old, new = target, source
        graph.node.remove(node)
        _rename(graph, old, new)
    used = {name for n in graph.node for name in n.input}
    kept = [i for i in graph.initializer if i.name in used or i.name in outputs]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model


def _copies(node: onnx.NodeProto, shapes: dict, types: dict, constants: dict) -> bool:
    """Whether ``node`` outputs its first input unchanged (see :func:`drop_noop_copies`)."""
    if node.op_type == "Cast":
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        return to is not None and types.get(node.input[0]) == to
    if (
        node.op_type != "Reshape"
        or len(node.input) < 2
        or node.input[1] not in constants
        or any(a.name == "allowzero" and a.i for a in node.attribute)
    ):
        return False
    shape = shapes.get(node.input[0])
    return shape is not None and None not in shape and _same_shape(shape, constants[node.input[1]])


def inferred_shapes(model: onnx.ModelProto) -> tuple[dict[str, list], dict[str, int]]:
    """Tensor shapes and element types by name, from onnx's shape inference.

    Parameters
    ----------
    model : onnx.ModelProto
        The model.

    Returns
    -------
    shapes : dict of str to list
        The dimensions of every tensor whose rank is known (None where a dimension is not
        a positive constant), initializers included.
    types : dict of str to int
        The ``TensorProto`` element type of every tensor (0 for a non-tensor value).

    Raises
    ------
    onnx.shape_inference.InferenceError
        When onnx cannot infer the model.
    """
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    shapes, types = {}, {}
    graph = inferred.graph
    for value in [*graph.input, *graph.output, *graph.value_info]:
        tensor = value.type.tensor_type
        types[value.name] = tensor.elem_type
        if tensor.HasField("shape"):
            shapes[value.name] = [
                d.dim_value if d.dim_value > 0 else None for d in tensor.shape.dim
            ]
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
        types[init.name] = init.data_type
    return shapes, types


#: The operators whose ``auto_pad`` attribute :func:`explicit_pads` rewrites.
_PADDED = ("Conv", "MaxPool", "AveragePool", "LpPool")


def explicit_pads(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every ``auto_pad`` (SAME_UPPER, SAME_LOWER, VALID) of a convolution or
    pooling node written as the explicit ``pads`` it stands for.

    torch's TorchScript exporter writes ``Conv2d(padding="same")`` as ``auto_pad``, which
    onnxruntime-training's gradient of Conv reads as no padding (a wrong gradient, the
    forward right) and the portable backend and JAX runner refuse. The pads follow from
    the input's spatial size, which onnx's shape inference must know.

    Raises
    ------
    OrtBenchError
        When a node's input has a spatial size shape inference cannot tell.
    """
    nodes = [
        n for n in model.graph.node
        if n.op_type in _PADDED and node_attributes(n).get("auto_pad", b"NOTSET") != b"NOTSET"
    ]  # fmt: skip
    if not nodes:
        return model
    shapes, _ = inferred_shapes(model)
    for node in nodes:
        attributes = node_attributes(node)
        mode = attributes["auto_pad"].decode()
        shape = shapes.get(node.input[0])
        sizes = shape[2:] if shape else None
        if mode != "VALID" and (not sizes or None in sizes):
            raise OrtBenchError(
                f"{node.op_type} node {node.name!r} pads with auto_pad={mode} an input whose "
                f"size is unknown ({shape}): export it with explicit padding"
            )
        if node.op_type == "Conv":
            kernel = attributes.get("kernel_shape") or shapes[node.input[1]][2:]
        else:
            kernel = attributes["kernel_shape"]
        rank = len(kernel)
        strides = attributes.get("strides") or [1] * rank
        dilations = attributes.get("dilations") or [1] * rank
        begin, end = [0] * rank, [0] * rank
        for k in range(rank if mode != "VALID" else 0):
            span = (kernel[k] - 1) * dilations[k] + 1
            out = -(-sizes[k] // strides[k])
            total = max((out - 1) * strides[k] + span - sizes[k], 0)
            small, large = total // 2, total - total // 2
            begin[k], end[k] = (small, large) if mode == "SAME_UPPER" else (large, small)
        kept = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("pads", begin + end)])
    return model


def _same_shape(shape: list[int], target: np.ndarray) -> bool:
    """Whether Reshape (allowzero=0) to ``target`` keeps ``shape``."""
    target = [int(d) for d in np.ravel(target)]
    if len(target) != len(shape) or target.count(-1) > 1:
        return False
    resolved = [shape[k] if d == 0 else d for k, d in enumerate(target)]
    if -1 in resolved:
        known = int(np.prod([d for d in resolved if d != -1]))
        if known == 0:
            return False
        resolved[resolved.index(-1)] = int(np.prod(shape)) // known
    return tuple(resolved) == tuple(shape)


def _rename(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Rename tensor ``old`` to ``new`` in every node; drop its value info (shape
    inference rebuilds it)."""
    for node in graph.node:
        node.input[:] = [new if n == old else n for n in node.input]
        node.output[:] = [new if n == old else n for n in node.output]
    kept = [v for v in graph.value_info if v.name != old]
    del graph.value_info[:]
    graph.value_info.extend(kept)
