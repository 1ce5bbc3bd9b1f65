"""The timing protocol: how ``bench``, the A/B workers, the calibration and the asv suites
time a training step.

A cell's contender is timed over a short fit (:data:`SHORT_EPOCHS` epochs) and a long one,
both continuing from the trained weights; the long fit grows until it lasts at least
:data:`MIN_EXTRA_SECONDS` longer (:func:`long_fit_epochs`). A round's sample is the slope
between the two (:func:`slope`): the time of one more step, without what a fit pays once.
Each fit starts once the threads of the one before stopped spinning
(:func:`wait_until_quiet`), and the garbage of building stays out of the collections
that would run inside timed fits (:func:`settled_heap`). A cell whose slopes are no
measurement gets the status ``unstable: <reason>`` (:func:`unstable`).

:class:`TimedFits` runs the protocol over any set of timed things (the contenders of a
group in ``bench``, the cells of a group on both sides in ``ab``), in the order each
round asks for. This module imports only the standard library and numpy: the A/B worker
loads this very file by its path into a side's process, whatever ortbench that side
holds, so that both sides are timed by the same code.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

import numpy as np

#: Epochs of the short timed fit; the long one runs ``long_fit_epochs(...)``.
SHORT_EPOCHS = 1
#: Seconds the long timed fit runs longer than the short one, at least: a fit's fixed part
#: jumps by milliseconds now and then (a page fault, a garbage collection, the other core's
#: work), which must stay small against the extra steps it is divided by.
MIN_EXTRA_SECONDS = 0.05
#: Long fits :func:`long_fit_epochs` times at most while it sizes them.
MAX_SIZING_FITS = 8
#: The most the middle half of a cell's slopes may spread (upper over lower quartile) for
#: its median to count as a measurement.
SPREAD_BOUND = 2.0
#: Seconds of each look at the process's CPU time in :func:`wait_until_quiet`, and the most
#: it waits in all.
QUIET_WINDOW = 0.005
QUIET_LIMIT = 1.0
#: How the time per step was measured (the ``timing`` column).
TIMING = "slope between {short}- and {long}-epoch fits"
_TIMING_PATTERN = re.compile(r"slope between (\d+)- and (\d+)\+?-epoch fits")
#: The status of a cell whose slopes are no measurement (see :func:`unstable`).
UNSTABLE = "unstable"
#: Added to ``timing`` when the wait for quiet before a fit gave up (other threads still ran).
QUIET_TIMEOUT = "; quiet wait gave up after {count} fits ({limit:g} s each)"
#: How many times the extra epochs of a long fit grow when a group is timed again
#: (``bench``): the longer fits average out more of the stalls that a busy machine puts
#: into each fit.
AGAIN_GROWTH = 4
#: Added to ``timing`` when the group's first rounds left a cell unstable and it was timed
#: again, with longer long fits (``bench``).
TIMED_AGAIN = "; rounds timed again (a cell of the first ones was unstable)"


def long_fit_epochs(time_fits: Callable[[int], dict], epochs: int) -> int:
    """Measure, extend: the epochs of a long timed fit that outlasts the short one by at
    least :data:`MIN_EXTRA_SECONDS`.

    A short fit (``SHORT_EPOCHS`` epochs) is timed once, then long fits of ``epochs`` more,
    growing in proportion to what they lacked until the measured difference reaches the
    target (at most :data:`MAX_SIZING_FITS` of them). The difference is measured, not
    predicted from the short fit: a short fit's duration includes what a fit pays once, so
    dividing it by its epochs overestimates an epoch. Before each growth the short fit is
    timed again and the quicker of its times kept: a one-off stall in it would otherwise
    shrink the difference and grow every later fit of the cell.

    Parameters
    ----------
    time_fits : callable
        Times one fit of the given epochs of each contender (or side) that still runs;
        returns their durations in seconds by name. Every one must reach the target.
    epochs : int
        The fewest extra epochs (the ``--epochs`` option).

    Returns
    -------
    int
        The long fit's epochs: ``SHORT_EPOCHS`` plus ``epochs`` or more.
    """

    def least_gain() -> float | None:
        gains = [longs[name] - shorts[name] for name in longs if name in shorts]
        return min(gains) if gains else None

    extra = epochs
    shorts = time_fits(SHORT_EPOCHS)
    for _ in range(MAX_SIZING_FITS):
        longs = time_fits(SHORT_EPOCHS + extra)
        gained = least_gain()
        if gained is None or gained >= MIN_EXTRA_SECONDS:
            break
        again = time_fits(SHORT_EPOCHS)
        shorts = {name: min(seconds, again.get(name, seconds)) for name, seconds in shorts.items()}
        gained = least_gain()
        if gained is None or gained >= MIN_EXTRA_SECONDS:
            break
        # a margin, so that the noise of the next measurement rarely asks for a third
        extra = (
            4 * extra
            if gained <= 0
            else max(extra + 1, math.ceil(1.2 * extra * MIN_EXTRA_SECONDS / gained))
        )
    return SHORT_EPOCHS + extra


def slope(short: float, long: float, short_steps: int, long_steps: int) -> tuple[float, float]:
    """Seconds per step and seconds per fit from the durations of a short and a long fit.

    Parameters
    ----------
    short, long : float
        Seconds taken by a fit of ``short_steps`` steps and by one of ``long_steps`` steps
        (more) of the same contender.
    short_steps, long_steps : int
        Their numbers of training steps.

    Returns
    -------
    seconds_per_step : float
        ``(long - short) / (long_steps - short_steps)``: what one more step costs; what a
        fit pays once (argument checks, set-up, warming caches) cancels out.
    seconds_per_fit : float
        That fixed part: ``short - short_steps * seconds_per_step``.
    """
    per_step = (long - short) / (long_steps - short_steps)
    return per_step, short - short_steps * per_step


def unstable(seconds_per_step: list[float]) -> str | None:
    """Why a cell's slopes are no measurement, or None when they are one.

    Parameters
    ----------
    seconds_per_step : list of float
        The cell's slopes, one per round.

    Returns
    -------
    str or None
        The reason when a slope is not positive (the fixed part's noise outweighed the
        extra steps) or when the upper quartile exceeds :data:`SPREAD_BOUND` times the
        lower one; None otherwise.
    """
    if not seconds_per_step:
        return "no slope"
    bad = sum(t <= 0 for t in seconds_per_step)
    if bad:
        return f"{bad} of {len(seconds_per_step)} slopes not positive"
    low, high = np.percentile(seconds_per_step, [25, 75])
    if high > SPREAD_BOUND * low:
        return f"slopes spread beyond {SPREAD_BOUND:g}x (quartiles {low:.3g} s and {high:.3g} s)"
    return None


def step_columns(seconds_per_step: list[float], seconds_per_fit: list[float]) -> dict:
    """A cell's timing columns from its rounds' slopes: the median, least and most seconds
    per step, and the median fixed part of a fit."""
    return {
        "seconds_per_step": float(np.median(seconds_per_step)),
        "seconds_per_step_min": min(seconds_per_step),
        "seconds_per_step_max": max(seconds_per_step),
        "seconds_per_fit_overhead": float(np.median(seconds_per_fit)),
    }


def timing_column(long_epochs: int | str, quiet_gave_up: int = 0, again: bool = False) -> str:
    """The ``timing`` column: the fits' lengths, after how many fits the wait for quiet
    gave up (none: nothing added), and whether the rounds were timed again."""
    text = TIMING.format(short=SHORT_EPOCHS, long=long_epochs)
    if quiet_gave_up:
        text += QUIET_TIMEOUT.format(count=quiet_gave_up, limit=QUIET_LIMIT)
    if again:
        text += TIMED_AGAIN
    return text


def fit_lengths(timing: str) -> list[tuple[int, int]] | None:
    """The epochs of the short and long fits of each set of rounds a ``timing`` column
    names: one set, or two when the rounds were timed again (the first set's long fits
    then had 1/:data:`AGAIN_GROWTH` of the extra epochs; see :func:`timing_column`). An
    unfinished row names the fewest long epochs before they were sized; None when the
    text does not start as :data:`TIMING`."""
    match = _TIMING_PATTERN.match(timing)
    if match is None:
        return None
    short, long = int(match[1]), int(match[2])
    if timing.endswith(TIMED_AGAIN):
        return [(short, short + (long - short) // AGAIN_GROWTH), (short, long)]
    return [(short, long)]


def _others_running() -> bool | None:
    """Whether another thread of this process is running or waiting for a core (Linux:
    its state in ``/proc``); None where the kernel does not tell."""
    me = str(threading.get_native_id())
    try:
        tasks = [t for t in os.listdir("/proc/self/task") if t != me]
        states = []
        for task in tasks:
            with open(f"/proc/self/task/{task}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
    except OSError:
        return None
    return "R" in states


def wait_until_quiet() -> float:
    """Sleep until no other thread of this process is running; return the seconds waited.

    After a call, BLAS and OpenMP pools keep their threads spinning for a while (how long:
    ``docs/benchmarks.md``), on cores that the next contender's fit would need. Waiting,
    one :data:`QUIET_WINDOW` after another and at most :data:`QUIET_LIMIT` in all, until
    no other thread is runnable (where the kernel tells; else until the process's CPU
    time grows by under a tenth of a window) keeps every contender's threads off every
    other contender's fits. A spinning thread that a loaded machine keeps off the cores
    is still runnable, so the wait does not end early there; where nothing else runs, no
    window is slept.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < QUIET_LIMIT:
        running = _others_running()
        if running is False:
            break
        cpu = time.process_time()
        time.sleep(QUIET_WINDOW)
        if running is None and time.process_time() - cpu < QUIET_WINDOW / 10:
            break
    return time.perf_counter() - start


