"""The seed's small named ONNX graphs: losses, their gradients, penalties and updates.

onnxcustom built its training steps from small graphs it looked up by name. Code written
against it calls :func:`function_onnx_graph` with one of those names; each name here is a
function building the graph with :class:`GraphBuilder`, its docstring saying what the graph
computes. ``X1`` is the expected value, ``X2`` the prediction. A ``weight_name`` adds an
optional input of sample weights of shape ``(N,)``: fed, each row's term is multiplied by
its weight; not fed, it defaults to ``[1]``. Every loss sums a per-row term with one
``ReduceSum``, which :func:`unreduced_onnx_loss` removes to expose that term.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import OrtBenchError
from ..graphs.builder import GraphBuilder
from ..graphs.outputs import select_outputs

_FUNCTIONS: dict[str, Callable[..., onnx.ModelProto]] = {}


def _registered(fct: Callable[..., onnx.ModelProto]) -> Callable[..., onnx.ModelProto]:
    _FUNCTIONS[fct.__name__] = fct
    return fct


class _Graph(GraphBuilder):
    """A builder that knows the graph's float type and its optional sample weights."""

    def __init__(self, name: str, opset: int, dtype):
        super().__init__(name, opset=opset)
        self.dtype = np.dtype(dtype)
        self.elem = helper.np_dtype_to_tensor_dtype(self.dtype)

    def tensor(self, name: str, shape: list | None = None) -> str:
        return self.input(name, shape, self.elem)

    def number(self, value: float) -> str:
        return self.const([value], self.dtype)

    def row_weight(self, weight_name: str | None) -> str | None:
        """Sample weights as a column, the input defaulting to ``[1]`` when not fed."""
        if weight_name is None:
            return None
        self.tensor(weight_name, [None])
        self.initializers.append(numpy_helper.from_array(np.ones(1, dtype=self.dtype), weight_name))
        return self.op("Reshape", weight_name, self.const([-1, 1], np.int64))

    def weighted(self, value: str, weight: str | None, name: str | None = None) -> str:
        if weight is None:
            return value if name is None else self.op("Identity", value, name=name)
        return self.op("Mul", value, weight, name=name)

    def total(self, score: str, name: str = "Y") -> str:
        """The sum of every element, a scalar named ``name``, declared as an output."""
        self.op("ReduceSum", score, keepdims=0, name=name)
        self.output(name, [], self.elem)
        return name


@_registered
def square_error(g: _Graph, weight_name: str | None = None) -> None:
    """``Y = sum((X1 - X2)^2 * weight)``."""
    x1, x2 = g.tensor("X1", [None, None]), g.tensor("X2", [None, None])
    diff = g.op("Sub", x1, x2)
    g.total(g.weighted(g.op("Mul", diff, diff), g.row_weight(weight_name)))


@_registered
def grad_square_error(g: _Graph, weight_name: str | None = None) -> None:
    """``Y_grad = -2 (X1 - X2) * weight``, the gradient of ``square_error`` w.r.t. ``X2``."""
    x1, x2 = g.tensor("X1", [None, None]), g.tensor("X2", [None, None])
    grad = g.op("Mul", g.op("Sub", x1, x2), g.number(-2.0))
    g.weighted(grad, g.row_weight(weight_name), name="Y_grad")
    g.output("Y_grad", [None, None], g.elem)


def _loss_and_grad(g: _Graph, score: str, grad: str, weight: str | None) -> None:
    g.total(g.weighted(score, weight))
    g.weighted(grad, weight, name="Y_grad")
    g.output("Y_grad", [None, None], g.elem)


@_registered
def grad_loss_square_error(g: _Graph, weight_name: str | None = None) -> None:
    """``Y = sum((X1 - X2)^2 * weight)`` and ``Y_grad = -2 (X1 - X2) * weight``."""
    x1, x2 = g.tensor("X1", [None, None]), g.tensor("X2", [None, None])
    diff = g.op("Sub", x1, x2)
    grad = g.op("Mul", diff, g.number(-2.0))
    _loss_and_grad(g, g.op("Mul", diff, diff), grad, g.row_weight(weight_name))


@_registered
def grad_loss_absolute_error(g: _Graph, weight_name: str | None = None) -> None:
    """``Y = sum(|X1 - X2| * weight)`` and ``Y_grad = sign(X1 - X2) * weight`` (the seed's
    sign: the gradient w.r.t. ``X1``)."""
    x1, x2 = g.tensor("X1", [None, None]), g.tensor("X2", [None, None])
    diff = g.op("Sub", x1, x2)
    _loss_and_grad(g, g.op("Abs", diff), g.op("Sign", diff), g.row_weight(weight_name))


