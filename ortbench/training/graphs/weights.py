"""The model's weights as initializers: which are trainable, which are biases, their
values read and written, and weights turned into graph inputs."""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import OrtBenchError
from .loading import exported_by_torch
from .nodes import ancestors, subgraph_reads

#: The element types of the tensors the engine trains and differentiates.
FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16}


#: The inputs of a node that hold statistics, not parameters: (operator, position).
_STATISTICS = {("BatchNormalization", 3), ("BatchNormalization", 4)}

#: The metadata torch's default exporter (``dynamo=True``) gives each node: the call of
#: the exported program it comes from, whose arguments name the module's parameters
#: ``%p_<path>``, its buffers ``%b_<path>`` and the constants of ``forward`` otherwise.
_FX_NODE = "pkg.torch.onnx.fx_node"
_PARAMETER_ARGUMENT = re.compile(r"%p_\w")
#: How that exporter names the tensors it makes (attention's scale, a folded weight).
_EXPORTER_VALUE = re.compile(r"val_\d+")


def trainable_initializers(onx: onnx.ModelProto) -> list[str]:
    """Names of the float initializers that are parameters, in graph order.

    Skips scalars, constants only ever used as the left side of a Sub, which is how
    skl2onnx writes ``1 - p`` with its ``unity`` initializer, the running mean and
    variance of a BatchNormalization (frozen statistics, torch's buffers), and what
    torch's default exporter made from buffers and constants
    (:func:`torch_non_parameters`).
    """
    consumers: dict[str, list[tuple[str, int]]] = {}
    for node in onx.graph.node:
        for position, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node.op_type, position))
    skipped = set(torch_non_parameters(onx))
    names = []
    for init in onx.graph.initializer:
        if init.data_type not in FLOAT_TYPES or len(init.dims) == 0 or init.name in skipped:
            continue
        uses = consumers.get(init.name, [])
        if uses and all(use == ("Sub", 0) for use in uses):
            continue
        if uses and all(use in _STATISTICS for use in uses):
            continue
        names.append(init.name)
    return names


def torch_non_parameters(onx: onnx.ModelProto) -> list[str]:
    """The float initializers torch's default exporter made from the module's buffers
    and the constants of its ``forward``, not from its parameters.

    The exporter keeps each node's call in the exported program (:data:`_FX_NODE`), whose
    arguments name the parameters ``%p_...``: an initializer every reader of which has
    that record, none naming a parameter, is a buffer (input statistics, a positional
    encoding), a constant of ``forward`` or one the exporter made (attention's scale,
    Resize's scales). A parameter it folded into another initializer (a transposed
    weight) keeps a reader whose call names it.
    """
    calls: dict[str, list[str | None]] = {}
    for node in onx.graph.node:
        call = next((p.value for p in node.metadata_props if p.key == _FX_NODE), None)
        for name in node.input:
            calls.setdefault(name, []).append(call)
    return [
        init.name
        for init in onx.graph.initializer
        if init.data_type in FLOAT_TYPES
        and calls.get(init.name)
        and all(c is not None and not _PARAMETER_ARGUMENT.search(c) for c in calls[init.name])
    ]


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
        _warn_merged_parameters(onx, weights)
        _warn_transposed_copies(onx, weights)
        left_out = [n for n in torch_non_parameters(onx) if not _EXPORTER_VALUE.fullmatch(n)]
        if left_out:
            one = len(left_out) == 1
            warnings.warn(
                f"{len(left_out)} initializer{'' if one else 's'} that torch's exporter made "
                f"from buffers or constants of forward, not from parameters, "
                f"stay{'s' if one else ''} constant as in torch: {left_out[:5]} "
                f"(weights_to_train or --weights trains {'it' if one else 'them'})",
                UserWarning,
                stacklevel=3,
            )
        return weights
    if isinstance(weights, str):
        weights = [weights]
    twice = sorted({n for n in weights if list(weights).count(n) > 1})
    if twice:
        raise OrtBenchError(f"weights_to_train names {twice[0]!r} more than once: name each once")
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


