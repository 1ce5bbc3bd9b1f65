"""Peak resident memory of a block of code, from the kernel's high-water mark (Linux)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

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
    """Measure the peak resident memory the block adds."""
    peak = PeakMemory()
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        start = _status_kb("VmRSS")
    except OSError:
        yield peak
        return
    yield peak
    peak.mb = (_status_kb("VmHWM") - start) / 1024