@_registered
def grad_loss_elastic_error(
    g: _Graph, weight_name: str | None = None, l1_weight: float = 0.5, l2_weight: float = 0.5
) -> None:
    """``Y = sum((l1_weight |X1 - X2| + l2_weight (X1 - X2)^2) * weight)`` and
    ``Y_grad = (l1_weight sign(X1 - X2) - 2 l2_weight (X1 - X2)) * weight``."""
    x1, x2 = g.tensor("X1", [None, None]), g.tensor("X2", [None, None])
    diff = g.op("Sub", x1, x2)
    l1, l2 = g.number(l1_weight), g.number(l2_weight)
    score = g.op(
        "Add",
        g.op("Mul", g.op("Abs", diff), l1),
        g.op("Mul", g.op("Mul", diff, diff), l2),
    )
    grad = g.op(
        "Sub",
        g.op("Mul", g.op("Sign", diff), l1),
        g.op("Mul", diff, g.number(2.0 * l2_weight)),
    )
    _loss_and_grad(g, score, grad, g.row_weight(weight_name))


@_registered
def grad_sigmoid_neg_log_loss_error(
    g: _Graph, weight_name: str | None = None, eps: float = 1e-5
) -> None:
    """Binary log loss of raw scores: ``p = sigmoid(X2)`` clipped to ``[eps, 1 - eps]``,
    ``Y = sum(-((1 - X1) log(1 - p) + X1 log(p)) * weight)`` for integer labels ``X1``,
    and ``Y_grad = (sigmoid(X2) - X1) * weight``."""
    labels = g.input("X1", [None, None], onnx.TensorProto.INT64)
    x2 = g.tensor("X2", [None, None])
    y = g.op("Cast", labels, to=g.elem)
    proba = g.op("Sigmoid", x2)
    clipped = g.op("Clip", proba, g.const(eps, g.dtype), g.const(1 - eps, g.dtype))
    one = g.number(1.0)
    log_neg = g.op("Mul", g.op("Sub", one, y), g.op("Log", g.op("Sub", one, clipped)))
    log_pos = g.op("Mul", y, g.op("Log", clipped))
    score = g.op("Neg", g.op("Add", log_neg, log_pos))
    _loss_and_grad(g, score, g.op("Sub", proba, y), g.row_weight(weight_name))


@_registered
def axpy(g: _Graph) -> None:
    """``Y = alpha X1 + X2``, ``alpha`` a tensor of one element."""
    x1, x2 = g.tensor("X1", [None, None]), g.tensor("X2", [None, None])
    alpha = g.tensor("alpha", [1])
    g.op("Add", g.op("Mul", x1, alpha), x2, name="Y")
    g.output("Y", [None, None], g.elem)


def _momentum(g: _Graph) -> tuple[str, str]:
    x1, x2 = g.tensor("X1", [None, None]), g.tensor("X2", [None, None])
    grad = g.tensor("G", [None, None])
    alpha, beta = g.tensor("alpha", [1]), g.tensor("beta", [1])
    z = g.op("Add", g.op("Mul", x1, alpha), g.op("Mul", grad, beta), name="Z")
    return z, x2


@_registered
def axpyw(g: _Graph) -> None:
    """A momentum step: ``Z = alpha X1 + beta G`` and ``Y = Z + X2``."""
    z, x2 = _momentum(g)
    g.op("Add", z, x2, name="Y")
    g.output("Y", [None, None], g.elem)
    g.output("Z", [None, None], g.elem)


@_registered
def axpyw2(g: _Graph) -> None:
    """A Nesterov step: ``Z = alpha X1 + beta G`` and ``Y = alpha X1 + X2 + beta Z``."""
    z, x2 = _momentum(g)
    x1, beta, alpha = "X1", "beta", "alpha"
    ahead = g.op("Add", g.op("Mul", x1, alpha), g.op("Mul", z, beta))
    g.op("Add", ahead, x2, name="Y")
    g.output("Y", [None, None], g.elem)
    g.output("Z", [None, None], g.elem)


@_registered
def linear_regression(g: _Graph) -> None:
    """``Y = X A + B``."""
    x, a, b = (g.tensor(n, [None, None]) for n in ("X", "A", "B"))
    g.op("Add", g.op("MatMul", x, a), b, name="Y")
    g.output("Y", [None, None], g.elem)


@_registered
def copy(g: _Graph) -> None:
    """``Y = X``."""
    g.op("Identity", g.tensor("X", [None, None]), name="Y")
    g.output("Y", [None, None], g.elem)


@_registered
def zero(g: _Graph) -> None:
    """``Y = 0 X``, zeros of the shape of ``X``."""
    g.op("Mul", g.tensor("X", [None, None]), g.number(0.0), name="Y")
    g.output("Y", [None, None], g.elem)


def _elastic_terms(g: _Graph, x: str, l1: float, l2: float) -> tuple[str, str]:
    """The penalty ``l1 sum|x| + l2 sum x^2`` (a scalar) and its gradient."""
    a, b = g.const(l1, g.dtype), g.const(l2, g.dtype)
    penalty = g.op(
        "Add",
        g.op("Mul", g.op("ReduceSum", g.op("Abs", x), keepdims=0), a),
        g.op("Mul", g.op("ReduceSum", g.op("Mul", x, x), keepdims=0), b),
    )
    grad = g.op("Add", g.op("Mul", g.op("Sign", x), a), g.op("Mul", x, g.const(2 * l2, g.dtype)))
    return penalty, grad


