"""Progress of a long loop: a tqdm bar on a terminal, plain lines otherwise.

A log file or a CI job then gets readable lines (one per epoch, or at most one every few
seconds for a benchmark run), with the time spent and an estimate of the time left,
instead of a bar redrawn with carriage returns.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

from tqdm import tqdm


class Progress:
    """Report ``total`` steps of a loop as they finish.

    Parameters
    ----------
    total : int
        Steps the loop will run (:meth:`grow` adds more).
    name : str
        What runs, shown first on every line (and as the bar's description).
    unit : str
        What a step is ("epoch", "stage").
    stream : file, optional
        Where to write; standard error by default.
    bar : bool, optional
        Draw a tqdm bar; by default when ``stream`` is a terminal, unless it says it is 0
        columns wide (a pseudo-terminal nobody sized, where a bar would draw nothing).
    every : float, optional
        Without a bar, the fewest seconds between two lines of :meth:`step` (0: a line
        per step); the steps in between only count.
    """

    def __init__(
        self,
        total: int,
        name: str,
        unit: str,
        stream: TextIO | None = None,
        bar: bool | None = None,
        every: float = 0.0,
    ):
        self.total, self.name, self.unit, self.every = total, name, unit, every
        self.stream = stream or sys.stderr
        self.done = 0
        self.start = time.perf_counter()
        #: seconds into the loop when the last line was written
        self.shown = 0.0
        if bar is None:
            bar = _is_terminal(self.stream) and _columns(self.stream) != 0
        self.bar = (
            tqdm(total=total, desc=name, unit=unit, file=self.stream, dynamic_ncols=True)
            if bar
            else None
        )

    def step(self, text: str = "", elapsed: float | None = None, steps: int = 1) -> None:
        """``steps`` more steps finished; ``text`` says how it went.

        Parameters
        ----------
        text : str
            Shown after the count (the bar's postfix).
        elapsed : float, optional
            Seconds since the loop started, when the caller timed it (by default, since
            this object was made).
        steps : int, optional
            Steps that finished together.
        """
        self.done += steps
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(steps)
            if self.done >= self.total:
                self.bar.close()
            return
        elapsed = self._elapsed(elapsed)
        if elapsed - self.shown >= self.every:
            self._line(elapsed, f"{self.unit} {self.done}/{self.total}", text)

    def grow(self, steps: int) -> None:
        """The loop runs ``steps`` more steps than it planned."""
        self.total += steps
        if self.bar is not None:
            self.bar.total = self.total
            self.bar.refresh()

    def note(self, text: str, elapsed: float | None = None) -> None:
        """Write ``text`` now, whatever the pace of :meth:`step`: above the bar on a
        terminal, else as a line with the time spent and the time the steps leave.

        Parameters
        ----------
        text : str
            What happened (a result).
        elapsed : float, optional
            Seconds since the loop started, as in :meth:`step`.
        """
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
            return
        self._line(self._elapsed(elapsed), text)

    def _elapsed(self, elapsed: float | None) -> float:
        return time.perf_counter() - self.start if elapsed is None else elapsed

    def _line(self, elapsed: float, *parts: str) -> None:
        """One line: the name, ``parts``, the time spent and, while steps are left and
        some finished, the time left at the pace of those."""
        timing = f"{elapsed:.1f}s"
        if 0 < self.done < self.total:
            timing += f", about {elapsed / self.done * (self.total - self.done):.0f}s left"
        line = " ".join(p for p in (f"[{self.name}]", *parts, f"({timing})") if p)
        print(line, file=self.stream, flush=True)
        self.shown = elapsed


def _is_terminal(stream: TextIO) -> bool:
    return hasattr(stream, "isatty") and stream.isatty()


def _columns(stream: TextIO) -> int | None:
    """The terminal's width, None when the stream cannot tell."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
