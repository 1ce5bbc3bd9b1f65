"""The contender interface: train a problem, report the loss curve, predict, time steps."""

from __future__ import annotations

import contextlib
import gc
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import ClassVar

import numpy as np

from ..counters import RuntimeCounts
from ..problems import Problem

#: Epochs of the short timed fit; the long one runs ``SHORT_EPOCHS + extra_epochs(...)``.
SHORT_EPOCHS = 1
#: Seconds the long timed fit should run longer than the short one, at least: a fit's fixed
#: part jumps by milliseconds now and then (a page fault, a garbage collection, the other
#: core's work), which must stay small against the extra steps it is divided by.
MIN_EXTRA_SECONDS = 0.05


def extra_epochs(short_seconds: float, epochs: int) -> int:
    """How many more epochs the long timed fit runs than the short one.

    Parameters
    ----------
    short_seconds : float
        Duration of a short timed fit (``SHORT_EPOCHS`` epochs, its fixed part included).
    epochs : int
        The fewest extra epochs (the ``--epochs`` option).

    Returns
    -------
    int
        ``epochs``, or more when ``epochs`` epochs would last less than
        :data:`MIN_EXTRA_SECONDS`. The short fit's duration per epoch includes its fixed
        part, so it overestimates an epoch and the extra epochs last at most
        ``MIN_EXTRA_SECONDS``.
    """
    return max(epochs, math.ceil(MIN_EXTRA_SECONDS * SHORT_EPOCHS / short_seconds))


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


#: Seconds of each look at the process's CPU time in :func:`wait_until_quiet`, and the most
#: it waits in all.
QUIET_WINDOW = 0.005
QUIET_LIMIT = 1.0


def wait_until_quiet() -> float:
    """Sleep until no thread of this process is running; return the seconds waited.

    After a call, BLAS and OpenMP pools keep their threads spinning for a while (how long:
    ``docs/benchmarks.md``), on cores that the next contender's fit would need. Waiting until the
    process's CPU time stops growing (under a tenth of a :data:`QUIET_WINDOW` per window,
    at most :data:`QUIET_LIMIT` in all) before the next fit starts keeps every contender's
    threads off every other contender's fits.
    """
    start = time.perf_counter()
    while time.perf_counter() - start < QUIET_LIMIT:
        cpu = time.process_time()
        time.sleep(QUIET_WINDOW)
        if time.process_time() - cpu < QUIET_WINDOW / 10:
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
