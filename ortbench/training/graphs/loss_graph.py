"""Append a loss (and a penalty) to a model: the graph full training differentiates."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import OrtBenchError
from ..losses import (
    CONVENTIONS,
    LOSS_NAMES,
    LOSSES,
    BaseLearningLoss,
    NegLogLearningLoss,
    SquareLearningLoss,
    loss_from_name,
    reduced_loss_nodes,
    weight_shares_nodes,
    weighted_sum_nodes,
)
from ..penalties import ElasticLearningPenalty
from .builder import GraphBuilder
from .loading import load_model
from .nodes import unique_name
from .outputs import training_output
from .shapes import inferred_shapes

#: The clipping bound of the seed's log loss when ``add_loss_output`` is given none.
SEED_LOG_EPS = 1e-6


class LossHead(NamedTuple):
    """A loss :func:`add_loss_output` appended (``convention='sklearn'``, rows weighed by
    ``scale_name``, no penalty), described so that a training step writes it and its
    gradient by hand.

    Differentiated node by node, the squared error's gradient with respect to the
    prediction takes four nodes: one each for the batch sum, the weighting Gemm and both
    factors of ``d * d``. Written by hand it takes one (see :meth:`nodes`), which reads
    each row's share of the loss times the step factor, a column the batch loader keeps.
    The loss itself is left (1, 1), as the weighting Gemm gives it for one output: no
    node reduces it to a scalar.
    """

    #: The loss of each element, whose derivative :meth:`nodes` writes.
    loss: BaseLearningLoss
    #: The model's output the loss compares with the labels.
    predicted: str
    #: The labels' input.
    label: str
    #: The (n, 1) input of each row's share of the batch loss times the step factor.
    grad_scale: str
    #: The (n, 1) input of each row's share of the batch loss.
    loss_scale: str
    #: At batch 1, the (1, c) input of ``grad_scale`` times the labels, with which the
    #: gradient is one product (see :meth:`nodes`); None for the element-wise form.
    scaled_label: str | None = None

    def nodes(self, b: GraphBuilder, loss_name: str, columns: int | None) -> str:
        """Add the nodes of the batch loss, named ``loss_name``, and of its gradient with
        respect to ``predicted`` times the step factor; return the gradient's name.

        Inputs: ``predicted`` (n, c), ``label`` (n, c), ``loss_scale`` and ``grad_scale``
        (n, 1). Outputs: the loss (1, 1), a ``ReduceSum`` of the weighting Gemm's (c, 1)
        unless ``columns`` (c) is 1; the gradient (n, c).

        With ``scaled_label`` (one row, and a loss whose derivative is ``k (p - y)``, see
        :meth:`~ortbench.training.losses.BaseLearningLoss.derivative_slope`) the gradient
        is ``k (grad_scale p - scaled_label)``: one ``Gemm`` of the (1, 1) scale by the
        (1, c) prediction, instead of a ``Sub`` and a ``Mul``. The difference ``p - y`` is
        then read by the loss's nodes only, and goes with them where a graph drops the
        loss.
        """
        element, factor, derivative = self.loss.element_nodes(b, self.label, self.predicted)
        weighted_sum_nodes(b, element, factor, self.loss_scale, loss_name, True, columns)
        if self.scaled_label is None:
            return b.op("Mul", derivative, self.grad_scale)
        return self.loss.scaled_gradient_node(b, self.grad_scale, self.predicted, self.scaled_label)

    @classmethod
    def of(cls, loss: BaseLearningLoss, penalty, **names: str) -> LossHead | None:
        """The head of a regression loss without a penalty (whose gradient would need the
        weights' own nodes); None otherwise, and the graph is differentiated node by node.

        A loss whose ``element_loss_nodes`` writes another term than ``element_nodes``
        (the log loss's, which shifts where the other clips) gets None too: the derivative
        ``element_nodes`` writes is not that term's.
        """
        own_term = type(loss).element_loss_nodes is BaseLearningLoss.element_loss_nodes
        if loss.is_classification or penalty or not own_term:
            return None
        return cls(loss, **names)


def add_loss_output(
    onx,
    score_name="squared_error",
    loss_name: str = "loss",
    label_name: str | None = None,
    weight_name: str | None = None,
    scale_name: str | None = None,
    penalty: dict | None = None,
    output_name: str | None = None,
    l1_weight: float = 0.5,
    l2_weight: float = 0.5,
    output_index: int | str | None = None,
    eps: float | None = None,
    convention: str = "sklearn",
) -> onnx.ModelProto:
    """Return a model that also outputs a loss, first among its outputs.

    Parameters
    ----------
    onx : onnx.ModelProto, bytes or path
        The model.
    score_name : str or BaseLearningLoss, default='squared_error'
        One of 'squared_error', 'absolute_error', 'elastic', 'log', the seed's names
        ('l2', 'square_error', 'l1', 'absolute', 'elastic_error'...), or a loss object
        (``NegLogLearningLoss(probability_function='softmax')`` for raw scores).
    loss_name : str, default='loss'
        The new output, a scalar (shaped (1, 1) with ``convention='seed'``).
    label_name : str, default=None
        The new input of labels, shaped like the compared output (one-hot float labels for
        the log loss). None is ``'label'``, or ``'label_1'``, ... when the model already
        has a tensor of that name (skl2onnx classifiers output ``label``).
    weight_name : str, default=None
        Adds a sample-weight input (n,) and makes the loss a weighted mean.
    scale_name : str, default=None
        Adds instead an (n, 1) input holding each row's share of the batch loss
        (w / sum(w)), computed by the caller once per batch: the graph then has no nodes
        for the mean (the trainers' loader stages this column).
    penalty : dict, default=None
        ``{'coef': {'l1': a, 'l2': b}}`` adds a * sum|coef| + b * sum(coef^2) for each
        named initializer; ``{'coef': b}`` is the seed's shorthand for ``{'l2': b}``.
    output_name : str, default=None
        The output the loss compares with the labels: a tensor of the graph; None is the
        model's first float output, looking through ZipMap.
    l1_weight, l2_weight : float, default=0.5
        The weights of the 'elastic' loss.
    output_index : int or str, default=None
        The seed's way to choose the compared output: a position among the model's
        outputs, or an output's name (instead of ``output_name``).
    eps : float, default=None
        The clipping bound of the probabilities of the 'log' loss (the seed's option);
        None keeps :class:`NegLogLearningLoss`'s default (:data:`SEED_LOG_EPS` with
        ``convention='seed'``).
    convention : {'sklearn', 'seed'}, default='sklearn'
        ``'sklearn'``: the mean over the batch (weighted with weights), the squared error
        halved. ``'seed'``: as onnxcustom wrote it, the sum over the batch (each row times
        its weight), the squared error whole, the loss shaped (1, 1); a trainer then
        divides the learning rate by the batch size, as the seed's optimizers did. The
        seed's ``'log'`` (named so) is its binary log loss: int64 class labels (n, 1),
        the compared output two columns of probabilities, the mean over the batch, in the
        output's element type (float or double).

    Returns
    -------
    onnx.ModelProto
        A copy of the model with the loss.

    Raises
    ------
    OrtBenchError
        For an unknown loss, output or initializer, a penalty key other than 'l1' and
        'l2', a negative weight, a new name that the model already uses, an ``eps`` for
        another loss than 'log', or an unknown convention.
    """
    if convention not in CONVENTIONS:
        raise OrtBenchError(f"convention must be one of {CONVENTIONS}, got {convention!r}")
    model = load_model(onx)
    graph = model.graph
    names = tensor_names(graph)
    predicted = _compared_output(model, output_name, output_index)
    if predicted not in names:
        raise OrtBenchError(
            f"unknown output_name {predicted!r}: the model's outputs are "
            f"{[o.name for o in graph.output]}"
        )
    # the seed's log loss, named: it clips with any eps it is given (0 < eps < 1 with
    # the other forms)
    seed_log = convention == "seed" and score_name in LOSS_NAMES[NegLogLearningLoss]
    loss = _score(score_name, l1_weight, l2_weight, None if seed_log else eps, convention)
    penalties = _penalties(penalty, {i.name: i.data_type for i in graph.initializer})
    label_name = label_name or unique_name(names, "label")
    new_names = [("loss_name", loss_name), ("label_name", label_name)]
    new_names += [("weight_name", weight_name), ("scale_name", scale_name)]
    for argument, name in new_names:
        if name in names:
            raise OrtBenchError(
                f"{argument}={name!r} is already a tensor of the model: choose another name"
            )
    if weight_name and scale_name:
        raise OrtBenchError("give weight_name or scale_name, not both")

    b = GraphBuilder(graph.name, prefix=f"{loss_name}_")
    shape = _declared_shape(model, predicted)
    loss_type = TensorProto.FLOAT
    if seed_log:
        loss_type = _declared_type(model, predicted)
        if penalties and loss_type != TensorProto.FLOAT:
            kind = helper.tensor_dtype_to_np_dtype(loss_type).name
            raise OrtBenchError(
                f"a penalty adds to a float32 loss, and {predicted!r} holds {kind} "
                f"probabilities: convert the model to float32 or leave out the penalty"
            )
        label = b.input(label_name, [shape[0], 1], TensorProto.INT64)
        weight = b.input(weight_name, shape[:1], loss_type) if weight_name else None
        clip = SEED_LOG_EPS if eps is None else eps
        terms = [_seed_log_loss_nodes(b, label, predicted, weight, clip, loss_type)]
    elif convention == "seed":
        label = b.input(label_name, shape)
        if scale_name:
            raise OrtBenchError("scale_name needs convention='sklearn' (a mean over the batch)")
        weight = b.input(weight_name, shape[:1]) if weight_name else None
        terms = [_summed_loss_nodes(loss, b, label, predicted, weight)]
    else:
        label = b.input(label_name, shape)
        shares = None
        if scale_name:
            shares = b.input(scale_name, [shape[0], 1])
        elif weight_name:
            shares = weight_shares_nodes(b, b.input(weight_name, shape[:1]))
        terms = [reduced_loss_nodes(loss, b, label, predicted, shares)]
    for name, term in penalties.items():
        terms.append(term.penalty_nodes(b, name))
    b.add_all(terms, name=loss_name)

    graph.input.extend(b.inputs)
    graph.initializer.extend(b.initializers)
    graph.node.extend(b.nodes)
    outputs = list(graph.output)
    del graph.output[:]
    loss_shape = [1, 1] if convention == "seed" else []
    graph.output.append(helper.make_tensor_value_info(loss_name, loss_type, loss_shape))
    graph.output.extend(outputs)
    return model


def _score(score_name, l1_weight: float, l2_weight: float, eps, convention: str):
    """The loss object a ``score_name`` of :func:`add_loss_output` designates."""
    named = isinstance(score_name, str)
    if named:
        for klass, names in LOSS_NAMES.items():
            if score_name in names:
                score_name = next(k for k, v in LOSSES.items() if v is klass)
    loss = loss_from_name(score_name, l1_weight, l2_weight)
    if named and isinstance(loss, SquareLearningLoss) and convention == "seed":
        loss = SquareLearningLoss(convention="seed")
    if eps is not None:
        if not isinstance(loss, NegLogLearningLoss):
            raise OrtBenchError(f"eps applies to the 'log' loss, not {type(loss).__name__}")
        loss = NegLogLearningLoss(probability_function=loss.probability_function, eps=eps)
        loss.check()
    return loss


def tensor_names(graph: onnx.GraphProto) -> set[str]:
    """Every name the graph gives a tensor: inputs, initializers, node outputs."""
    names = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    return names | {o for node in graph.node for o in node.output}


def _penalties(penalty, initializers: dict[str, int]) -> dict[str, ElasticLearningPenalty]:
    """The checked penalty terms of ``{'weight': {'l1': a, 'l2': b}}`` over the model's
    initializers (name to element type)."""
    if penalty is None:
        return {}
    if not isinstance(penalty, dict):
        raise OrtBenchError(
            f"penalty must be a dict such as {{'coefficient': {{'l2': 1e-4}}}}, got "
            f"{type(penalty).__name__} {penalty!r}"
        )
    terms = {}
    for name, coefs in penalty.items():
        if name not in initializers:
            raise OrtBenchError(f"penalty on unknown initializer {name!r}")
        if initializers[name] != TensorProto.FLOAT:
            kind = helper.tensor_dtype_to_np_dtype(initializers[name]).name
            raise OrtBenchError(
                f"penalty on {name!r}: it is an initializer of type {kind}, a penalty "
                f"applies to float32 weights"
            )
        if isinstance(coefs, (int, float)) and not isinstance(coefs, bool):
            coefs = {"l2": coefs}  # the seed's shorthand
        unknown = set(coefs) - {"l1", "l2"} if isinstance(coefs, dict) else {coefs}
        if unknown:
            raise OrtBenchError(
                f"penalty on {name!r}: unknown key(s) {sorted(map(str, unknown))}, expected "
                f"a dict with 'l1' and/or 'l2' (or a number, an L2 weight)"
            )
        term = ElasticLearningPenalty(l1=coefs.get("l1", 0.0), l2=coefs.get("l2", 0.0))
        term.check()
        terms[name] = term
    return terms


def _compared_output(model: onnx.ModelProto, name: str | None, index: int | str | None) -> str:
    """The tensor the loss applies to: ``name``, the output at ``index`` (a position or a
    name), or by default the first float output."""
    if name is not None and index is not None:
        raise OrtBenchError("give output_name or output_index, not both")
    if index is None:
        return name or training_output(model)
    outputs = [o.name for o in model.graph.output]
    if isinstance(index, str):
        if index not in outputs:
            raise OrtBenchError(f"unknown output {index!r}: the model's outputs are {outputs}")
        return index
    if isinstance(index, bool) or not isinstance(index, int):
        raise OrtBenchError(f"output_index must be an int or an output name, got {index!r}")
    if not -len(outputs) <= index < len(outputs):
        raise OrtBenchError(
            f"output_index {index} is out of range: the model has {len(outputs)} outputs"
        )
    return outputs[index]


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


def _seed_log_loss_nodes(
    b: GraphBuilder, label: str, predicted: str, weight: str | None, eps: float, elem: int
) -> str:
    """Add the seed's log loss of a binary problem; return its name, a (1, 1) tensor of
    element type ``elem``.

    ``predicted`` holds two columns of probabilities (clipped to [eps, 1 - eps], then
    scaled to sum to 1 on each row), ``label`` the int64 class (n, 1), ``weight`` (n,)
    multiplies each row's loss. The loss is the mean over the rows of
    -(1 - y) log(p0) - y log(p1).
    """
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    axis = b.const([1], np.int64)
    clipped = b.op("Clip", predicted, b.const(eps, dtype), b.const(1 - eps, dtype))
    scaled = b.op("Div", clipped, b.op("ReduceSum", clipped, axis, keepdims=1))
    positive = b.op("Cast", label, to=elem)
    one_hot = b.op("Concat", b.op("Sub", b.const([1], dtype), positive), positive, axis=1)
    likelihood = b.op("ReduceSum", b.op("Mul", b.op("Log", scaled), one_hot), axis, keepdims=1)
    if weight is not None:
        likelihood = b.op("Mul", likelihood, b.op("Unsqueeze", weight, axis))
    mean = b.op("Neg", b.op("ReduceMean", likelihood, keepdims=0))
    return b.op("Reshape", mean, b.const([1, 1], np.int64))


def _declared_type(model: onnx.ModelProto, name: str) -> int:
    """The element type the model declares for ``name`` (float when it declares none)."""
    for value in list(model.graph.output) + list(model.graph.value_info):
        if value.name == name and value.type.tensor_type.elem_type:
            return value.type.tensor_type.elem_type
    return TensorProto.FLOAT


def _declared_shape(model: onnx.ModelProto, name: str) -> list:
    for value in list(model.graph.output) + list(model.graph.value_info):
        if value.name == name and value.type.tensor_type.HasField("shape"):
            dims = value.type.tensor_type.shape.dim
            return [d.dim_value if d.dim_value > 0 else (d.dim_param or "N") for d in dims]
    # a tensor behind ZipMap is declared nowhere: its inferred width, when known, shapes
    # the labels (a one-hot label column per class)
    try:
        shape = inferred_shapes(model)[0].get(name)
    except onnx.shape_inference.InferenceError:
        shape = None
    if shape is not None and len(shape) == 2 and shape[1] is not None:
        return ["N", shape[1]]
    return ["N", "C"]


def scalar_loss(onx: onnx.ModelProto, loss_name: str) -> onnx.ModelProto:
    """A copy of a model that outputs its own loss, that loss reshaped to a scalar.

    A loss computed with ``keepdims=1`` or declared with shape (1, 1) holds one value, but
    the runtime's training step wants a scalar: a Reshape to ``[]`` makes it one.

    Raises
    ------
    OrtBenchError
        When the loss may hold several values (a per-sample loss).
    """
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    graph = model.graph
    output = next(o for o in graph.output if o.name == loss_name)
    raw = unique_name(tensor_names(graph), f"{loss_name}_unreduced")
    for node in graph.node:
        node.output[:] = [raw if o == loss_name else o for o in node.output]
        node.input[:] = [raw if i == loss_name else i for i in node.input]
    output.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except onnx.shape_inference.InferenceError:
        inferred = model
    value = next((v for v in inferred.graph.value_info if v.name == raw), None)
    tensor = value.type.tensor_type if value is not None else None
    dims = list(tensor.shape.dim) if tensor is not None and tensor.HasField("shape") else None
    if dims is None or any(d.dim_value != 1 for d in dims):
        shape = "unknown" if dims is None else [d.dim_value or d.dim_param or "?" for d in dims]
        raise OrtBenchError(
            f"the model's loss output {loss_name!r} has shape {shape}: a loss must be one "
            f"value per batch (reduce it with ReduceMean or ReduceSum)"
        )
    shape = numpy_helper.from_array(np.zeros(0, np.int64), f"{raw}_scalar_shape")
    graph.initializer.append(shape)
    graph.node.append(helper.make_node("Reshape", [raw, shape.name], [loss_name]))
    output.type.tensor_type.shape.SetInParent()  # declared a scalar
    return model
