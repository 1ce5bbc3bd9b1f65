"""How the engine makes its sessions: options (threads, spinning, denormals), the
profiling switch, and the first line of an onnxruntime error."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import onnx
import onnxruntime

from ..gradients.kernel_forms import with_training_kernels
from ..graphs.loading import fit_runtime
from . import capi
from .build import has_training_kernels
from .devices import ort_device, providers

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
    options.log_severity_level = 4  # a failure reaches the caller as an exception
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
    update_threads : int or None
        Intra-op threads of the stacked momentum update's session (None: the pool).
    """

    device: str
    threads: int | None
    owner: str
    spinning: bool = True
    #: Intra-op threads of the stacked momentum update (see :meth:`update_session`).
    update_threads: int | None = 1

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

    def graph_session(
        self, model: onnx.ModelProto, label: str, relu_outputs: Iterable[str] = ()
    ) -> capi.InferenceSession:
        """A session over one of the engine's graphs (see :meth:`session`).

        ``model`` is lowered to what the runtime reads (:func:`fit_runtime`, in place). On
        the CPU of the training build, the session runs a copy with that build's kernels
        where they beat the portable forms
        (:func:`~ortbench.training.gradients.kernel_forms.with_training_kernels`, which
        ``relu_outputs`` is handed to).
        """
        model = fit_runtime(model)
        if self.device == "cpu" and has_training_kernels():
            faster = onnx.ModelProto()
            faster.CopyFrom(model)
            if with_training_kernels(faster, relu_outputs):
                model = faster
        return self.session(model.SerializeToString(), label)

    def update_session(self, model: bytes) -> capi.InferenceSession:
        """The session of the stacked momentum update (``model`` serialized), labelled
        ``update``, on ``update_threads``."""
        options = session_options(self.update_threads, f"{self.owner}_update", self.spinning)
        return capi.make_session(model, options, self.providers)


def l2_cache_bytes() -> int | None:
    """The size of one core's level-2 cache, as Linux reports it; None where unknown."""
    folder = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(folder)):
            with open(os.path.join(folder, index, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(folder, index, "size")) as f:
                size = f.read().strip()
            units = {"K": 2**10, "M": 2**20}
            return int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    except (OSError, ValueError):
        return None
    return None


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


def first_line(error: Exception) -> str:
    """The part of an onnxruntime error message that names the problem, on one line."""
    text = " ".join(str(error).split()) or type(error).__name__
    for marker in ("was false. ", "] : "):
        text = text.split(marker)[-1]
    return text[:300]


def run_once(model: onnx.ModelProto, feeds: dict) -> list | None:
    """The outputs of ``model`` on ``feeds``, on the CPU, or None where onnxruntime cannot
    run it: a probe a fit pays once (a width shape inference cannot tell), never a step."""
    try:
        session = onnxruntime.InferenceSession(
            model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"]
        )
        return session.run(None, feeds)
    except Exception:  # onnxruntime raises its own types; the caller keeps its fallback
        return None
