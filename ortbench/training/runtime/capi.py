"""onnxruntime's C-level objects: the one module that imports ``_pybind_state``.

The engine's hot path calls onnxruntime below its public Python wrappers (sessions bound
once with IOBinding, TrainingAgent, the on-device training API), so it depends on
internal symbols. They are all named here:

- :data:`CORE_SYMBOLS` exist in every onnxruntime build (inference sessions, OrtValue,
  IOBinding, devices); a build without one fails at import with one line.
- :data:`TRAINING_SYMBOLS` exist only in onnxruntime-training (TrainingAgent, the
  on-device API, the gradient builders); reading one from this module where the build
  lacks it raises a one-line :class:`OrtBenchError`, so the portable backend still runs
  on any build.

The rest of the engine reads these objects from here, and the cost counters
(:mod:`ortbench.bench.counters`) wrap the methods of the classes listed here.
"""

from __future__ import annotations

import onnxruntime
from onnxruntime.capi import _pybind_state as _C

from ..errors import OrtBenchError

#: What the engine uses of every onnxruntime build.
CORE_SYMBOLS = (
    "InferenceSession",
    "OrtDevice",
    "OrtValue",
    "OrtValueVector",
    "RunOptions",
    "SessionIOBinding",
)
#: What the engine uses of onnxruntime-training builds only.
TRAINING_SYMBOLS = (
    "GradientGraphBuilder",
    "Module",
    "Optimizer",
    "OrtModuleGraphBuilder",
    "OrtModuleGraphBuilderConfiguration",
    "PartialGraphExecutionState",
    "TrainingAgent",
    "TrainingGraphTransformerConfiguration",
    "load_checkpoint",
)


def missing(names: tuple[str, ...]) -> list[str]:
    """The symbols among ``names`` the installed onnxruntime build lacks.

    Parameters
    ----------
    names : tuple of str
        Names from :data:`CORE_SYMBOLS` or :data:`TRAINING_SYMBOLS`.

    Returns
    -------
    list of str
        The absent ones, in the order given.
    """
    return [name for name in names if not hasattr(_C, name)]


def _missing_line(names: list[str]) -> str:
    return (
        f"onnxruntime {onnxruntime.__version__} has no {', '.join(names)}: install "
        "onnxruntime-training-cpu==1.19.2 (the 'ort-training' backend needs it) or, for "
        "backend='portable', a plain onnxruntime build"
    )


if missing(CORE_SYMBOLS):
    raise OrtBenchError(_missing_line(missing(CORE_SYMBOLS)))

#: What onnxruntime raises when a run fails (a kernel refusing its inputs...): its own
#: exception types, and RuntimeError from the training API and the C++ bindings.
RUN_ERRORS = (
    RuntimeError,
    *(
        getattr(_C, name)
        for name in ("Fail", "InvalidArgument", "RuntimeException", "NotImplemented", "EPFail")
        if hasattr(_C, name)
    ),
)

InferenceSession = _C.InferenceSession
OrtDevice = _C.OrtDevice
OrtValue = _C.OrtValue
OrtValueVector = _C.OrtValueVector
RunOptions = _C.RunOptions
SessionIOBinding = _C.SessionIOBinding


def __getattr__(name: str):
    """The training-only symbols, read on first use (see :data:`TRAINING_SYMBOLS`)."""
    if name not in TRAINING_SYMBOLS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not hasattr(_C, name):
        raise OrtBenchError(_missing_line([name]))
    value = getattr(_C, name)
    globals()[name] = value  # later reads skip this function
    return value


def make_session(model: bytes, options, providers: list) -> InferenceSession:
    """A C-level InferenceSession (the Python wrapper adds nothing on the hot path).

    Parameters
    ----------
    model : bytes
        The serialized ONNX model.
    options : onnxruntime.SessionOptions
        Threads, logging and profiling (see :func:`ortbench.training.runtime.sessions.session_options`).
    providers : list
        Execution providers, as ``onnxruntime.InferenceSession`` takes them.

    Returns
    -------
    InferenceSession
        The C-level session the wrapper holds.
    """
    return onnxruntime.InferenceSession(model, options, providers=providers)._sess


def value_vector(values) -> OrtValueVector:
    """An OrtValueVector holding ``values`` (OrtValues), in order."""
    vector = OrtValueVector()
    for value in values:
        vector.push_back(value)
    return vector


class Binding:
    """One IOBinding over a C-level session, bound once and run many times.

    The engine binds every input and output of a run when it stages a fit's batches: one
    binding per staged batch (and per weight parity where the weights are
    double-buffered), over buffers that keep their address for the whole fit. A step
    then only calls :meth:`run`; nothing is bound, looked up or allocated per step.
    """

    def __init__(self, session: InferenceSession):
        self.session = session
        self.binding = SessionIOBinding(session)
        self.run_options = RunOptions()

    def bind_input(self, name: str, value: OrtValue) -> None:
        """Bind ``value`` to the input ``name``."""
        self.binding.bind_ortvalue_input(name, value)

    def bind_output(self, name: str, value: OrtValue) -> None:
        """Bind the preallocated ``value`` to the output ``name``."""
        self.binding.bind_ortvalue_output(name, value)

    def bind_output_to(self, name: str, device: OrtDevice) -> None:
        """Let the run allocate the output ``name`` on ``device`` (see :meth:`outputs`)."""
        self.binding.bind_output(name, device)

    def outputs(self) -> list[OrtValue]:
        """The OrtValues the last run wrote, in the order the outputs were bound."""
        return list(self.binding.get_outputs())

    def run(self) -> None:
        """Run the session on the current bindings."""
        self.session.run_with_iobinding(self.binding, self.run_options)
