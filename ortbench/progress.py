"""Progress of a long loop: a tqdm bar on a terminal, one plain line per step otherwise.

A log file or a CI job then gets one readable line per epoch (or per benchmark cell), with
the time spent and an estimate of the time left, instead of a bar redrawn with carriage
returns.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from tqdm import tqdm


class Progress:
    """Report ``total`` steps of a loop as they finish.

    Parameters
    ----------
    total : int
        Steps the loop will run.
    name : str
        What runs, shown first on every line (and as the bar's description).
    unit : str
        What a step is ("epoch", "cell").
    stream : file, optional
        Where to write; standard error by default.
    bar : bool, optional
        Draw a tqdm bar; by default when ``stream`` is a terminal.
    """

    def __init__(
        self,
        total: int,
        name: str,
        unit: str,
        stream: TextIO | None = None,
        bar: bool | None = None,
    ):
        self.total, self.name, self.unit = total, name, unit
        self.stream = stream or sys.stderr
        self.done = 0
        self.start = time.perf_counter()
        if bar is None:
            bar = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.bar = (
            tqdm(total=total, desc=name, unit=unit, file=self.stream, dynamic_ncols=True)
            if bar
            else None
        )

    def step(self, text: str = "", elapsed: float | None = None) -> None:
        """One more step finished; ``text`` says how it went.

        Parameters
        ----------
        text : str
            Shown after the count (the bar's postfix).
        elapsed : float, optional
            Seconds since the loop started, when the caller timed it (by default, since
            this object was made).
        """
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=False)
            self.bar.update(1)
            if self.done >= self.total:
                self.bar.close()
            return
        if elapsed is None:
            elapsed = time.perf_counter() - self.start
        left = elapsed / self.done * (self.total - self.done)
        timing = f"{elapsed:.1f}s" + (f", about {left:.0f}s left" if self.done < self.total else "")
        parts = (f"[{self.name}]", f"{self.unit} {self.done}/{self.total}", text, f"({timing})")
        print(" ".join(p for p in parts if p), file=self.stream, flush=True)
