"""Losses and their gradients as small ONNX graphs, with scikit-learn's conventions.

A loss is a sum over a sample's outputs of an element-wise term, averaged over the batch
(or weighted by sample weights: sum(w * l) / sum(w)). ``SquareLearningLoss`` is
0.5 * (p - y)^2 per element, which is MLPRegressor's loss; its gradient with respect to
the predictions is (p - y) / n, the output delta scikit-learn back-propagates.
The same node functions build the loss appended by :func:`add_loss_output` (full
training, where onnxruntime differentiates it) and the loss-and-gradient graph of the
forward/backward trainer (where the gradient is written explicitly).

The seed (onnxcustom) wrote the squared error without the half: (p - y)^2, gradient
2 (p - y). ``SquareLearningLoss(convention='seed')`` is that loss; scikit-learn's stays
the default, so the choice is always visible in the object's repr.
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx
from scipy import special
from sklearn.base import BaseEstimator

from .errors import OrtBenchError
from .graphs.builder import GraphBuilder
from .graphs.nodes import drop_unread

#: Probabilities are clipped to [EPS, 1 - EPS] before the log, as scikit-learn does.
EPS = float(np.finfo(np.float32).eps)


#: The two ways to write the squared error: scikit-learn's half and the seed's whole.
CONVENTIONS = ("sklearn", "seed")


class BaseLearningLoss(BaseEstimator):
    """A loss defined by an element-wise term and its derivative."""

    #: True for losses over class probabilities: the trainer one-hot encodes labels.
    is_classification = False

    @classmethod
    def select(cls, loss=None, **kwargs) -> BaseLearningLoss:
        """The loss object a trainer's ``learning_loss`` parameter names.

        Parameters
        ----------
        loss : BaseLearningLoss, str or None
            An object (returned as it is), None (:class:`SquareLearningLoss`), or a name:
            ``'square_error'``, ``'squared_error'``, ``'square'`` or ``'l2'``;
            ``'absolute_error'``, ``'absolute'`` or ``'l1'``; ``'elastic'`` or
            ``'elastic_error'``; ``'log'`` or ``'neg_log'``; or a class name.
        **kwargs
            Parameters of the class a name selects (``l1_weight``, ``convention``...).

        Returns
        -------
        BaseLearningLoss

        Raises
        ------
        OrtBenchError
            For an unknown name, or parameters the class does not take.
        """
        return select_named(loss, BaseLearningLoss, LOSS_NAMES, SquareLearningLoss, kwargs)

    def check(self) -> None:
        """Raise a one-line error for invalid hyper-parameters (none here)."""

    def derivative_slope(self) -> float | None:
        """``k`` where the derivative of the term :meth:`element_nodes` returns is
        ``k * (predicted - expected)``, a linear function of both; None for a loss whose
        derivative is not (the default)."""
        return None

    def scaled_gradient_node(
        self, b: GraphBuilder, grad_scale: str, predicted: str, scaled_expected: str, **name
    ) -> str:
        """Add the gradient of a one-row batch, ``k (grad_scale p - scaled_expected)`` for
        a loss of :meth:`derivative_slope` ``k``, as one ``Gemm`` of the (1, 1) scale by
        the (1, c) prediction (``scaled_expected`` is the labels times the scale); return
        its name (``name=`` chooses it)."""
        slope = self.derivative_slope()
        return b.op(
            "Gemm", grad_scale, predicted, scaled_expected, alpha=slope, beta=-slope, **name
        )

    def element_nodes(
        self, b: GraphBuilder, expected: str, predicted: str
    ) -> tuple[str, float, str]:
        """Add nodes for the element-wise loss term and its derivative wrt ``predicted``.

        Return the term up to a constant factor, that factor, and the derivative of the
        whole term: the batch reduction applies the factor (a Gemm's alpha), one node
        fewer to run and, in full training, to differentiate.
        """
        raise NotImplementedError

    def element_loss_nodes(
        self, b: GraphBuilder, expected: str, predicted: str
    ) -> tuple[str, float]:
        """Add nodes for the element-wise loss term only (what full training differentiates),
        as :meth:`element_nodes` returns it: the term up to a factor, and the factor."""
        return self.element_nodes(b, expected, predicted)[:2]

    def build_onnx_function(
        self, columns: int | None = None, gradient_only: bool = False, scaled: bool = False
    ) -> onnx.ModelProto:
        """The loss-and-gradient graph of the forward/backward trainer.

        Inputs: ``expected`` (n, c), ``predicted`` (n, c), ``loss_scale`` (n, 1), each
        row's share of the batch loss (w / sum(w), or 1 / n), and ``grad_scale`` (n, 1),
        what multiplies each row's derivative. Both are per-batch data the loader computes
        once per epoch (see :class:`ortbench.training.steps.batches.BatchLoader`): the trainer sets
        ``grad_scale`` to the loss scale times the optimizer's step factor, so the
        backward pass yields the weight step itself. Outputs: ``loss`` and ``loss_grad``
        (n, c), the scaled gradient of the loss wrt ``predicted``.

        Parameters
        ----------
        columns : int, optional
            The prediction's width c, when the caller knows it: the loss is then shaped
            (1, 1), and for one column it is the weighting Gemm's own output (one node
            fewer). None: a scalar loss, for any width.
        gradient_only : bool, default=False
            Leave out the loss (and ``loss_scale``): the graph outputs ``loss_grad`` only,
            for a trainer that computes the losses once per epoch
            (:meth:`build_epoch_function`).
        scaled : bool, default=False
            With ``gradient_only``, for one-row batches and a loss whose gradient is
            ``k (p - y)`` (:meth:`derivative_slope`): the graph reads ``scaled_expected``
            (1, c), the labels times ``grad_scale``, instead of ``expected``, and the
            gradient is one ``Gemm``, ``k (grad_scale p - scaled_expected)``.

        Returns
        -------
        onnx.ModelProto
            The graph, at the opset onnxruntime 1.19.2 reads.
        """
        b = GraphBuilder(type(self).__name__)
        if scaled:
            if not gradient_only or self.derivative_slope() is None:
                raise OrtBenchError(
                    "a loss graph reads scaled labels only for the gradient of a loss "
                    "linear in the prediction"
                )
            predicted = b.input("predicted", [1, "C"])
            grad_scale = b.input("grad_scale", [1, 1])
            scaled_expected = b.input("scaled_expected", [1, "C"])
            self.scaled_gradient_node(b, grad_scale, predicted, scaled_expected, name="loss_grad")
            b.output("loss_grad", [1, "C"])
            return b.to_model()
        expected = b.input("expected", ["N", "C"])
        predicted = b.input("predicted", ["N", "C"])
        if not gradient_only:
            loss_scale = b.input("loss_scale", ["N", 1])
        grad_scale = b.input("grad_scale", ["N", 1])
        element, factor, derivative = self.element_nodes(b, expected, predicted)
        if not gradient_only:
            matrix = columns is not None
            weighted_sum_nodes(b, element, factor, loss_scale, "loss", matrix, columns)
            b.output("loss", [] if columns is None else [1, 1])
        b.op("Mul", derivative, grad_scale, name="loss_grad")
        b.output("loss_grad", ["N", "C"])
        model = b.to_model()
        drop_unread(model.graph)  # without the loss, its element term
        return model

    def build_epoch_function(self) -> onnx.ModelProto:
        """The graph of every batch's loss of an epoch at once, from the predictions the
        steps kept (see :func:`batch_losses_nodes`).

        Inputs: ``expected`` and ``predicted`` (k, n, c), the k batches of n rows stacked,
        and ``loss_scale`` (k, n, 1). Output: ``losses`` (k, 1, 1), each batch's loss as
        :meth:`build_onnx_function` computes it.
        """
        b = GraphBuilder(f"{type(self).__name__}_epoch")
        expected = b.input("expected", ["K", "N", "C"])
        predicted = b.input("predicted", ["K", "N", "C"])
        loss_scale = b.input("loss_scale", ["K", "N", 1])
        batch_losses_nodes(self, b, expected, predicted, loss_scale, "losses")
        b.output("losses", ["K", 1, 1])
        model = b.to_model()
        drop_unread(model.graph)  # the derivative element_nodes writes too
        return model

    def build_samples_function(self) -> onnx.ModelProto:
        """The graph of each sample's loss, what :meth:`BaseTrainer.losses` runs.

        Inputs: ``expected`` (n, c) and ``predicted`` (n, c). Output: ``losses`` (n,),
        each row's loss term summed over its outputs (no mean, no penalty).
        """
        b = GraphBuilder(f"{type(self).__name__}_samples")
        expected = b.input("expected", ["N", "C"])
        predicted = b.input("predicted", ["N", "C"])
        element, factor = self.element_loss_nodes(b, expected, predicted)
        rows = b.op("ReduceSum", element, b.const([1], np.int64), keepdims=0)
        b.op("Mul", rows, b.const(factor), name="losses")
        b.output("losses", ["N"])
        return b.to_model()

    def numpy_rows(self, predicted: np.ndarray, expected: np.ndarray) -> np.ndarray:
        """Each row's loss computed by numpy: the reference the ONNX graphs are held to
        (the bench's loss curves and scores use it too).

        Parameters
        ----------
        predicted, expected : ndarray of shape (n, c)
            What the model gave and what it should give (one-hot labels for a
            classification loss).

        Returns
        -------
        ndarray of shape (n,)
            The loss term summed over each row's outputs.
        """
        return self._difference_rows(predicted - expected)

    def torch_rows(self, predicted, expected):
        """Each row's loss as torch computes and differentiates it (the torch contenders'
        loss): :meth:`numpy_rows` for tensors of shape (n, c), a tensor of shape (n,)."""
        return self._difference_rows(predicted - expected)

    def jax_rows(self, predicted, expected):
        """Each row's loss as JAX computes and differentiates it (the JAX contenders' loss
        on graphs scikit-learn cannot express): :meth:`numpy_rows` for ``jax.numpy``
        arrays of shape (n, c), an array of shape (n,)."""
        return self._difference_rows(predicted - expected)

    def _difference_rows(self, diff):
        """The loss of each row from ``predicted - expected``, written with the operators
        that numpy arrays and torch tensors share (losses of the difference only)."""
        raise NotImplementedError


def weight_shares_nodes(b: GraphBuilder, weight: str) -> str:
    """Add the nodes of each row's share of the batch loss, w / sum(w), as an (n, 1) column."""
    column = b.op("Unsqueeze", weight, b.const([1], np.int64))
    return b.op("Div", column, b.op("ReduceSum", weight, keepdims=1))