@_registered
def grad_penalty_elastic_error(
    g: _Graph, weight_name: str | None = None, l1_weight: float = 0.5, l2_weight: float = 0.5
) -> None:
    """``Y = l1_weight sum|X| + l2_weight sum X^2`` (a scalar) and
    ``Y_grad = l1_weight sign(X) + 2 l2_weight X``; ``weight_name`` is accepted and unused."""
    penalty, grad = _elastic_terms(g, g.tensor("X", [None, None]), l1_weight, l2_weight)
    g.rename(penalty, "Y")
    g.rename(grad, "Y_grad")
    g.output("Y", [], g.elem)
    g.output("Y_grad", [None, None], g.elem)


@_registered
def n_penalty_elastic_error(
    g: _Graph,
    weight_name: str | None = None,
    n_tensors: int = 1,
    l1_weight: float = 0.5,
    l2_weight: float = 0.5,
) -> None:
    """``Y = loss + sum_k (l1_weight sum|W_k| + l2_weight sum W_k^2)`` for inputs ``loss``
    and ``W0``, ..., ``W<n_tensors - 1>``, flattened to one dimension; ``weight_name`` is
    accepted and unused."""
    if n_tensors < 1:
        raise OrtBenchError(f"n_tensors must be >= 1, got {n_tensors}")
    terms = [g.tensor("loss", [1, 1])]
    for k in range(n_tensors):
        terms.append(_elastic_terms(g, g.tensor(f"W{k}", [None, None]), l1_weight, l2_weight)[0])
    g.op("Reshape", g.add_all(terms), g.const([-1], np.int64), name="Y")
    g.output("Y", [1], g.elem)


@_registered
def update_penalty_elastic_error(g: _Graph, l1: float = 0.5, l2: float = 0.5) -> None:
    """``Y = X - (l1 sign(X) + 2 l2 X)``: weights after one step of the elastic penalty."""
    x = g.tensor("X", [None, None])
    g.op("Sub", x, _elastic_terms(g, x, l1, l2)[1], name="Y")
    g.output("Y", [None, None], g.elem)


def get_supported_functions() -> dict[str, str]:
    """The names :func:`function_onnx_graph` knows, each with what its graph computes.

    Returns
    -------
    dict
        Name to the first line of the building function's docstring.
    """
    return {name: fct.__doc__.strip() for name, fct in _FUNCTIONS.items()}


def function_onnx_graph(
    name: str, target_opset: int | None = None, dtype=np.float32, weight_name=None, **kwargs
) -> onnx.ModelProto:
    """The seed's named small graph ``name`` (see :func:`get_supported_functions`).

    Parameters
    ----------
    name : str
        One of the names of :func:`get_supported_functions`.
    target_opset : int, optional
        The opset of the graph, the runtime's highest by default.
    dtype : numpy dtype
        The float type of the graph's inputs and outputs.
    weight_name : str, optional
        The name of an optional input of sample weights, for the losses.
    **kwargs
        The graph's own parameters (``l1_weight``, ``l2_weight``, ``eps``, ``n_tensors``,
        ``l1``, ``l2``), as its builder declares them.

    Returns
    -------
    onnx.ModelProto

    Raises
    ------
    OrtBenchError
        For an unknown name or a parameter the graph does not take.
    """
    if name not in _FUNCTIONS:
        raise OrtBenchError(f"unknown function {name!r}: choose one of {sorted(_FUNCTIONS)}")
    fct = _FUNCTIONS[name]
    g = _Graph(name, target_opset or GraphBuilder(name).opset, dtype)
    if weight_name is not None:
        kwargs["weight_name"] = weight_name
    try:
        fct(g, **kwargs)
    except TypeError:
        raise OrtBenchError(
            f"function {name!r} does not take {sorted(kwargs)}: see its builder's parameters"
        ) from None
    return g.to_model()


def unreduced_onnx_loss(onx: onnx.ModelProto, output_name: str = "score") -> onnx.ModelProto:
    """The per-row term of a loss graph whose first output is the ``ReduceSum`` of it.

    Parameters
    ----------
    onx : onnx.ModelProto
        A loss of :func:`function_onnx_graph` (``square_error`` or a ``grad_loss_*``).
    output_name : str
        The name of the only output of the returned graph.

    Returns
    -------
    onnx.ModelProto
        A graph whose output ``output_name`` holds one value per row; their sum is the loss.
    """
    loss = onx.graph.output[0].name
    reduce = [n for n in onx.graph.node if loss in n.output]
    if len(reduce) != 1 or reduce[0].op_type != "ReduceSum":
        raise OrtBenchError(f"output {loss!r} is not the ReduceSum of a per-row term")
    model = onnx.ModelProto()
    model.CopyFrom(onx)
    del model.graph.node[list(onx.graph.node).index(reduce[0])]
    model.graph.node.append(helper.make_node("Identity", [reduce[0].input[0]], [output_name]))
    model.graph.output.append(
        helper.make_tensor_value_info(
            output_name, onx.graph.output[0].type.tensor_type.elem_type, [None, 1]
        )
    )
    return select_outputs(model, [output_name])