def _warn_merged_parameters(onx: onnx.ModelProto, weights: list[str]) -> None:
    """Warn when torch's exporter may have merged parameters of equal values (LayerNorm's
    ones and zeros as initialised) into one initializer: a weight of constant values read
    by several nodes, directly or through Identity nodes. Trained, they stay tied, unlike
    the module's."""
    if not exported_by_torch(onx):
        return
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in onx.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    values = {i.name: i for i in onx.graph.initializer}
    merged = {}
    for name in weights:
        nodes = [
            reader
            for node in readers.get(name, [])
            for reader in (
                readers.get(node.output[0], []) if node.op_type == "Identity" else [node]
            )
        ]
        value = numpy_helper.to_array(values[name])
        if len(nodes) > 1 and value.size > 1 and np.all(value == value.flat[0]):
            merged[name] = len(nodes)
    if merged:
        which = ", ".join(f"{name!r} ({count} nodes)" for name, count in list(merged.items())[:5])
        warnings.warn(
            f"{len(merged)} weight{'s' * (len(merged) > 1)} hold one value repeated and "
            f"several nodes read each: {which}; if these nodes read distinct parameters of "
            f"the module, torch's exporter merged them for their equal values and they "
            f"train as one; export with keep_initializers_as_inputs=True (dynamo=False) or "
            f"optimize=False (dynamo=True) to keep them apart",
            UserWarning,
            stacklevel=3,
        )


def _warn_transposed_copies(onx: onnx.ModelProto, weights: list[str]) -> None:
    """Warn when a weight holds another's values transposed: torch's default exporter folds
    the ``w.t()`` of a parameter read twice (a tied weight) into an initializer of its own,
    which then trains apart from ``w``, unlike the module's one parameter."""
    if not exported_by_torch(onx):
        return
    chosen = set(weights)
    matrices = [
        (i.name, value)
        for i in onx.graph.initializer
        if i.name in chosen
        and (value := numpy_helper.to_array(i)).ndim == 2
        and not np.all(value == value.flat[0])
    ]
    pairs = [
        (a, b)
        for k, (a, first) in enumerate(matrices)
        for b, second in matrices[k + 1 :]
        if first.shape == second.shape[::-1] and np.array_equal(first, second.T)
    ]
    if pairs:
        which = ", ".join(f"{a!r} and {b!r}" for a, b in pairs[:5])
        warnings.warn(
            f"{which} hold the same values transposed: torch's exporter folded the "
            f"transpose of a weight the module reads twice (a tied weight) into a weight of "
            f"its own, and they train apart; export with dynamo=False to keep the tie, or "
            f"leave one out of weights_to_train",
            UserWarning,
            stacklevel=3,
        )


def _check_trainable(onx: onnx.ModelProto, weights: list[str]) -> None:
    """Refuse double and float16 weights (the engine's buffers and updates are float32),
    and weights read only inside the subgraph of an If, Loop or Scan node."""
    read = {name for node in onx.graph.node for name in node.input}
    for node in onx.graph.node:
        inside = subgraph_reads(node) & set(weights) - read
        if inside:
            raise OrtBenchError(
                f"weight {sorted(inside)[0]!r} is read only inside the subgraph of "
                f"{node.op_type} node {node.name!r}: ortbench cannot differentiate through "
                f"control flow; leave it out of weights_to_train"
            )
    for init in onx.graph.initializer:
        if init.name in weights and init.data_type != TensorProto.FLOAT:
            kind = helper.tensor_dtype_to_np_dtype(init.data_type).name
            how = (
                "export the module in float32 (module.float())"
                if exported_by_torch(onx)
                else "convert the model in float32 (e.g. to_onnx(model, X[:1].astype(np.float32)))"
            )
            raise OrtBenchError(
                f"weight {init.name!r} is {kind}: ortbench trains float32 weights; {how}"
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


def reaching_weights(onx: onnx.ModelProto, weights: list[str], outputs: list[str]) -> list[str]:
    """The ``weights`` that one of ``outputs`` is computed from, in their order."""
    producers = {o: n for n in onx.graph.node for o in n.output}
    read = ancestors(producers, outputs)
    return [w for w in weights if w in read]


def check_weights_reach(onx: onnx.ModelProto, weights: list[str], outputs: list[str]) -> None:
    """Refuse trained weights that none of ``outputs`` (the trained output, a loss the model
    outputs) is computed from: nothing would give them a gradient.

    Raises
    ------
    OrtBenchError
        Naming the first such weight.
    """
    unread = [w for w in weights if w not in reaching_weights(onx, weights, outputs)]
    if unread:
        raise OrtBenchError(
            f"weight {unread[0]!r} does not reach the trained output {outputs[0]!r} (the "
            f"first float output): leave it out of weights_to_train, or convert a model "
            f"whose first float output is the one to train"
        )