def weighted_sum_nodes(
    b: GraphBuilder,
    element: str,
    factor: float,
    shares: str,
    name: str | None = None,
    matrix: bool = False,
    columns: int | None = None,
) -> str:
    """Add ``factor * sum_ic s_i element_ic`` and return its name: one Gemm weighs and sums
    the rows of the (n, c) ``element`` by the (n, 1) ``shares`` column (a (c, 1) tensor),
    a ReduceSum its outputs.

    The result is a scalar, or with ``matrix`` a (1, 1) tensor; then, for ``columns`` (c)
    equal to 1, it is the Gemm's own output, one node fewer.
    """
    alone = matrix and columns == 1
    rows = b.op("Gemm", element, shares, transA=1, alpha=factor, name=name if alone else None)
    return rows if alone else b.op("ReduceSum", rows, keepdims=int(matrix), name=name)


def batch_losses_nodes(
    loss: BaseLearningLoss,
    b: GraphBuilder,
    expected: str,
    predicted: str,
    shares: str,
    name: str,
) -> str:
    """Add the loss of each of k stacked batches and return its name.

    ``expected`` and ``predicted`` are (k, n, c), ``shares`` (k, n, 1), each row's share of
    its batch's loss; the result is (k, 1, 1): ``factor * sum_ic s_i element_ic`` for each
    batch, the loss :func:`weighted_sum_nodes` gives for one batch. The element term is
    the one :meth:`BaseLearningLoss.element_nodes` writes (its derivative is left unread).
    """
    element, factor = loss.element_nodes(b, expected, predicted)[:2]
    weighted = b.op("Mul", element, shares)
    summed = b.op("ReduceSum", weighted, b.const([1, 2], np.int64), keepdims=1)
    return b.op("Mul", summed, b.const(factor), name=name)


