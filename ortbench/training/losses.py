"""Losses and their gradients as small ONNX graphs, with scikit-learn's conventions.

A loss is a sum over a sample's outputs of an element-wise term, averaged over the batch
(or weighted by sample weights: sum(w * l) / sum(w)). ``SquareLearningLoss`` is
0.5 * (p - y)^2 per element, which is MLPRegressor's loss; its gradient with respect to
the predictions is (p - y) / n, the output delta scikit-learn back-propagates.
The same node functions build the loss appended by :func:`add_loss_output` (full
training, where onnxruntime differentiates it) and the loss-and-gradient graph of the
forward/backward trainer (where the gradient is written explicitly).
"""

from __future__ import annotations

import numpy as np
import onnx
from sklearn.base import BaseEstimator

from .errors import OrtBenchError
from .graph_builder import GraphBuilder

#: Probabilities are clipped to [EPS, 1 - EPS] before the log, as scikit-learn does.
EPS = float(np.finfo(np.float32).eps)


class BaseLearningLoss(BaseEstimator):
    """A loss defined by an element-wise term and its derivative."""

    #: True for losses over class probabilities: the trainer one-hot encodes labels.
    is_classification = False

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

    def build_onnx_function(self) -> onnx.ModelProto:
        """The loss-and-gradient graph of the forward/backward trainer.

        Inputs: ``expected`` (n, c), ``predicted`` (n, c), ``loss_scale`` (n, 1), each
        row's share of the batch loss (w / sum(w), or 1 / n), and ``grad_scale`` (n, 1),
        what multiplies each row's derivative. Both are per-batch data the loader computes
        once per epoch (see :class:`ortbench.training.data.BatchLoader`): the trainer sets
        ``grad_scale`` to the loss scale times the optimizer's step factor, so the
        backward pass yields the weight step itself. Outputs: ``loss`` (scalar) and
        ``loss_grad`` (n, c), the scaled gradient of the loss wrt ``predicted``.

        Returns
        -------
        onnx.ModelProto
            The graph, at the opset onnxruntime 1.19.2 reads.
        """
        b = GraphBuilder(type(self).__name__)
        expected = b.input("expected", ["N", "C"])
        predicted = b.input("predicted", ["N", "C"])
        loss_scale = b.input("loss_scale", ["N", 1])
        grad_scale = b.input("grad_scale", ["N", 1])
        element, factor, derivative = self.element_nodes(b, expected, predicted)
        weighted = b.op("Gemm", element, loss_scale, transA=1, alpha=factor)
        b.op("ReduceSum", weighted, keepdims=0, name="loss")
        b.op("Mul", derivative, grad_scale, name="loss_grad")
        b.output("loss", [])
        b.output("loss_grad", ["N", "C"])
        return b.to_model()


def weight_shares_nodes(b: GraphBuilder, weight: str) -> str:
    """Add the nodes of each row's share of the batch loss, w / sum(w), as an (n, 1) column."""
    column = b.op("Unsqueeze", weight, b.const([1], np.int64))
    return b.op("Div", column, b.op("ReduceSum", weight, keepdims=1))


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
        n = b.op("Cast", b.op("Shape", predicted, start=0, end=1), to=onnx.TensorProto.FLOAT)
        total = b.op("Mul", element, b.op("Div", b.const(factor), n))
    else:
        total = b.op("Gemm", element, shares, transA=1, alpha=factor)
    return b.op("ReduceSum", total, keepdims=0)


class SquareLearningLoss(BaseLearningLoss):
    """0.5 * (p - y)^2 per element: scikit-learn's squared error."""

    def element_nodes(self, b, expected, predicted):
        diff = b.op("Sub", predicted, expected)
        return b.op("Mul", diff, diff), 0.5, diff


class AbsoluteLearningLoss(BaseLearningLoss):
    """|p - y| per element."""

    def element_nodes(self, b, expected, predicted):
        diff = b.op("Sub", predicted, expected)
        return b.op("Abs", diff), 1.0, b.op("Sign", diff)


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

    def element_nodes(self, b, expected, predicted):
        diff = b.op("Sub", predicted, expected)
        l1 = b.op("Mul", b.op("Abs", diff), b.const(self.l1_weight))
        l2 = b.op("Mul", b.op("Mul", diff, diff), b.const(self.l2_weight))
        g1 = b.op("Mul", b.op("Sign", diff), b.const(self.l1_weight))
        g2 = b.op("Mul", diff, b.const(2 * self.l2_weight))
        return b.op("Add", l1, l2), 1.0, b.op("Add", g1, g2)


class NegLogLearningLoss(BaseLearningLoss):
    """-y * log(p) per element over one-hot labels and class probabilities (log loss)."""

    is_classification = True

    def element_nodes(self, b, expected, predicted):
        clipped = b.op("Clip", predicted, b.const(EPS), b.const(1 - EPS))
        loss = b.op("Mul", expected, b.op("Log", clipped))
        return loss, -1.0, b.op("Neg", b.op("Div", expected, clipped))

    def element_loss_nodes(self, b, expected, predicted):
        # onnxruntime-training has no gradient for Clip's bounds path: clip by Max/Min
        # would also work, but adding EPS keeps the graph differentiable everywhere.
        shifted = b.op("Add", predicted, b.const(EPS))
        return b.op("Mul", expected, b.op("Log", shifted)), -1.0


LOSSES = {
    "squared_error": SquareLearningLoss,
    "absolute_error": AbsoluteLearningLoss,
    "elastic": ElasticLearningLoss,
    "log": NegLogLearningLoss,
}


def loss_from_name(score_name: str, l1_weight: float = 0.5, l2_weight: float = 0.5):
    """The loss object for one of :data:`LOSSES`' names.

    Parameters
    ----------
    score_name : str
        A key of :data:`LOSSES`.
    l1_weight, l2_weight : float, default=0.5
        The weights of the ``'elastic'`` loss's terms.

    Returns
    -------
    BaseLearningLoss
        The loss.

    Raises
    ------
    OrtBenchError
        For an unknown name.
    """
    if score_name not in LOSSES:
        raise OrtBenchError(f"unknown loss {score_name!r}: expected one of {sorted(LOSSES)}")
    if score_name == "elastic":
        return ElasticLearningLoss(l1_weight, l2_weight)
    return LOSSES[score_name]()
