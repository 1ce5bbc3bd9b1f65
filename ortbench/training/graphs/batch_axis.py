"""A symbolic batch dimension for models exported with a fixed one.

``torch.onnx.export`` without ``dynamic_axes`` and skl2onnx with
``FloatTensorType([16, 10])`` write models whose inputs, outputs and shape constants hold
the batch size they were exported with. :func:`free_batch_axis` gives such a model a
symbolic first dimension, rewrites the ``Reshape`` shapes that repeat the exported batch,
and names the node that still pins it when that cannot be done safely.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import OrtBenchError

#: The name of the symbolic batch dimension.
BATCH = "N"


def _fixed_batch(value: onnx.ValueInfoProto) -> int | None:
    dims = value.type.tensor_type.shape.dim
    return dims[0].dim_value if len(dims) >= 1 and dims[0].dim_value > 0 else None


def _free(value: onnx.ValueInfoProto, batch: int) -> None:
    dims = value.type.tensor_type.shape.dim
    if len(dims) >= 1 and dims[0].dim_value == batch:
        dims[0].dim_param = BATCH


def constant_shapes(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Integer constants by name: initializers and Constant nodes' ``value``."""
    shapes = {
        i.name: numpy_helper.to_array(i)
        for i in graph.initializer
        if i.data_type == onnx.TensorProto.INT64
    }
    for node in graph.node:
        value = node.attribute[0] if node.op_type == "Constant" and node.attribute else None
        if (
            value is not None
            and value.name == "value"
            and value.t.data_type == onnx.TensorProto.INT64
        ):
            shapes[node.output[0]] = numpy_helper.to_array(value.t)
    return shapes


def _free_shape(shape: np.ndarray, batch: int, allowzero: bool = False) -> np.ndarray | None:
    """The Reshape target without the exported batch, or None when it holds none or it
    cannot be told which entry holds it.

    A first entry ``B`` is taken for the batch: ``[B, 1, 8, 8]`` becomes ``[-1, 1, 8, 8]``,
    ``[B, -1]`` becomes ``[0, -1]`` (the first dimension copied from the input's), which a
    Reshape with ``allowzero`` (torch's default exporter writes it) reads as a zero: None
    there. Elsewhere, the one entry that is a multiple of ``B`` is: ``[8, 2 * B, 4]``
    becomes ``[8, -1, 4]``.
    """
    shape = np.array(shape, dtype=np.int64).reshape(-1)
    if len(shape) and shape[0] == batch:
        if -1 in shape and allowzero:
            return None
        shape[0] = 0 if -1 in shape else -1
        return shape
    carrying = [k for k, d in enumerate(shape) if d > 0 and d % batch == 0]
    if -1 not in shape and len(carrying) == 1:
        shape[carrying[0]] = -1
        return shape
    return None


def _rewrite_reshapes(graph: onnx.GraphProto, batch: int) -> None:
    """Point every Reshape whose constant shape holds the batch at a freed copy."""
    constants = constant_shapes(graph)
    added = []
    for node in graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[1] not in constants:
            continue
        allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
        freed = _free_shape(constants[node.input[1]], batch, allowzero)
        if freed is None:
            continue
        name = f"{node.input[1]}_batch_free_{len(added)}"
        added.append(numpy_helper.from_array(freed, name))
        node.input[1] = name
    graph.initializer.extend(added)


def _pinning_node(model: onnx.ModelProto, data: str, batch: int) -> onnx.NodeProto | None:
    """The first node that turns a tensor of symbolic rows computed from the data into
    static ones with a dimension the batch divides: what still fixes the batch. (A node
    reducing the rows away, as a loss does, pins nothing.)"""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except onnx.shape_inference.InferenceError:
        return None
    dims = {}
    for value in [*inferred.input, *inferred.value_info, *inferred.output]:
        tensor = value.type.tensor_type
        if tensor.HasField("shape"):
            dims[value.name] = [d.dim_value for d in tensor.shape.dim]
    from_data = {data}
    for node in model.graph.node:
        inputs = [n for n in node.input if n in from_data]
        if not inputs:
            continue
        from_data.update(node.output)
        if node.op_type in ("Shape", "Size"):
            continue  # a static shape holding the symbolic size: nothing pinned
        dynamic = any(n in dims and 0 in dims[n] for n in inputs)
        outputs = [dims.get(n) for n in node.output]
        if (
            dynamic
            and outputs
            and all(o is not None and 0 not in o for o in outputs)
            and any(d % batch == 0 for o in outputs for d in o)
        ):
            return node
    return None


def free_batch_axis(model: onnx.ModelProto, data: str) -> onnx.ModelProto:
    """The model with a symbolic first dimension for its data input and outputs.

    Parameters
    ----------
    model : onnx.ModelProto
        A model whose data input may have a fixed first dimension.
    data : str
        The name of the data input.

    Returns
    -------
    onnx.ModelProto
        ``model`` itself when its data input has no fixed first dimension; else a copy
        where the first dimension of the data input and of the outputs of the same size
        is symbolic, and ``Reshape`` nodes whose constant shape holds the exported batch
        read a shape that does not (``-1`` or ``0`` in its place).

    Raises
    ------
    OrtBenchError
        Naming the node that still fixes the batch, when no safe rewrite frees it.
    """
    value = next(i for i in model.graph.input if i.name == data)
    batch = _fixed_batch(value)
    if batch is None:
        return model
    freed = onnx.ModelProto()
    freed.CopyFrom(model)
    graph = freed.graph
    for tensor in [next(i for i in graph.input if i.name == data), *graph.output]:
        _free(tensor, batch)
    del graph.value_info[:]  # shape inference rebuilds them without the fixed batch
    _rewrite_reshapes(graph, batch)
    node = _pinning_node(freed, data, batch)
    if node is not None:
        raise OrtBenchError(
            f"{node.op_type} node {node.name!r} fixes the batch at the {batch} rows the model "
            f"was exported with: export it with a dynamic batch axis (dynamic_axes in "
            f"torch.onnx.export, None as the first dimension of skl2onnx's input type)"
        )
    return freed
