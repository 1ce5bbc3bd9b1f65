"""Peak resident memory of a block of code, from the kernel's high-water mark (Linux)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .contenders import Contender

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


@dataclass
class PeakMemory:
    """Peak resident memory during the block above the resident memory before it, in MB.

    NaN where the platform cannot reset the high-water mark (anything but Linux).
    """

    mb: float = math.nan


def _status_kb(field: str) -> int:
    with open(_STATUS) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in {_STATUS}")


@contextlib.contextmanager
def peak_memory() -> Iterator[PeakMemory]:
    """Measure the peak resident memory the block adds, whatever ran before it."""
    peak = PeakMemory()
    try:
        start = _reset_peak()
    except OSError:
        yield peak
        return
    yield peak
    peak.mb = _peak_since(start)


def _release_free_memory() -> None:
    """Hand the memory the heap holds free back to the kernel (glibc's ``malloc_trim``).

    Memory that code run before freed stays resident in the heap; a block that reuses it
    would not raise the resident size, and its peak would depend on what ran before it.
    """
    gc.collect()
    name = ctypes.util.find_library("c")
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(name).malloc_trim(0)


def _reset_peak() -> int:
    """Release the heap's free memory, then reset the high-water mark to the current
    resident size; return that size (kB)."""
    _release_free_memory()
    with open(_CLEAR_REFS, "w") as f:
        f.write("5")
    return _status_kb("VmRSS")


def _peak_since(start_kb: int) -> float:
    return (_status_kb("VmHWM") - start_kb) / 1024


@dataclass
class MemoryGrowth:
    """Peak resident memory a fit adds (MB) after 1 epoch and after ``epochs`` epochs."""

    first_epoch_mb: float
    all_epochs_mb: float
    epochs: int

    @property
    def ratio(self) -> float:
        """How many times the 1-epoch peak the long fit reached (1.0: nothing grew)."""
        return self.all_epochs_mb / self.first_epoch_mb if self.first_epoch_mb > 0 else math.nan


def memory_growth(contender: Contender, epochs: int = 100) -> MemoryGrowth:
    """Fit an unfitted ``contender`` for 1 epoch, then carry the same fit on to ``epochs``.

    Both peaks are measured over the resident memory before the fit, the second one over
    the whole fit: a trainer that allocates per step shows a ratio above 1, one that only
    allocates while it builds shows 1. Raises OSError where the kernel's high-water mark
    cannot be reset (anything but Linux).
    """
    start = _reset_peak()
    contender.fit(1)
    first = _peak_since(start)
    contender.continue_fit(epochs - 1)
    return MemoryGrowth(first, _peak_since(start), epochs)
