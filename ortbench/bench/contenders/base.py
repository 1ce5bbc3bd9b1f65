"""The contender interface: train a problem, report the loss curve, predict, time steps."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import ClassVar

import numpy as np

from ...schema import MIN_EXTRA_SECONDS, SHORT_EPOCHS
from ..counters import RuntimeCounts
from ..problems import Problem

#: Long fits :func:`long_fit_epochs` times at most while it sizes them.
MAX_SIZING_FITS = 8


def long_fit_epochs(time_fits: Callable[[int], dict], epochs: int) -> int:
    """Measure, extend: the epochs of a long timed fit that outlasts the short one by at
    least :data:`MIN_EXTRA_SECONDS`.

    A short fit (``SHORT_EPOCHS`` epochs) is timed once, then long fits of ``epochs`` more,
    growing in proportion to what they lacked until the measured difference reaches the
    target (at most :data:`MAX_SIZING_FITS` of them). The difference is measured, not
    predicted from the short fit: a short fit's duration includes what a fit pays once, so
    dividing it by its epochs overestimates an epoch.

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
    extra = epochs
    shorts = time_fits(SHORT_EPOCHS)
    for _ in range(MAX_SIZING_FITS):
        longs = time_fits(SHORT_EPOCHS + extra)
        gains = [longs[name] - shorts[name] for name in longs if name in shorts]
        if not gains or min(gains) >= MIN_EXTRA_SECONDS:
            break
        gained = min(gains)
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


#: The most the middle half of a cell's slopes may spread (upper over lower quartile) for
#: its median to count as a measurement.
SPREAD_BOUND = 2.0


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


#: Seconds of each look at the process's CPU time in :func:`wait_until_quiet`, and the most
#: it waits in all.
QUIET_WINDOW = 0.005
QUIET_LIMIT = 1.0


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
    is still runnable, so the wait does not end early there.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < QUIET_LIMIT:
        cpu = time.process_time()
        time.sleep(QUIET_WINDOW)
        running = _others_running()
        if running is None:
            running = time.process_time() - cpu >= QUIET_WINDOW / 10
        if not running:
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


def as_prediction(output: np.ndarray, classifier: bool) -> np.ndarray:
    """A model's output as contenders predict: values for regression (one column raveled),
    P(class 1) for binary classifiers (of one or two probability columns), the class
    probabilities of other classifiers."""
    if classifier and output.shape[1] == 2:
        return output[:, 1]
    return output.ravel() if output.ndim == 2 and output.shape[1] == 1 else output


class Unavailable(Exception):
    """A contender cannot run a cell (no CUDA, no torch, a linear-only model...)."""


class Contender(ABC):
    """One way to train a problem, with the same interface for every library.

    ``fit`` trains from the problem's initial weights and records ``loss_curve_`` (one
    value per epoch: the mean over samples of the loss of each batch before its update).
    ``continue_fit`` trains more epochs from the current weights, without rebuilding
    anything: that is what the matrix's timed fits and asv's ``time_`` benchmarks run.
    ``predict`` works before ``fit`` too and then gives the initial model's output.
    """

    name: ClassVar[str]

    def __init__(
        self,
        problem: Problem,
        batch_size: int,
        device: str = "cpu",
        shuffle: bool = True,
    ):
        reason = self.unavailable(problem, batch_size, device)
        if reason:
            raise Unavailable(reason)
        self.problem = problem
        self.batch_size = batch_size
        self.device = device
        self.shuffle = shuffle
        self.loss_curve_: list[float] = []
        self.n_steps_ = 0

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        """Why this contender cannot run that cell, or None when it can."""
        return None

    def fit(self, epochs: int) -> Contender:
        """Train ``epochs`` epochs from the problem's initial weights."""
        self.loss_curve_ = [float(v) for v in self._fit(epochs)]
        self.n_steps_ = epochs * self.problem.steps_per_epoch(self.batch_size)
        return self

    def continue_fit(self, epochs: int) -> Contender:
        """Train ``epochs`` more epochs from the current weights (call ``fit`` first)."""
        self._continue(epochs)
        self.n_steps_ += epochs * self.problem.steps_per_epoch(self.batch_size)
        return self

    def time_fit(self, epochs: int) -> float:
        """Wall time in seconds of ``continue_fit(epochs)``, what a fit pays once included."""
        start = time.perf_counter()
        self.continue_fit(epochs)
        return time.perf_counter() - start

    def runtime_counts(self) -> RuntimeCounts | None:
        """onnxruntime calls and allocations per step, for contenders that run onnxruntime."""
        return None

    @abstractmethod
    def _fit(self, epochs: int) -> list[float]:
        """Train from the initial weights; return the loss of each epoch."""

    @abstractmethod
    def _continue(self, epochs: int) -> None:
        """Train more epochs from the current weights."""

    @abstractmethod
    def predict(self, X: np.ndarray) -> np.ndarray:
        """The model's output: values for regression, P(class 1) for binary problems."""