def reduced_loss_nodes(
    loss: BaseLearningLoss,
    b: GraphBuilder,
    expected: str,
    predicted: str,
    shares: str | None,
) -> str:
    """Add the nodes of the batch loss (a scalar) and return its name.

    ``shares`` is an (n, 1) column of each row's share of the loss (w / sum(w)); one Gemm
    then weights and sums the rows (sum_i s_i l_ic for each output c), cheaper to run and
    to differentiate than a Mul and a ReduceSum over the whole batch. None averages over
    the rows.
    """
    element, factor = loss.element_loss_nodes(b, expected, predicted)
    if shares is None:
        # Slice, not Shape's start/end (opset 15): the seed's models are opset 14
        rows = b.op(
            "Slice", b.op("Shape", predicted), b.const([0], np.int64), b.const([1], np.int64)
        )
        n = b.op("Cast", rows, to=onnx.TensorProto.FLOAT)
        return b.op("ReduceSum", b.op("Mul", element, b.op("Div", b.const(factor), n)), keepdims=0)
    return weighted_sum_nodes(b, element, factor, shares)


class SquareLearningLoss(BaseLearningLoss):
    """Squared error per element.

    Parameters
    ----------
    convention : {'sklearn', 'seed'}
        ``'sklearn'``: 0.5 * (p - y)^2, gradient p - y (MLPRegressor's loss);
        ``'seed'``: (p - y)^2, gradient 2 (p - y) (onnxcustom's loss).
    """

    def __init__(self, convention: str = "sklearn"):
        self.convention = convention

    def check(self) -> None:
        if self.convention not in CONVENTIONS:
            raise OrtBenchError(f"convention must be one of {CONVENTIONS}, got {self.convention!r}")

    def element_nodes(self, b, expected, predicted):
        self.check()
        diff = b.op("Sub", predicted, expected)
        if self.convention == "seed":
            return b.op("Mul", diff, diff), 1.0, b.op("Add", diff, diff)
        return b.op("Mul", diff, diff), 0.5, diff

    def derivative_slope(self) -> float:
        self.check()
        return 2.0 if self.convention == "seed" else 1.0

    def _difference_rows(self, diff):
        self.check()
        return (diff * diff).sum(axis=1) * (1.0 if self.convention == "seed" else 0.5)


