"""The one exception ortbench raises for a user's mistake."""

from sklearn.exceptions import NotFittedError


class OrtBenchError(ValueError):
    """A bad input or a failed run, explained in one line.

    Subclasses ValueError so scikit-learn's tooling (GridSearchCV's error_score,
    check_estimator) treats it as the estimator's own validation error.
    """


class NotFittedTrainerError(OrtBenchError, NotFittedError):
    """A trainer used before its first fit: an :class:`OrtBenchError` that scikit-learn's
    tooling recognises as its own ``NotFittedError``."""
