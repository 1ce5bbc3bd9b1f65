"""SIGINT and SIGTERM during a run: noticed even when a contender swallows them.

scikit-learn's MLP catches KeyboardInterrupt in its epoch loop and returns as if its fit
had finished; a time taken from that fit would be too short and its cell would read "ok".
:func:`interruptible` remembers that a signal came, so the matrix can check after every
contender call, and lets the writing of a group's rows finish before the run stops.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


class Signals:
    """Whether SIGINT or SIGTERM came, and whether KeyboardInterrupt waits for a write."""

    def __init__(self):
        self.received = False
        self._deferred = False

    def came(self) -> bool:
        """True once a signal came, even if the KeyboardInterrupt it raised was caught."""
        return self.received

    def handle(self, signum, frame) -> None:
        self.received = True
        if not self._deferred:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block a signal does not cut: it is only remembered (check :meth:`came`)."""
        self._deferred = True
        try:
            yield
        finally:
            self._deferred = False


@contextlib.contextmanager
def interruptible() -> Iterator[Signals]:
    """Turn SIGINT and SIGTERM into KeyboardInterrupt and remember that they came.

    Outside the main thread signals cannot be caught: the yielded object then never
    reports one.
    """
    signals = Signals()
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    previous = {s: signal.signal(s, signals.handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield signals
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
