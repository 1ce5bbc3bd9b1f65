"""The engine's errors: :class:`OrtBenchError` (defined in :mod:`ortbench.errors`, which the
reports import without the engine) and its subclasses."""

from sklearn.exceptions import NotFittedError

from ..errors import OrtBenchError


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
