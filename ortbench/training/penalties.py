"""Weight penalties (regularisation) and their gradients as ONNX nodes.

A penalty applies to coefficients, never to biases (weights only ever added), as
scikit-learn's MLP does. Its nodes are fused into the update graph of the
forward/backward trainer, so a penalty costs no extra onnxruntime run per step.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

from .errors import OrtBenchError
from .graphs.builder import GraphBuilder
from .losses import select_named


class BaseLearningPenalty(BaseEstimator):
    """A penalty on weights: its value and its gradient."""

    @classmethod
    def select(cls, penalty=None, **kwargs) -> BaseLearningPenalty:
        """The penalty object a trainer's ``learning_penalty`` parameter names.

        Parameters
        ----------
        penalty : BaseLearningPenalty, str or None
            An object (returned as it is), None or ``''`` (:class:`NoLearningPenalty`),
            ``'elastic'`` or ``'l1l2'`` (:class:`ElasticLearningPenalty`), or a class name.
        **kwargs
            Parameters of the class a name selects (``l1``, ``l2``).

        Returns
        -------
        BaseLearningPenalty

        Raises
        ------
        OrtBenchError
            For an unknown name, or parameters the class does not take.
        """
        return select_named(penalty, BaseLearningPenalty, PENALTY_NAMES, NoLearningPenalty, kwargs)

    def is_active(self) -> bool:
        """False when the penalty adds nothing (no node is emitted then)."""
        return True

    def check(self) -> None:
        """Raise a one-line error for invalid hyper-parameters (none here)."""

    def penalty_nodes(self, b: GraphBuilder, weight: str) -> str:
        """Add nodes computing the penalty of one weight; return the scalar's name."""
        raise NotImplementedError

    def gradient_nodes(self, b: GraphBuilder, weight: str) -> str:
        """Add nodes computing the penalty's gradient wrt ``weight``; return its name."""
        raise NotImplementedError


class NoLearningPenalty(BaseLearningPenalty):
    """No regularisation."""

    def is_active(self) -> bool:
        return False

    def penalty_nodes(self, b, weight):
        raise AssertionError("NoLearningPenalty emits no node")

    def gradient_nodes(self, b, weight):
        raise AssertionError("NoLearningPenalty emits no node")


class ElasticLearningPenalty(BaseLearningPenalty):
    """l1 * sum|W| + l2 * sum(W^2); gradient l1 * sign(W) + 2 * l2 * W.

    Parameters
    ----------
    l1, l2 : float, default=0.5
        The weights of the two terms (both 0: no penalty, no node).
    """

    def __init__(self, l1: float = 0.5, l2: float = 0.5):
        self.l1 = l1
        self.l2 = l2

    def check(self) -> None:
        """Raise a one-line error for a negative or non-finite coefficient."""
        for name in ("l1", "l2"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.number)) or not 0 <= value < np.inf:
                raise OrtBenchError(f"penalty {name} must be a finite number >= 0, got {value!r}")

    def is_active(self) -> bool:
        return self.l1 != 0 or self.l2 != 0

    def penalty_nodes(self, b, weight):
        l1 = b.op("Mul", b.op("ReduceSum", b.op("Abs", weight), keepdims=0), b.const(self.l1))
        l2 = b.op(
            "Mul", b.op("ReduceSum", b.op("Mul", weight, weight), keepdims=0), b.const(self.l2)
        )
        return b.op("Add", l1, l2)

    def gradient_nodes(self, b, weight):
        g1 = b.op("Mul", b.op("Sign", weight), b.const(self.l1))
        g2 = b.op("Mul", weight, b.const(2 * self.l2))
        return b.op("Add", g1, g2)


#: The names :meth:`BaseLearningPenalty.select` knows (the seed's).
PENALTY_NAMES = {
    NoLearningPenalty: ("",),
    ElasticLearningPenalty: ("elastic", "l1l2"),
}
