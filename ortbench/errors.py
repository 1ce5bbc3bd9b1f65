"""The one exception ortbench raises for a user's mistake, at the bottom of every layer:
the engine, the harness and the reports all raise it, and the reports import nothing else
of the engine."""


class OrtBenchError(ValueError):
    """A bad input or a failed run, explained in one line.

    Subclasses ValueError so scikit-learn's tooling (GridSearchCV's error_score,
    check_estimator) treats it as the estimator's own validation error.
    """
