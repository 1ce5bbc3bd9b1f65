"""Devices: ``'cpu'``, ``'cuda'`` or ``'cuda:N'`` parsed and checked against the installed
build, and their execution providers and C-level device objects."""

from __future__ import annotations

import numpy as np
import onnxruntime

from ..errors import OrtBenchError
from . import capi
from .build import cuda_loads


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


def ort_device(device: str) -> capi.OrtDevice:
    """The C-level OrtDevice for a device string."""
    kind, index = parse_device(device)
    device_type = capi.OrtDevice.cuda() if kind == "cuda" else capi.OrtDevice.cpu()
    return capi.OrtDevice(device_type, capi.OrtDevice.default_memory(), index)


def providers(device: str) -> list:
    """Execution providers for a device string, CPU last as the fallback.

    CUDA multiplies float32 matrices in float32 (``use_tf32`` off, as torch does by
    default): a CUDA run follows the CPU run's trajectory to float32 rounding.
    """
    kind, index = parse_device(device)
    if kind == "cuda":
        options = {"device_id": index, "use_tf32": 0}
        return [("CUDAExecutionProvider", options), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def cpu_scalar(array) -> capi.OrtValue:
    """An OrtValue viewing a small numpy array (a scalar, a few coefficients) in host memory.

    Bound as an output, on any device, it holds what the last run wrote (onnxruntime
    copies a device's output into it). Bound as an input, it is read by every run on CPU
    only: see :class:`ScalarInput`.
    """
    return capi.OrtValue.ortvalue_from_numpy(array, ort_device("cpu"))


class ScalarInput:
    """A float32 scalar the trainer sets between runs and a session reads as an input.

    On CPU, the bound OrtValue views :attr:`array`: the next run reads what was written
    there. On CUDA, onnxruntime copies a host input to the device when it is bound, not
    at each run, so the bound OrtValue lives on the device and :meth:`set` copies each new
    value into it (once per learning-rate change, never per step).

    Parameters
    ----------
    device : OrtDevice
        The device of the sessions that read it.
    """

    def __init__(self, device: capi.OrtDevice):
        self.array = np.zeros((), dtype=np.float32)
        self._on_device = device.device_type() != capi.OrtDevice.cpu()
        self.value = capi.OrtValue.ortvalue_from_numpy(self.array, device)

    def set(self, number: float) -> None:
        """Make the next runs read ``number``."""
        self.array[()] = number
        if self._on_device:
            self.value.update_inplace(self.array)

    def __float__(self) -> float:
        return float(self.array)
