"""The one exception ortbench raises for a user's mistake."""

from sklearn.exceptions import NotFittedError


class OrtBenchError(ValueError):
    """A bad input or a failed run, explained in one line.

    Subclasses ValueError so scikit-learn's tooling (GridSearchCV's error_score,
    check_estimator) treats it as the estimator's own validation error.
    """


class ConvergenceError(OrtBenchError):
    """Training diverged: the loss of an epoch is NaN or infinite.

    The trainer's weights are those from before that epoch.
    """


class NotFittedTrainerError(OrtBenchError, NotFittedError):
    """A trainer used before its first fit: an :class:`OrtBenchError` that scikit-learn's
    tooling recognises as its own ``NotFittedError``, hence also an ``AttributeError``
    (the fitted attributes do not exist yet), as the seed raised it."""


class NoGradientError(OrtBenchError):
    """A gradient backend has no gradient for one node of the model.

    ``op_type`` and ``node`` name it; ``reason`` is the short form a bench row shows.
    """

    def __init__(self, message: str, op_type: str, node: str):
        super().__init__(message)
        self.op_type = op_type
        self.node = node

    @property
    def reason(self) -> str:
        return f"no gradient for {self.op_type} (node {self.node!r})"


class ArgumentTypeError(OrtBenchError, TypeError):
    """An argument of the wrong type where the seed's API raised ``TypeError``."""


class NotSupportedError(OrtBenchError, NotImplementedError):
    """A combination the seed's API refused with ``NotImplementedError``."""