class AbsoluteLearningLoss(BaseLearningLoss):
    """|p - y| per element."""

    def element_nodes(self, b, expected, predicted):
        diff = b.op("Sub", predicted, expected)
        return b.op("Abs", diff), 1.0, b.op("Sign", diff)

    def _difference_rows(self, diff):
        return abs(diff).sum(axis=1)


class ElasticLearningLoss(BaseLearningLoss):
    """l1_weight * |p - y| + l2_weight * (p - y)^2 per element.

    Parameters
    ----------
    l1_weight, l2_weight : float, default=0.5
        The weights of the two terms.
    """

    def __init__(self, l1_weight: float = 0.5, l2_weight: float = 0.5):
        self.l1_weight = l1_weight
        self.l2_weight = l2_weight

    def check(self) -> None:
        """Raise a one-line error for a negative or non-finite weight."""
        for name in ("l1_weight", "l2_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.number)) or not 0 <= value < np.inf:
                raise OrtBenchError(f"{name} must be a finite number >= 0, got {value!r}")

    def element_nodes(self, b, expected, predicted):
        diff = b.op("Sub", predicted, expected)
        l1 = b.op("Mul", b.op("Abs", diff), b.const(self.l1_weight))
        l2 = b.op("Mul", b.op("Mul", diff, diff), b.const(self.l2_weight))
        g1 = b.op("Mul", b.op("Sign", diff), b.const(self.l1_weight))
        g2 = b.op("Mul", diff, b.const(2 * self.l2_weight))
        return b.op("Add", l1, l2), 1.0, b.op("Add", g1, g2)

    def _difference_rows(self, diff):
        self.check()
        return (self.l1_weight * abs(diff) + self.l2_weight * diff * diff).sum(axis=1)


class NegLogLearningLoss(BaseLearningLoss):
    """The log loss over one-hot labels: -sum_c y_c * log(p_c) per sample.

    Parameters
    ----------
    probability_function : {None, 'sigmoid', 'softmax'}, default=None
        What turns the trained output into probabilities. None: the output already holds
        probabilities, clipped to ``[eps, 1 - eps]`` before the log. ``'sigmoid'``: the
        output holds raw scores, each column a binary (one-vs-rest) problem; the term is
        ``softplus(s) - y * s`` written as ``relu(s) - y * s + log(1 + exp(-|s|))``,
        finite for any finite score. ``'softmax'``: the output holds raw scores of
        exclusive classes; the term is ``-y * log_softmax(s)``. Both stable forms are what
        the trainers use for classifier graphs whose probabilities come from a sigmoid or a
        softmax, so that large scores cannot overflow an ``Exp``.
    eps : float, default=float32 machine epsilon
        The clipping bound of the probabilities (``probability_function=None`` only).
    """

    is_classification = True

    def __init__(self, probability_function: str | None = None, eps: float = EPS):
        self.probability_function = probability_function
        self.eps = eps

    def check(self) -> None:
        """Raise a one-line error for invalid hyper-parameters."""
        if self.probability_function not in PROBABILITY_FUNCTIONS:
            raise OrtBenchError(
                f"probability_function must be one of {PROBABILITY_FUNCTIONS}, "
                f"got {self.probability_function!r}"
            )
        if not 0 < self.eps < 0.5:
            raise OrtBenchError(f"eps must be in (0, 0.5), got {self.eps!r}")

    def element_nodes(self, b, expected, predicted):
        self.check()
        if self.probability_function == "sigmoid":
            loss = self._softplus_minus_ys(b, expected, predicted)
            return loss, 1.0, b.op("Sub", b.op("Sigmoid", predicted), expected)
        if self.probability_function == "softmax":
            log_p = b.op("LogSoftmax", predicted, axis=-1)
            loss = b.op("Mul", expected, log_p)
            return loss, -1.0, b.op("Sub", b.op("Softmax", predicted, axis=-1), expected)
        clipped = b.op("Clip", predicted, b.const(self.eps), b.const(1 - self.eps))
        loss = b.op("Mul", expected, b.op("Log", clipped))
        return loss, -1.0, b.op("Neg", b.op("Div", expected, clipped))

    def element_loss_nodes(self, b, expected, predicted):
        if self.probability_function is not None:
            return self.element_nodes(b, expected, predicted)[:2]
        self.check()
        # onnxruntime-training has no gradient for Clip's bounds path: clip by Max/Min
        # would also work, but adding eps keeps the graph differentiable everywhere.
        shifted = b.op("Add", predicted, b.const(self.eps))
        return b.op("Mul", expected, b.op("Log", shifted)), -1.0

    def numpy_rows(self, predicted: np.ndarray, expected: np.ndarray) -> np.ndarray:
        self.check()
        if self.probability_function == "sigmoid":
            tail = np.log1p(np.exp(-np.abs(predicted)))
            return (np.maximum(predicted, 0) - expected * predicted + tail).sum(axis=1)
        if self.probability_function == "softmax":
            return -(expected * special.log_softmax(predicted, axis=1)).sum(axis=1)
        return -(expected * np.log(np.clip(predicted, self.eps, 1 - self.eps))).sum(axis=1)

    def torch_rows(self, predicted, expected):
        self.check()
        if self.probability_function == "sigmoid":
            tail = (-predicted.abs()).exp().log1p()
            return (predicted.relu() - expected * predicted + tail).sum(axis=1)
        if self.probability_function == "softmax":
            return -(expected * predicted.log_softmax(dim=1)).sum(axis=1)
        return -(expected * predicted.clamp(self.eps, 1 - self.eps).log()).sum(axis=1)

    def jax_rows(self, predicted, expected):
        self.check()
        jax = importlib.import_module("jax")
        if self.probability_function == "sigmoid":
            tail = jax.numpy.log1p(jax.numpy.exp(-abs(predicted)))
            return (jax.nn.relu(predicted) - expected * predicted + tail).sum(axis=1)
        if self.probability_function == "softmax":
            return -(expected * jax.nn.log_softmax(predicted, axis=1)).sum(axis=1)
        clipped = jax.numpy.clip(predicted, self.eps, 1 - self.eps)
        return -(expected * jax.numpy.log(clipped)).sum(axis=1)

    @staticmethod
    def _softplus_minus_ys(b: GraphBuilder, expected: str, scores: str) -> str:
        """``relu(s) - y * s + log(1 + exp(-|s|))``: -log(sigmoid(s)) for y = 1 and
        -log(1 - sigmoid(s)) for y = 0, with no exponential of a positive number."""
        tail = b.op("Log", b.op("Add", b.op("Exp", b.op("Neg", b.op("Abs", scores))), b.const(1)))
        return b.op("Add", b.op("Sub", b.op("Relu", scores), b.op("Mul", expected, scores)), tail)


#: What :class:`NegLogLearningLoss` accepts as ``probability_function``.
PROBABILITY_FUNCTIONS = (None, "sigmoid", "softmax")


LOSSES = {
    "squared_error": SquareLearningLoss,
    "absolute_error": AbsoluteLearningLoss,
    "elastic": ElasticLearningLoss,
    "log": NegLogLearningLoss,
}

#: Every name :meth:`BaseLearningLoss.select` knows: ortbench's, the seed's and the
#: seed's ``add_loss_output`` shorthands.
LOSS_NAMES = {
    SquareLearningLoss: ("squared_error", "square_error", "square", "l2"),
    AbsoluteLearningLoss: ("absolute_error", "absolute", "l1"),
    ElasticLearningLoss: ("elastic", "elastic_error"),
    NegLogLearningLoss: ("log", "neg_log"),
}


def loss_from_name(score_name, l1_weight: float = 0.5, l2_weight: float = 0.5):
    """The loss object for one of :data:`LOSSES`' names (a loss object is checked and kept).

    Parameters
    ----------
    score_name : str or BaseLearningLoss
        A key of :data:`LOSSES`, or a loss.
    l1_weight, l2_weight : float, default=0.5
        The weights of the ``'elastic'`` loss's terms.

    Returns
    -------
    BaseLearningLoss
        The loss.

    Raises
    ------
    OrtBenchError
        For an unknown name, or a loss whose hyper-parameters are invalid.
    """
    if isinstance(score_name, BaseLearningLoss):
        score_name.check()
        return score_name
    if not isinstance(score_name, str) or score_name not in LOSSES:
        raise OrtBenchError(
            f"unknown loss {score_name!r}: expected one of {sorted(LOSSES)} or a "
            f"BaseLearningLoss object"
        )
    loss = (
        ElasticLearningLoss(l1_weight, l2_weight)
        if score_name == "elastic"
        else LOSSES[score_name]()
    )
    loss.check()
    return loss


def select_named(name, base: type, names: dict, default, kwargs: dict):
    """``name`` itself when it is an instance of ``base``; else the instance of the class
    ``name`` designates in ``names`` (a class name also works), ``default`` for None."""
    if isinstance(name, base):
        return name
    what = base.__name__.removeprefix("BaseLearning").lower()  # loss, penalty
    klass = default if name is None else None
    for candidate, aliases in names.items():
        if name in aliases or name == candidate.__name__:
            klass = candidate
    if klass is None:
        known = sorted({a for aliases in names.values() for a in aliases})
        raise OrtBenchError(f"unknown {what} {name!r}: expected an object or one of {known}")
    try:
        return klass(**kwargs)
    except TypeError:
        raise OrtBenchError(f"{klass.__name__} takes no parameter among {sorted(kwargs)}") from None
