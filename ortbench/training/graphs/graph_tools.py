"""Graph surgery on the models users bring: loading, weights, linear nodes, outputs."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import onnx
import onnx.external_data_helper
import onnx.version_converter
from onnx import TensorProto, helper, numpy_helper

from ..errors import OrtBenchError
from ..runtime.sessions import MAX_OPSET, max_ir_version

#: The element types of the tensors the engine trains and differentiates.
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}


def load_model(model_onnx) -> onnx.ModelProto:
    """Return a ModelProto from a ModelProto, serialized bytes or a path to a .onnx file.

    The copy is adjusted to what the installed onnxruntime reads (:func:`fit_runtime`);
    an opset older than :data:`MIN_OPSET` is converted to :data:`MAX_OPSET` first.
    """
    if isinstance(model_onnx, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(model_onnx)
    elif isinstance(model_onnx, bytes):
        model = _parse(model_onnx, "the given bytes")
    elif isinstance(model_onnx, (str, os.PathLike)):
        path = os.fspath(model_onnx)
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
    return _fit_opset(model)


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
    :func:`~ortbench.training.runtime.sessions.max_ir_version`; an opset above :data:`MAX_OPSET`
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


#: The inputs of a node that hold statistics, not parameters: (operator, position).
_STATISTICS = {("BatchNormalization", 3), ("BatchNormalization", 4)}


def trainable_initializers(onx: onnx.ModelProto) -> list[str]:
    """Names of the float initializers that are parameters, in graph order.

    Skips scalars, constants only ever used as the left side of a Sub, which is how
    skl2onnx writes ``1 - p`` with its ``unity`` initializer, and the running mean and
    variance of a BatchNormalization (frozen statistics, torch's buffers).
    """
    consumers: dict[str, list[tuple[str, int]]] = {}
    for node in onx.graph.node:
        for position, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node.op_type, position))
    names = []
    for init in onx.graph.initializer:
        if init.data_type not in FLOAT_TYPES or len(init.dims) == 0:
            continue
        uses = consumers.get(init.name, [])
        if uses and all(use == ("Sub", 0) for use in uses):
            continue
        if uses and all(use in _STATISTICS for use in uses):
            continue
        names.append(init.name)
    return names


def bias_names(onx: onnx.ModelProto, weights: list[str]) -> set[str]:
    """The weights used only as an additive term (Add, or Gemm's C): biases, never penalised."""
    uses: dict[str, set] = {name: set() for name in weights}
    for node in onx.graph.node:
        for position, name in enumerate(node.input):
            if name in uses:
                uses[name].add(
                    "bias"
                    if node.op_type == "Add" or (node.op_type == "Gemm" and position == 2)
                    else "other"
                )
    return {name for name, kinds in uses.items() if kinds == {"bias"}}


def get_initializers(onx: onnx.ModelProto, names: list[str] | None = None) -> dict:
    """Initializer values as numpy arrays, all of them or the named ones."""
    values = {i.name: numpy_helper.to_array(i) for i in onx.graph.initializer}
    return values if names is None else {n: values[n] for n in names}


def check_weight_names(onx: onnx.ModelProto, weights: list[str] | None) -> list[str]:
    """The weights to train: the given names, checked, or the default choice."""
    if weights is None:
        weights = trainable_initializers(onx)
        if not weights:
            raise OrtBenchError("the model has nothing to train: no float initializer")
        _check_trainable(onx, weights)
        return weights
    if isinstance(weights, str):
        weights = [weights]
    known = {i.name: i for i in onx.graph.initializer}
    for name in weights:
        if name not in known:
            raise OrtBenchError(
                f"unknown weight {name!r}: the model's initializers are {sorted(known)}"
            )
        if known[name].data_type not in FLOAT_TYPES:
            raise OrtBenchError(f"weight {name!r} is not a float tensor and cannot be trained")
    if not weights:
        raise OrtBenchError("the model has nothing to train: weights_to_train is empty")
    _check_trainable(onx, weights)
    return list(weights)


def _check_trainable(onx: onnx.ModelProto, weights: list[str]) -> None:
    """Refuse double and float16 weights (the engine's buffers and updates are float32),
    and weights read only inside the subgraph of an If, Loop or Scan node."""
    read = {name for node in onx.graph.node for name in node.input}
    for node in onx.graph.node:
        inside = _subgraph_reads(node) & set(weights) - read
        if inside:
            raise OrtBenchError(
                f"weight {sorted(inside)[0]!r} is read only inside the subgraph of "
                f"{node.op_type} node {node.name!r}: ortbench cannot differentiate through "
                f"control flow; leave it out of weights_to_train"
            )
    for init in onx.graph.initializer:
        if init.name in weights and init.data_type != TensorProto.FLOAT:
            kind = helper.tensor_dtype_to_np_dtype(init.data_type).name
            raise OrtBenchError(
                f"weight {init.name!r} is {kind}: ortbench trains float32 weights; convert "
                f"the model in float32 (e.g. to_onnx(model, X[:1].astype(np.float32)))"
            )


def onnx_rename_weights(onx: onnx.ModelProto) -> onnx.ModelProto:
    """Rename every initializer ``I<k>_<name>`` in graph order, so names sort in that order."""
    renamed = onnx.ModelProto()
    renamed.CopyFrom(onx)
    mapping = {init.name: f"I{k}_{init.name}" for k, init in enumerate(renamed.graph.initializer)}
    for init in renamed.graph.initializer:
        init.name = mapping[init.name]
    for node in renamed.graph.node:
        node.input[:] = [mapping.get(name, name) for name in node.input]
    return renamed


def set_initializers(onx: onnx.ModelProto, values: dict) -> onnx.ModelProto:
    """A copy of ``onx`` whose named initializers hold ``values``, dtypes kept."""
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    for init in model.graph.initializer:
        if init.name in values:
            dtype = helper.tensor_dtype_to_np_dtype(init.data_type)
            init.CopyFrom(numpy_helper.from_array(np.asarray(values[init.name], dtype), init.name))
    return model


def weights_as_inputs(onx: onnx.ModelProto, weights: list[str]) -> onnx.ModelProto:
    """A copy where the named initializers become graph inputs (after the data inputs)."""
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    kept = [i for i in graph.initializer if i.name not in weights]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.input.extend(
        helper.make_tensor_value_info(n, inits[n].data_type, list(inits[n].dims)) for n in weights
    )
    return model


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
    read = _ancestors(producers, outputs)
    everything = _ancestors(producers, [o.name for o in graph.output])
    data = [i for i in graph.input if i.name not in constants]
    inputs = [i for i in data if i.name in read]
    if len(inputs) == 1 and inputs[0].type.tensor_type.elem_type in FLOAT_TYPES:
        unused = {i.name for i in data} - everything
        return (_without_inputs(onx, unused) if unused else onx), inputs[0]
    described = ", ".join(f"{i.name!r} ({_type_name(i)})" for i in inputs) or "none"
    raise OrtBenchError(
        f"ortbench feeds one float input, the model reads {described}: convert it with a "
        f"single float tensor input (e.g. to_onnx(model, X[:1].astype(np.float32)))"
    )


def _ancestors(producers: dict, names: list[str]) -> set[str]:
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
            stack.extend(_subgraph_reads(node))
    return seen


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


def _subgraph_reads(node: onnx.NodeProto) -> set[str]:
    """Names the subgraphs of a node (If, Loop, Scan) read from the outer scope."""
    names = set()
    for attribute in node.attribute:
        for sub in (
            [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs
        ):
            for inner in sub.node:
                names.update(inner.input)
                names |= _subgraph_reads(inner)
    return names


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
    columns = _static_width(onx, scores)
    return ClassifierOutput(probabilities, scores, function, columns)


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
    return _ancestors(producers, [name]) & set(trainable_initializers(onx))


def _static_width(onx: onnx.ModelProto, name: str) -> int | None:
    """The second dimension of a 2-D tensor, when shape inference knows it."""
    try:
        shape = inferred_shapes(onx)[0].get(name)
    except onnx.shape_inference.InferenceError:
        return None
    return shape[1] if shape is not None and len(shape) == 2 else None


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
            needed.update(_subgraph_reads(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))
    del graph.output[:]
    graph.output.extend(
        shapes[n] if n in shapes else helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
        for n in names
    )
    used = {name for node in graph.node for name in [*node.input, *_subgraph_reads(node)]}
    used |= set(names)
    kept_inits = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)
    kept_inputs = [i for i in graph.input if i.name in used]
    del graph.input[:]
    graph.input.extend(kept_inputs)
    return model


def rewrite_linear_nodes(onx) -> onnx.ModelProto:
    """Load a model and rewrite its ai.onnx.ml LinearRegressor / LinearClassifier nodes.

    skl2onnx stores a linear model's weights as node attributes, which leaves nothing to
    train; the rewritten graph has the same outputs from MatMul + Add over initializers
    ``<node>_coef`` and ``<node>_intercept``. Accepts what :func:`load_model` accepts.
    """
    model = load_model(onx)
    if not any(n.op_type in ("LinearRegressor", "LinearClassifier") for n in model.graph.node):
        return model
    graph = model.graph
    nodes = []
    for k, node in enumerate(graph.node):
        if node.op_type == "LinearRegressor":
            nodes.extend(_linear_regressor(node, k, graph))
        elif node.op_type == "LinearClassifier":
            nodes.extend(_linear_classifier(node, k, graph))
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


def _linear_weights(node, k, graph, n_rows):
    attrs = node_attributes(node)
    coef = np.asarray(attrs["coefficients"], dtype=np.float32).reshape(n_rows, -1).T
    intercept = np.asarray(attrs.get("intercepts", np.zeros(n_rows)), dtype=np.float32)
    base = node.name or f"linear{k}"
    names = (f"{base}_coef", f"{base}_intercept")
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.ascontiguousarray(coef), names[0]),
            numpy_helper.from_array(intercept.reshape(n_rows), names[1]),
        ]
    )
    return attrs, base, names


