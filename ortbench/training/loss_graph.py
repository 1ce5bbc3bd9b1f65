"""Append a loss (and a penalty) to a model: the graph full training differentiates."""

from __future__ import annotations

import onnx
from onnx import helper

from .errors import OrtBenchError
from .graph_builder import GraphBuilder
from .graph_tools import load_model, training_output
from .losses import loss_from_name, reduced_loss_nodes, weight_shares_nodes
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
) -> onnx.ModelProto:
    """Return a model that also outputs a loss, first among its outputs.

    Parameters
    ----------
    onx : onnx.ModelProto, bytes or path
        The model.
    score_name : {'squared_error', 'absolute_error', 'elastic', 'log'}, default='squared_error'
        The loss; ``'log'`` compares probabilities with one-hot float labels.
    loss_name : str, default='loss'
        The new scalar output.
    label_name : str, default='label'
        The new input holding the labels, of the shape of ``output_name``.
    weight_name : str, optional
        Adds a sample-weight input (n,) and makes the loss a weighted mean.
    scale_name : str, optional
        Instead of ``weight_name``, adds an (n, 1) input holding each row's share of the
        batch loss (w / sum(w)), computed by the caller once per batch: the graph then has
        no nodes for the mean (the trainers' loader stages this column).
    penalty : dict, optional
        ``{name: {'l1': a, 'l2': b}}`` adds ``a * sum|w| + b * sum(w^2)`` for each named
        initializer ``w``.
    output_name : str, optional
        The output the loss reads; by default the model's first float output, looking
        through ZipMap.
    l1_weight, l2_weight : float, default=0.5
        The two terms of the ``'elastic'`` loss.

    Returns
    -------
    onnx.ModelProto
        A copy of the model with the loss.

    Raises
    ------
    OrtBenchError
        For an unknown loss or penalised initializer, or both ``weight_name`` and
        ``scale_name``.
    """
    model = load_model(onx)
    graph = model.graph
    predicted = output_name or training_output(model)
    loss = loss_from_name(score_name, l1_weight, l2_weight)
    inits = {i.name for i in graph.initializer}
    for name in penalty or {}:
        if name not in inits:
            raise OrtBenchError(f"penalty on unknown initializer {name!r}")

    b = GraphBuilder(graph.name, prefix=f"{loss_name}_")
    shape = _declared_shape(model, predicted)
    label = b.input(label_name, shape)
    if weight_name and scale_name:
        raise OrtBenchError("give weight_name or scale_name, not both")
    shares = None
    if scale_name:
        shares = b.input(scale_name, [shape[0], 1])
    elif weight_name:
        shares = weight_shares_nodes(b, b.input(weight_name, shape[:1]))
    terms = [reduced_loss_nodes(loss, b, label, predicted, shares)]
    for name, coefs in (penalty or {}).items():
        term = ElasticLearningPenalty(l1=coefs.get("l1", 0.0), l2=coefs.get("l2", 0.0))
        terms.append(term.penalty_nodes(b, name))
    b.add_all(terms, name=loss_name)

    graph.input.extend(b.inputs)
    graph.initializer.extend(b.initializers)
    graph.node.extend(b.nodes)
    outputs = list(graph.output)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(loss_name, onnx.TensorProto.FLOAT, []))
    graph.output.extend(outputs)
    return model


def _declared_shape(model: onnx.ModelProto, name: str) -> list:
    for value in list(model.graph.output) + list(model.graph.value_info):
        if value.name == name and value.type.tensor_type.HasField("shape"):
            dims = value.type.tensor_type.shape.dim
            return [d.dim_value if d.dim_value > 0 else (d.dim_param or "N") for d in dims]
    return ["N", "C"]
