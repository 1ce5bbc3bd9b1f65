"""The contender interface: train a problem, report the loss curve, predict, time steps."""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ..counters import RuntimeCounts
from ..problems import Problem


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

    def session_threads(self) -> float:
        """The intra-op threads the fitted contender's onnxruntime sessions run on (0:
        onnxruntime's pool), NaN for the other libraries."""
        return math.nan

    @abstractmethod
    def _fit(self, epochs: int) -> list[float]:
        """Train from the initial weights; return the loss of each epoch."""

    @abstractmethod
    def _continue(self, epochs: int) -> None:
        """Train more epochs from the current weights."""

    @abstractmethod
    def predict(self, X: np.ndarray) -> np.ndarray:
        """The model's output: values for regression, P(class 1) for binary problems."""
