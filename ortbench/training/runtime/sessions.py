"""What ortbench asks of the installed onnxruntime build through its public API.

Build checks, devices, session options, logging and profiling live here; the C-level
objects below the public API come from :mod:`ortbench.training.runtime.capi`, the one module that
touches onnxruntime's internals.

onnxruntime-training 1.19.2 imports torch from ``onnxruntime/training/__init__.py``
(microsoft/onnxruntime#22070), although the pieces the engine uses (``artifacts``,
``onnxblock``, ``api``) never need it. When torch is absent, :func:`training_module`
registers an empty package object for ``onnxruntime.training`` whose ``__path__`` points
at the real folder, so its submodules import without running that ``__init__``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import types
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

import onnx
import onnxruntime
from onnx import TensorProto, helper

from ..errors import OrtBenchError
from . import capi

#: Highest ai.onnx opset and IR version onnxruntime 1.19.2 reads.
MAX_OPSET = 21
MAX_IR_VERSION = 10


@cache
def training_module(name: str) -> types.ModuleType:
    """Import ``onnxruntime.training.<name>`` with or without torch installed."""
    full = f"onnxruntime.training.{name}"
    if importlib.util.find_spec("torch") is None and "onnxruntime.training" not in sys.modules:
        spec = importlib.util.find_spec("onnxruntime.training")
        if spec is None or spec.submodule_search_locations is None:
            raise OrtBenchError(runtime_problem() or "onnxruntime.training is not installed")
        shell = types.ModuleType("onnxruntime.training")
        shell.__path__ = list(spec.submodule_search_locations)
        sys.modules["onnxruntime.training"] = shell
    return importlib.import_module(full)


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


def check_training_build() -> None:
    """Raise a one-line error unless the training build of onnxruntime is installed."""
    problem = runtime_problem()
    if problem:
        raise OrtBenchError(problem)


def parse_device(device: str) -> tuple[str, int]:
    """Split ``'cpu'``, ``'cuda'`` or ``'cuda:N'`` into a kind and an index."""
    if not isinstance(device, str):
        raise OrtBenchError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise OrtBenchError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    return kind, int(index or 0)


def check_device(device: str, backend: str = "ort-training") -> None:
    """Raise a one-line error when the installed runtime cannot run ``backend`` on ``device``."""
    kind, _ = parse_device(device)
    listed = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    if kind == "cuda" and listed and not cuda_loads():
        raise OrtBenchError(
            f"device {device!r} is not available: onnxruntime {onnxruntime.__version__} "
            "lists CUDAExecutionProvider but cannot load it (are CUDA and cuDNN, in the "
            "versions this onnxruntime-gpu needs, on the library path?)"
        )
    if kind == "cuda" and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        needed = (
            "the portable backend runs on CUDA with onnxruntime-gpu (no training build)"
            if backend == "portable"
            else "CUDA training needs the onnxruntime-training 1.19.2 CUDA build (CUDA 12, "
            "Python <= 3.11), or backend='portable' with onnxruntime-gpu"
        )
        raise OrtBenchError(
            f"device {device!r} is not available: the installed onnxruntime "
            f"{onnxruntime.__version__} offers {onnxruntime.get_available_providers()}; {needed}"
        )


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


def ort_device(device: str) -> capi.OrtDevice:
    """The C-level OrtDevice for a device string."""
    kind, index = parse_device(device)
    device_type = capi.OrtDevice.cuda() if kind == "cuda" else capi.OrtDevice.cpu()
    return capi.OrtDevice(device_type, capi.OrtDevice.default_memory(), index)


def providers(device: str) -> list:
    """Execution providers for a device string, CPU last as the fallback."""
    kind, index = parse_device(device)
    if kind == "cuda":
        return [("CUDAExecutionProvider", {"device_id": index}), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


_profile_folder: str | None = None


@contextlib.contextmanager
def profiled_sessions(folder: str | os.PathLike) -> Iterator[None]:
    """Make every session created inside the block write onnxruntime's profile to ``folder``.

    Each session gets its own file prefix (its label), since the runtime names files with
    one-second resolution. A profile is written when its session is destroyed. The
    switch acts when sessions are built, so the training hot path carries no branch for it.
    """
    global _profile_folder
    previous, _profile_folder = _profile_folder, os.fspath(folder)
    os.makedirs(_profile_folder, exist_ok=True)
    try:
        yield
    finally:
        _profile_folder = previous


def session_options(
    intra_op_threads: int | None = None, label: str = "session", spinning: bool = True
) -> onnxruntime.SessionOptions:
    """Session options shared by every session a trainer creates.

    ``intra_op_threads=None`` keeps onnxruntime's default pool (a thread per core,
    spinning between kernels; ``spinning=False`` makes its threads sleep instead); small
    batches often run faster on one thread because handing a tiny kernel to a pool costs
    more than it saves. ``label`` names the session's profile file under
    :func:`profiled_sessions`.
    """
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.set_denormal_as_zero", "1")
    if intra_op_threads is not None:
        options.intra_op_num_threads = intra_op_threads
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if _profile_folder is not None:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(_profile_folder, label)
    return options


@dataclass(frozen=True)
class SessionMaker:
    """How one trainer makes its sessions: device, intra-op threads, profile labels.

    Parameters
    ----------
    device : str
        ``'cpu'``, ``'cuda'`` or ``'cuda:N'``.
    threads : int or None
        Intra-op threads of the sessions (None: onnxruntime's default pool), but for
        those made with ``one_thread``.
    owner : str
        The prefix of every session's label (the trainer's class name), which names its
        profile file and its phases in ``steps.md``.
    spinning : bool
        Whether the pools' threads spin between kernels (see :func:`session_options`).
    """

    device: str
    threads: int | None
    owner: str
    spinning: bool = True

    def options(self, label: str, one_thread: bool = False) -> onnxruntime.SessionOptions:
        """The options of the session ``label`` (see :func:`session_options`).

        ``one_thread`` runs it on the calling thread whatever ``threads`` says: for the
        small element-wise sessions (loss, update) that run between the large ones, whose
        own pool's spinning threads would take the cores from the large sessions' pool.
        """
        threads = 1 if one_thread else self.threads
        return session_options(threads, f"{self.owner}_{label}", self.spinning)

    @property
    def providers(self) -> list:
        """Execution providers of the device (see :func:`providers`)."""
        return providers(self.device)

    @property
    def ort_device(self) -> capi.OrtDevice:
        """The C-level device (see :func:`ort_device`)."""
        return ort_device(self.device)

    def session(self, model: bytes, label: str, one_thread: bool = False) -> capi.InferenceSession:
        """A C-level session over the serialized ``model``, labelled ``label`` (see
        :meth:`options` for ``one_thread``)."""
        return capi.make_session(model, self.options(label, one_thread), self.providers)


def quiet_logs() -> None:
    """Silence onnxruntime's informational logging."""
    onnxruntime.set_default_logger_severity(3)


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Mute what native code writes to stderr while building training graphs.

    onnxblock builds its gradient graph with a logger at info level that prints one line
    per graph transformer; failures still surface as exceptions.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def cpu_scalar(array) -> capi.OrtValue:
    """An OrtValue viewing a small numpy array (a scalar, a few coefficients) in host memory.

    Learning rates, losses and penalties live there on every device: the trainer reads
    or writes them through numpy, and onnxruntime copies a scalar across on CUDA.
    """
    return capi.OrtValue.ortvalue_from_numpy(array, ort_device("cpu"))


def first_line(error: Exception) -> str:
    """The part of an onnxruntime error message that names the problem, on one line."""
    text = " ".join(str(error).split()) or type(error).__name__
    for marker in ("was false. ", "] : "):
        text = text.split(marker)[-1]
    return text[:300]