@contextlib.contextmanager
def settled_heap() -> Iterator[None]:
    """Collect garbage, then keep the objects left out of later collections until the
    block ends: building models leaves many objects behind, and a full collection over
    them inside a timed fit costs tens of milliseconds that belong to no step. The block
    starts once the process is quiet (:func:`wait_until_quiet`)."""
    gc.collect()
    gc.freeze()
    wait_until_quiet()
    try:
        yield
    finally:
        gc.unfreeze()


class Timed(Protocol):
    """What the protocol times: a contender's ``time_fit``."""

    def time_fit(self, epochs: int) -> float: ...


def timed_fit(contender: Timed, epochs: int) -> tuple[float, bool]:
    """One timed fit of ``epochs`` epochs, then the wait for quiet that keeps its threads
    off the next fit.

    Returns
    -------
    seconds : float
        The fit's duration.
    gave_up : bool
        True when the wait for quiet reached :data:`QUIET_LIMIT`.
    """
    seconds = contender.time_fit(epochs)
    return seconds, wait_until_quiet() >= QUIET_LIMIT


Key = TypeVar("Key", bound=Hashable)


class TimedFits(Generic[Key]):
    """The protocol over the timed things of one group, each named by a key.

    Parameters
    ----------
    fit : callable
        ``fit(key, epochs)`` times one fit; returns its seconds and whether the wait for
        quiet after it gave up, or None when the fit broke (the key is then dropped: no
        later fit of it is asked for).
    """

    def __init__(self, fit: Callable[[Key, int], tuple[float, bool] | None]):
        self._fit = fit
        self.dropped: set[Key] = set()
        #: fits after which the wait for quiet gave up, by key
        self.quiet_gave_up: Counter = Counter()

    def one(self, key: Key, epochs: int) -> float | None:
        """The seconds of one fit of ``key`` (None once it broke)."""
        if key in self.dropped:
            return None
        result = self._fit(key, epochs)
        if result is None:
            self.dropped.add(key)
            return None
        seconds, gave_up = result
        self.quiet_gave_up[key] += gave_up
        return seconds

    def long_epochs(self, keys: Sequence[Key], epochs: int) -> int:
        """The long fit's epochs for ``keys``, timed in turn, the same for all of them
        (:func:`long_fit_epochs`)."""

        def time_fits(length: int) -> dict:
            durations = {key: self.one(key, length) for key in keys}
            return {key: s for key, s in durations.items() if s is not None}

        return long_fit_epochs(time_fits, epochs)

    def rounds(
        self, long_epochs: Mapping[Key, int], orders: Iterable[Sequence[Key]]
    ) -> Iterator[dict[Key, tuple[float, float]]]:
        """Time one round per order: a short fit of every key in the order's turn, then a
        long one of every key; yield the round's (short, long) seconds by key (keys whose
        fit broke left out)."""
        for order in orders:
            shorts = {key: self.one(key, SHORT_EPOCHS) for key in order}
            longs = {key: self.one(key, long_epochs[key]) for key in order}
            yield {
                key: (shorts[key], longs[key])
                for key in order
                if shorts[key] is not None and longs[key] is not None
            }