def _linear_regressor(node, k, graph):
    attrs = node_attributes(node)
    if attrs.get("post_transform", b"NONE") not in (b"NONE", "NONE"):
        raise OrtBenchError(f"LinearRegressor {node.name!r}: post_transform is not supported")
    _, base, (coef, intercept) = _linear_weights(node, k, graph, int(attrs.get("targets", 1)))
    return [
        helper.make_node("MatMul", [node.input[0], coef], [f"{base}_matmul"]),
        helper.make_node("Add", [f"{base}_matmul", intercept], [node.output[0]]),
    ]


def _linear_classifier(node, k, graph):
    """Scores and labels as onnxruntime's LinearClassifier kernel computes them."""
    attrs = node_attributes(node)
    labels = attrs.get("classlabels_ints")
    if labels is None:
        raise OrtBenchError(
            f"LinearClassifier {node.name!r}: only integer class labels are supported"
        )
    n_rows = len(attrs["coefficients"]) // _n_features(graph, node)
    attrs, base, (coef, intercept) = _linear_weights(node, k, graph, n_rows)
    post = attrs.get("post_transform", b"NONE")
    post = post.decode() if isinstance(post, bytes) else post
    if post not in ("NONE", "LOGISTIC", "SOFTMAX"):
        raise OrtBenchError(
            f"LinearClassifier {node.name!r}: post_transform {post} is not supported"
        )
    label_out, score_out = node.output[0], node.output[1]
    raw = f"{base}_raw"
    out = [
        helper.make_node("MatMul", [node.input[0], coef], [f"{base}_matmul"]),
        helper.make_node("Add", [f"{base}_matmul", intercept], [raw]),
    ]
    classes = numpy_helper.from_array(np.asarray(labels, dtype=np.int64), f"{base}_classes")
    graph.initializer.append(classes)
    if n_rows == 1 and len(labels) == 2:
        # binary with one row of coefficients: the positive class when the raw score > 0
        # scalars: constants, never mistaken for weights by trainable_initializers
        one = numpy_helper.from_array(np.array(1.0, np.float32), f"{base}_one")
        zero = numpy_helper.from_array(np.array(0.0, np.float32), f"{base}_zero")
        graph.initializer.extend([one, zero])
        # onnxruntime 1.19's kernel writes [1 - s, s] with s the raw score here, whatever
        # post_transform says (checked against the kernel in the tests)
        positive = raw
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


