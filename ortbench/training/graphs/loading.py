"""The user's model read into a ModelProto the installed onnxruntime loads: bytes, a
path (with its external data) or a ModelProto, and its opset and IR version brought within
what the runtime reads."""

from __future__ import annotations

import os

import onnx
import onnx.external_data_helper
import onnx.version_converter
from onnx import TensorProto, helper

from ..errors import OrtBenchError
from ..runtime.build import MAX_OPSET, max_ir_version


def exported_by_torch(onx: onnx.ModelProto) -> bool:
    """Whether torch's exporter wrote the model (its one-line refusals then say how to
    export it, not how to convert a scikit-learn model)."""
    return onx.producer_name == "pytorch"


def load_model(model_onnx) -> onnx.ModelProto:
    """Return a ModelProto from a ModelProto, serialized bytes or a path to a .onnx file.

    The copy is adjusted to what the installed onnxruntime reads (:func:`fit_runtime`);
    an opset older than :data:`MIN_OPSET` is converted to :data:`MAX_OPSET` first,
    initializers also listed as graph inputs are inputs no more, and ``auto_pad`` is written
    as explicit pads (:func:`~ortbench.training.graphs.shapes.explicit_pads`).
    """
    if isinstance(model_onnx, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(model_onnx)
    elif isinstance(model_onnx, bytes):
        model = _parse(model_onnx, "the given bytes")
    elif isinstance(model_onnx, (str, os.PathLike)):
        path = os.fspath(model_onnx)
        if os.path.isdir(path):
            raise OrtBenchError(f"{path} is a folder: give the path of the model's .onnx file")
        if not os.path.isfile(path):
            raise OrtBenchError(f"model file not found: {path}")
        with open(path, "rb") as f:
            model = _parse(f.read(), path)
        _load_external_data(model, os.path.dirname(os.path.abspath(path)))
    else:
        raise OrtBenchError(
            f"model_onnx must be an onnx.ModelProto, bytes or a path, got {type(model_onnx).__name__}"
        )
    external = _external_tensors(model)
    if external:
        raise OrtBenchError(
            f"tensor {external[0].name!r} is stored in an external file: give the model by "
            f"the path of its .onnx file, next to which that file is read"
        )
    if len(model.graph.node) == 0:
        raise OrtBenchError("the ONNX model has no node")
    _drop_initializer_inputs(model)
    from .shapes import explicit_pads  # shapes reads this module

    return explicit_pads(_fit_opset(model))


def _drop_initializer_inputs(model: onnx.ModelProto) -> None:
    """Remove from the graph's inputs the initializers listed there too (IR 3's form,
    which torch writes with ``keep_initializers_as_inputs=True``): the engine feeds the
    data alone, and its gradient graphs would define those names twice."""
    initializers = {i.name for i in model.graph.initializer}
    if any(i.name in initializers for i in model.graph.input):
        kept = [i for i in model.graph.input if i.name not in initializers]
        del model.graph.input[:]
        model.graph.input.extend(kept)


def _external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    """The initializers whose values are still in an external file."""
    return [t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL]


def _load_external_data(model: onnx.ModelProto, folder: str) -> None:
    """Read the external data of ``model`` from files inside ``folder`` (the model's own
    folder, never the working directory); refuse a location that leads outside it."""
    tensors = _external_tensors(model)
    if not tensors:
        return
    root = os.path.realpath(folder)
    for tensor in tensors:
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        target = os.path.realpath(os.path.join(root, location))
        if os.path.isabs(location) or os.path.commonpath([root, target]) != root:
            raise OrtBenchError(
                f"tensor {tensor.name!r} is stored in {location!r}, outside the model's "
                f"folder: move the data file next to the model and save it with a relative "
                f"location"
            )
        if not os.path.isfile(target):
            raise OrtBenchError(
                f"tensor {tensor.name!r} is stored in {location!r}, which is not in the "
                f"model's folder {folder}"
            )
    try:
        onnx.external_data_helper.load_external_data_for_model(model, root)
    except (OSError, ValueError) as e:
        reason = " ".join(str(e).split())
        raise OrtBenchError(f"the model's external data cannot be read: {reason}") from None


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf raises several types for garbage
        raise OrtBenchError(f"{where} is not an ONNX model ({type(e).__name__})") from None
    if not model.HasField("graph"):
        raise OrtBenchError(f"{where} is not an ONNX model (no graph)")
    return model


#: The lowest ai.onnx opset trained as it is: older models (skl2onnx writes opset 9 for a
#: LogisticRegression) are converted to :data:`MAX_OPSET` first, since the loss nodes, the
#: linear-node rewrite and the portable gradients use the opset-13 forms of their operators.
MIN_OPSET = 13


def _fit_opset(model: onnx.ModelProto) -> onnx.ModelProto:
    main = _main_opset(model)
    if main is not None and main < MIN_OPSET:
        return fit_runtime(_convert_opset(model, main))
    return fit_runtime(model)


def _main_opset(model: onnx.ModelProto) -> int | None:
    """The ai.onnx opset ``model`` imports, or None."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return max(versions) if versions else None


#: The newest tensor element type each IR version defines (IR 10 added INT4, 11
#: FLOAT4E2M1, 12 FLOAT8E8M0); a runtime reading IR n reads no type above its entry.
_NEWEST_TYPE = {9: 20, 10: 22, 11: 23, 12: 24}


def fit_runtime(model: onnx.ModelProto) -> onnx.ModelProto:
    """Make ``model`` declare an IR version and ai.onnx opset the installed onnxruntime reads.

    Every model the engine hands to onnxruntime goes through here: the newest onnx writes
    a newer IR version (and onnxruntime-training's ``generate_artifacts`` a newer opset)
    than onnxruntime-training 1.19.2 reads. The IR version is lowered to
    :func:`~ortbench.training.runtime.build.max_ir_version`; an opset above :data:`MAX_OPSET`
    is relabelled when no operator of the graph changed since, converted by
    ``onnx.version_converter`` otherwise.

    Parameters
    ----------
    model : onnx.ModelProto
        Changed in place.

    Returns
    -------
    onnx.ModelProto
        ``model``, or its converted copy.

    Raises
    ------
    OrtBenchError
        When lowering is not sound: the model uses a tensor type or a field of a newer IR
        version, or an operator changed after :data:`MAX_OPSET` that onnx cannot convert.
    """
    target = max_ir_version()
    if model.ir_version > target:
        _check_lowerable(model, target)
    main = _main_opset(model)
    if main is not None and main > MAX_OPSET:
        changed = [
            n.op_type
            for n in _all_nodes(model)
            if n.domain in ("", "ai.onnx") and _changed_after(n.op_type, main)
        ]
        if changed:
            model = _convert_down(model, main, changed[0])
    versions: dict[str, int] = {}  # one entry per domain, ai.onnx spelled ""
    for opset in model.opset_import:
        domain = "" if opset.domain == "ai.onnx" else opset.domain
        versions[domain] = max(versions.get(domain, 0), opset.version)
    if versions.get("", 0) > MAX_OPSET:
        versions[""] = MAX_OPSET
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in versions.items())
    model.ir_version = min(model.ir_version or target, target)
    return model


def _check_lowerable(model: onnx.ModelProto, target: int) -> None:
    """Refuse ``model`` when it uses what IR version ``target`` does not define."""
    newest = _NEWEST_TYPE.get(target)
    why = None
    if any(len(getattr(n, "device_configurations", ())) for n in _all_nodes(model)) or len(
        getattr(model, "configuration", ())
    ):
        why = "device configurations"
    elif newest is not None:
        late = sorted(t for t in _element_types(model) if t > newest)
        if late:
            why = f"tensors of type {TensorProto.DataType.Name(late[0])}"
    if why:
        raise OrtBenchError(
            f"the model (IR version {model.ir_version}) uses {why}, which the installed "
            f"onnxruntime (IR version <= {target}) cannot read: save it without them"
        )


def _graphs(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    """The main graph, its subgraphs and theirs."""
    graphs, todo = [], [model.graph]
    while todo:
        graph = todo.pop()
        graphs.append(graph)
        for node in graph.node:
            for attribute in node.attribute:
                todo.extend([attribute.g] if attribute.HasField("g") else attribute.graphs)
    return graphs


def _all_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes of every graph and function of ``model``."""
    nodes = [n for g in _graphs(model) for n in g.node]
    return nodes + [n for f in model.functions for n in f.node]


def _element_types(model: onnx.ModelProto) -> set[int]:
    """The tensor element types ``model`` declares or stores."""
    types = set()
    for graph in _graphs(model):
        for info in (*graph.input, *graph.output, *graph.value_info):
            kind = info.type.WhichOneof("value")
            if kind in ("tensor_type", "sparse_tensor_type"):
                types.add(getattr(info.type, kind).elem_type)
        types.update(t.data_type for t in graph.initializer)
        for node in graph.node:
            types.update(a.t.data_type for a in node.attribute if a.HasField("t"))
    return types


def _convert_down(model: onnx.ModelProto, version: int, op_type: str) -> onnx.ModelProto:
    """``model`` converted from ai.onnx opset ``version`` down to :data:`MAX_OPSET`."""
    try:
        return onnx.version_converter.convert_version(model, MAX_OPSET)
    except Exception:  # the converter raises RuntimeError, ValidationError, ...
        raise OrtBenchError(
            f"the model uses opset {version} ({op_type} changed after opset {MAX_OPSET}); "
            f"onnxruntime 1.19.2 reads opsets up to {MAX_OPSET}: convert it again with "
            f"target_opset={MAX_OPSET}"
        ) from None


def _convert_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    """``model`` converted from ai.onnx opset ``version`` to :data:`MAX_OPSET`."""
    try:
        converted = onnx.version_converter.convert_version(model, MAX_OPSET)
    except Exception as e:  # the converter raises RuntimeError, ValidationError, ...
        reason = " ".join(str(e).split())[:200]
        raise OrtBenchError(
            f"the model uses opset {version}, which onnx cannot convert to opset {MAX_OPSET} "
            f"({type(e).__name__}: {reason}): convert it again with target_opset={MAX_OPSET}"
        ) from None
    declared = {o.name: o for o in model.graph.output}
    for output in converted.graph.output:  # the converter drops a ZipMap's sequence type
        if not output.type.WhichOneof("value") and output.name in declared:
            output.type.CopyFrom(declared[output.name].type)
    return converted


def _changed_after(op_type: str, version: int) -> bool:
    try:
        return onnx.defs.get_schema(op_type, version).since_version > MAX_OPSET
    except onnx.defs.SchemaError:
        return True
