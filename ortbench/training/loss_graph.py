"""Append a loss (and a penalty) to a model: the graph full training differentiates."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .errors import OrtBenchError
from .graph_builder import GraphBuilder
from .graph_tools import load_model, training_output
from .losses import (
    CONVENTIONS,
    LOSS_NAMES,
    BaseLearningLoss,
    ElasticLearningLoss,
    SquareLearningLoss,
    reduced_loss_nodes,
    weight_shares_nodes,
)
from .penalties import ElasticLearningPenalty


def add_loss_output(
    onx,
    score_name: str = "squared_error",
    loss_name: str = "loss",
    label_name: str = "label",
    weight_name: str | None = None,
    scale_name: str | None = None,
    penalty: dict | None = None,
    output_name: str | None = None,
    l1_weight: float = 0.5,
    l2_weight: float = 0.5,
    output_index: int | str | None = None,
    convention: str = "sklearn",
) -> onnx.ModelProto:
    """Return a model that also outputs a loss, first among its outputs.

    Parameters
    ----------
    onx : onnx.ModelProto, bytes or path
        The model.
    score_name : str
        The loss: ``'squared_error'`` (or the seed's ``'l2'``, ``'square_error'``),
        ``'absolute_error'`` (or ``'l1'``), ``'elastic'`` (``l1_weight * |d| +
        l2_weight * d^2``) or ``'log'`` (one-hot float labels, class probabilities).
    loss_name, label_name : str
        Names of the new output and of the new label input (same shape as the output).
    weight_name : str, optional
        Adds a sample-weight input (n,): the loss weights each row by it.
    scale_name : str, optional
        Adds instead an (n, 1) input holding each row's share of the batch loss
        (w / sum(w)), computed by the caller once per batch: the graph then has no nodes
        for the mean (the trainers' loader stages this column).
    penalty : dict, optional
        ``{'coef': {'l1': a, 'l2': b}}`` adds ``a * sum|coef| + b * sum(coef^2)`` for each
        named initializer; ``{'coef': b}`` is the seed's shorthand for ``{'l2': b}``.
    output_name, output_index : str or int, optional
        The output the loss compares with the labels, by name or by position (the
        seed's ``output_index`` takes either); default: the first float output, looking
        through ZipMap.
    convention : {'sklearn', 'seed'}
        ``'sklearn'``: the mean over the batch (a weighted mean with weights), the
        squared error halved, a scalar output. ``'seed'``: as onnxcustom wrote it, the sum
        over the batch (each row times its weight), the squared error whole, an output
        of shape (1, 1); a trainer then divides the learning rate by the batch size, as
        the seed's optimizers do.

    Returns
    -------
    onnx.ModelProto

    Raises
    ------
    OrtBenchError
        For an unknown loss, output, penalised initializer or convention.
    """
    if convention not in CONVENTIONS:
        raise OrtBenchError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    model = load_model(onx)
    graph = model.graph
    predicted = _compared_output(model, output_name, output_index)
    loss = _score(score_name, l1_weight, l2_weight, convention)
    inits = {i.name for i in graph.initializer}
    penalty = {name: _penalty_weights(name, coefs) for name, coefs in (penalty or {}).items()}
    for name in penalty:
        if name not in inits:
            raise OrtBenchError(f"penalty on unknown initializer {name!r}")

    b = GraphBuilder(graph.name, prefix=f"{loss_name}_")
    shape = _declared_shape(model, predicted)
    label = b.input(label_name, shape)
    if weight_name and scale_name:
        raise OrtBenchError("give weight_name or scale_name, not both")
    if convention == "seed":
        if scale_name:
            raise OrtBenchError("scale_name needs convention='sklearn' (a mean over the batch)")
        weight = b.input(weight_name, shape[:1]) if weight_name else None
        terms = [_summed_loss_nodes(loss, b, label, predicted, weight)]
    else:
        shares = None
        if scale_name:
            shares = b.input(scale_name, [shape[0], 1])
        elif weight_name:
            shares = weight_shares_nodes(b, b.input(weight_name, shape[:1]))
        terms = [reduced_loss_nodes(loss, b, label, predicted, shares)]
    for name, (l1, l2) in penalty.items():
        term = ElasticLearningPenalty(l1=l1, l2=l2).penalty_nodes(b, name)
        if convention == "seed":  # same shape as the loss: no broadcast to differentiate
            term = b.op("Reshape", term, b.const([1, 1], np.int64))
        terms.append(term)
    b.add_all(terms, name=loss_name)

    graph.input.extend(b.inputs)
    graph.initializer.extend(b.initializers)
    graph.node.extend(b.nodes)
    outputs = list(graph.output)
    del graph.output[:]
    loss_shape = [1, 1] if convention == "seed" else []
    graph.output.append(
        helper.make_tensor_value_info(loss_name, onnx.TensorProto.FLOAT, loss_shape)
    )
    graph.output.extend(outputs)
    return model


def _score(score_name: str, l1_weight: float, l2_weight: float, convention: str):
    """The loss object a ``score_name`` of :func:`add_loss_output` designates."""
    for klass, names in LOSS_NAMES.items():
        if score_name in names:
            if klass is ElasticLearningLoss:
                return ElasticLearningLoss(l1_weight, l2_weight)
            if klass is SquareLearningLoss:
                return SquareLearningLoss(convention=convention)
            return klass()
    known = sorted(n for names in LOSS_NAMES.values() for n in names)
    raise OrtBenchError(f"unknown loss {score_name!r}: expected one of {known}")


def _penalty_weights(name: str, coefs) -> tuple[float, float]:
    """(l1, l2) of one penalised initializer: ``{'l1': a, 'l2': b}`` or a number (l2)."""
    if isinstance(coefs, dict):
        unknown = set(coefs) - {"l1", "l2"}
        if unknown:
            raise OrtBenchError(
                f"penalty on {name!r} has unknown keys {sorted(unknown)}: use 'l1' and 'l2'"
            )
        return float(coefs.get("l1", 0.0)), float(coefs.get("l2", 0.0))
    if isinstance(coefs, (int, float)) and not isinstance(coefs, bool):
        return 0.0, float(coefs)
    raise OrtBenchError(
        f"penalty on {name!r} must be a number (an L2 weight) or {{'l1': a, 'l2': b}}, "
        f"got {coefs!r}"
    )


def _compared_output(model: onnx.ModelProto, name: str | None, index: int | str | None) -> str:
    """The output the loss applies to, by name, by position or by default."""
    if name is not None and index is not None:
        raise OrtBenchError("give output_name or output_index, not both")
    outputs = [o.name for o in model.graph.output]
    if isinstance(index, str):
        name = index
    elif index is not None:
        if not isinstance(index, int) or not -len(outputs) <= index < len(outputs):
            raise OrtBenchError(
                f"output_index {index!r} is out of range: the model has {len(outputs)} outputs"
            )
        name = outputs[index]
    if name is None:
        return training_output(model)
    if name not in outputs:
        raise OrtBenchError(f"unknown output {name!r}: the model's outputs are {outputs}")
    return name


def _summed_loss_nodes(
    loss: BaseLearningLoss, b: GraphBuilder, label: str, predicted: str, weight: str | None
) -> str:
    """Add the seed's batch loss, a (1, 1) sum over rows and outputs (rows times
    ``weight``, an (n,) input, when given); return its name."""
    element, factor = loss.element_loss_nodes(b, label, predicted)
    if weight is not None:
        element = b.op("Mul", element, b.op("Unsqueeze", weight, b.const([1], np.int64)))
    total = b.op("ReduceSum", element, keepdims=1)
    return total if factor == 1 else b.op("Mul", total, b.const(factor))


def _declared_shape(model: onnx.ModelProto, name: str) -> list:
    for value in list(model.graph.output) + list(model.graph.value_info):
        if value.name == name and value.type.tensor_type.HasField("shape"):
            dims = value.type.tensor_type.shape.dim
            return [d.dim_value if d.dim_value > 0 else (d.dim_param or "N") for d in dims]
    return ["N", "C"]
