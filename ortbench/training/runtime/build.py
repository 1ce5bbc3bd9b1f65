"""What the installed onnxruntime build is and can do: the training build's check, the
highest opset and IR version it reads, whether CUDA loads, its default logging.

The C-level objects below the public API come from :mod:`.capi`, the one module that
touches onnxruntime's internals.

onnxruntime-training 1.19.2 imports torch from ``onnxruntime/training/__init__.py``
(microsoft/onnxruntime#22070), although the pieces the engine uses (``artifacts``,
``onnxblock``, ``api``) never need it: :func:`training_module` imports them through the
package objects of :mod:`ortbench.onnxruntime_import`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings
from functools import cache

import onnx
import onnxruntime
from onnx import TensorProto, helper

from ...onnxruntime_import import register_shells
from ..errors import OrtBenchError
from . import capi

#: Highest ai.onnx opset and IR version onnxruntime 1.19.2 reads.
MAX_OPSET = 21


MAX_IR_VERSION = 10


@cache
def training_module(name: str) -> types.ModuleType:
    """Import ``onnxruntime.training.<name>`` with or without torch installed."""
    if not register_shells() or "onnxruntime.training" not in sys.modules:
        raise OrtBenchError(runtime_problem() or "onnxruntime.training is not installed")
    return importlib.import_module(f"onnxruntime.training.{name}")


#: The only onnxruntime-training release the engine is built and tested on (the last one).
TRAINING_VERSION = "1.19.2"


def runtime_problem() -> str | None:
    """Say what is wrong with the installed onnxruntime for training, or None."""
    if capi.missing(capi.TRAINING_SYMBOLS) or onnxruntime.__version__ != TRAINING_VERSION:
        return (
            f"onnxruntime {onnxruntime.__version__} is not the training build ortbench needs: "
            f"install onnxruntime-training-cpu=={TRAINING_VERSION} and make sure no plain "
            "onnxruntime package overwrote it"
        )
    return None


@cache
def has_training_kernels() -> bool:
    """Whether the CPU provider of the installed build has onnxruntime-training's gradient
    kernels (``ReluGrad`` and the like, domain ``com.microsoft``): the training build does,
    a plain onnxruntime does not."""
    return runtime_problem() is None


def check_training_build() -> None:
    """Raise a one-line error unless the training build of onnxruntime is installed."""
    problem = runtime_problem()
    if problem:
        raise OrtBenchError(problem)


def identity_graph(ir_version: int = MAX_IR_VERSION) -> bytes:
    """A one-node graph: input ``X`` (float, shape [1]), output ``Y = Identity(X)``.

    Parameters
    ----------
    ir_version : int
        The IR version the model declares.

    Returns
    -------
    bytes
        The serialized model.
    """
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "identity",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
    )
    opsets = [helper.make_opsetid("", MAX_OPSET)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=ir_version).SerializeToString()


@cache
def max_ir_version() -> int:
    """The highest ONNX IR version the installed onnxruntime loads, found by trying.

    The newest onnx writes a newer IR version than onnxruntime-training 1.19.2 reads (10);
    one small session per version, newest first, once per process, tells.

    Returns
    -------
    int
        The IR version, at most the installed onnx's own ``onnx.IR_VERSION``.
    """
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # a refused version logs its error otherwise
    for version in range(onnx.IR_VERSION, MAX_IR_VERSION, -1):
        try:
            onnxruntime.InferenceSession(
                identity_graph(version), options, providers=["CPUExecutionProvider"]
            )
        except Exception:  # the runtime raises its own Fail type for a newer IR version
            continue
        return version
    return MAX_IR_VERSION


@cache
def cuda_loads() -> bool:
    """Whether a session of this onnxruntime build runs on CUDA here.

    onnxruntime-gpu lists CUDAExecutionProvider wherever it is installed, also where the
    CUDA libraries it loads are missing; a session then falls back to the CPU, and running
    on CUDA fails later with a raw error. One small session, once per process, tells.

    Returns
    -------
    bool
        True when a session created with CUDAExecutionProvider keeps it.
    """
    onnxruntime.set_default_logger_severity(4)  # the failed load logs two lines otherwise
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = onnxruntime.InferenceSession(
                identity_graph(), providers=["CUDAExecutionProvider"]
            )
    finally:
        quiet_logs()
    return "CUDAExecutionProvider" in session.get_providers()


def quiet_logs() -> None:
    """Silence onnxruntime's logging but for fatal errors: a failing kernel's error line
    (red, with the runtime's source file) would come before the exception that says the
    same, which the trainers turn into one line."""
    onnxruntime.set_default_logger_severity(4)