def _axes0(graph, base):
    name = f"{base}_axes0"
    graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), name))
    return name


def _n_features(graph, node) -> int:
    """Feature count of a linear node's input, read from the graph's declared shape."""
    value = {v.name: v for v in graph.input}.get(node.input[0])
    dims = value.type.tensor_type.shape.dim if value is not None else []
    if len(dims) != 2 or dims[1].dim_value <= 0:
        raise OrtBenchError(f"{node.op_type} {node.name!r}: its input needs a known feature count")
    return dims[1].dim_value


def drop_noop_reshapes(onx: onnx.ModelProto) -> onnx.ModelProto:
    """A copy without the Reshape nodes that leave their input's static shape unchanged.

    Converters often end a model with ``Reshape(y, [-1, 1])`` on a (n, 1) tensor. Once the
    batch dimension is static that node, and its mirror in the gradient graph, only cost
    time (see ``benchmarks/README.md``). Its output name is kept: when it is a graph output,
    the tensor it copied takes that name.
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
        shapes, _ = inferred_shapes(model)
    except onnx.shape_inference.InferenceError:
        return model  # an optimisation only: a model onnx cannot infer trains as it is
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    sources = {i.name for i in graph.input} | set(constants)
    outputs = {o.name for o in graph.output}
    for node in list(graph.node):
        if (
            node.op_type != "Reshape"
            or len(node.input) < 2
            or node.input[1] not in constants
            or any(a.name == "allowzero" and a.i for a in node.attribute)
        ):
            continue
        source, target = node.input[0], node.output[0]
        shape = shapes.get(source)
        if shape is None or None in shape or not _same_shape(shape, constants[node.input[1]]):
            continue
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


def check_weights_reach(onx: onnx.ModelProto, weights: list[str], outputs: list[str]) -> None:
    """Refuse trained weights that none of ``outputs`` (the trained output, a loss the model
    outputs) is computed from: nothing would give them a gradient.

    Raises
    ------
    OrtBenchError
        Naming the first such weight.
    """
    producers = {o: n for n in onx.graph.node for o in n.output}
    read = _ancestors(producers, outputs)
    unread = [w for w in weights if w not in read]
    if unread:
        raise OrtBenchError(
            f"weight {unread[0]!r} does not reach the trained output {outputs[0]!r} (the "
            f"first float output): leave it out of weights_to_train, or convert a model "
            f"whose first float output is the one to train"
        )


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
    if classes.dtype.kind in "iub":
        labels = classes.astype(np.int64)
    elif classes.dtype.kind in "USO" and all(isinstance(c, str) for c in classes.tolist()):
        labels = np.array([str(c) for c in classes], dtype=object)
    else:
        raise OrtBenchError(
            f"an ONNX classifier's labels are integers or strings, the fitted classes_ are "
            f"{classes.dtype}: fit with integer or string labels to export the model"
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


def unique_name(taken: set[str], base: str) -> str:
    """``base``, or ``base_1``, ``base_2``, ...: the first that is not ``taken``."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    return name
