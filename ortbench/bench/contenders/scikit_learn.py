"""Contenders over scikit-learn: MLPRegressor/MLPClassifier with SGD, and SGDRegressor."""

from __future__ import annotations

import contextlib
import copy
import io
import math
import re
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDRegressor

from ..problems import Problem
from .base import Contender

#: scikit-learn stops an MLP when the loss stalls this many epochs: never, here.
_NEVER = 1_000_000


def _cpu_only(device: str) -> str | None:
    return None if device == "cpu" else "scikit-learn trains on the CPU only"


def inexpressible(problem: Problem, library: str) -> str | None:
    """Why ``library`` cannot train the problem's graph as the engine does, or None.

    It can when the graph is a scikit-learn MLP (the problem has a reference model),
    every weight is trained and the loss is the MLP's own: the squared error for
    regression, the log loss for classification.
    """
    if problem.reference is None:
        return (
            f"the model is not an MLP {library} can express (MatMul and Add, or Gemm, layers "
            f"and one activation)"
        )
    if problem.weights is not None:
        return f"{library} trains every weight of the MLP, not a chosen subset"
    own = "squared_error" if problem.task == "regression" else "log"
    if problem.loss_name != own:
        return f"{library} trains this MLP with the {own} loss, not {problem.loss_name}"
    return None


class SklearnMLP(Contender):
    """``MLPRegressor``/``MLPClassifier(solver='sgd')`` continuing from the reference model."""

    name = "sklearn-mlp-sgd"
    nesterov = False

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        return inexpressible(problem, "scikit-learn") or _cpu_only(device)

    def _fit(self, epochs: int) -> list[float]:
        problem = self.problem
        self.model = copy.deepcopy(problem.reference)
        start = len(self.model.loss_curve_)
        self.model.set_params(
            warm_start=True,
            batch_size=min(self.batch_size, len(problem.data.X_train)),  # as the others clip
            learning_rate_init=problem.eta0,
            momentum=problem.momentum if self.nesterov else 0.0,
            nesterovs_momentum=True,
            shuffle=self.shuffle,
            tol=0.0,
            n_iter_no_change=_NEVER,
        )
        self._continue(epochs)
        return self.model.loss_curve_[start:]

    def _continue(self, epochs: int) -> None:
        data = self.problem.data
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            # a signal that cuts the fit: the run notices it itself (.interruption)
            warnings.filterwarnings("ignore", "Training interrupted by user", UserWarning)
            self.model.set_params(max_iter=epochs).fit(data.X_train, data.y_train, data.w_train)

    def predict(self, X: np.ndarray) -> np.ndarray:
        model = getattr(self, "model", self.problem.reference)
        if self.problem.task == "regression":
            return model.predict(X)
        proba = model.predict_proba(X)
        return proba[:, 1] if proba.shape[1] == 2 else proba


class SklearnMLPNesterov(SklearnMLP):
    """The same with momentum 0.9, Nesterov's."""

    name = "sklearn-mlp-nesterov"
    nesterov = True


_EPOCH_LOSS = re.compile(r"Avg\. loss: (\S+?),")
#: Decimals of the epoch losses SGDRegressor prints ("%f"), and the significant digits a
#: printed loss needs to be reported: one below 1e-4 is left blank (NaN), not rounded.
_PRINTED_DECIMALS, _SIGNIFICANT_DIGITS = 6, 3
_SMALLEST_READ = 10.0 ** (_SIGNIFICANT_DIGITS - 1 - _PRINTED_DECIMALS)


def _printed_losses(printout: str, weighted: bool) -> list[float]:
    """The epoch losses of SGDRegressor's verbose printout, NaN where it cannot tell them.

    Parameters
    ----------
    printout : str
        What ``SGDRegressor(verbose=1).fit`` printed.
    weighted : bool
        Whether the fit had sample weights: the printout's mean is then unweighted, not
        the weighted mean the other contenders report, and every loss is NaN.

    Returns
    -------
    list of float
        One loss per epoch; NaN for one printed with fewer than
        ``_SIGNIFICANT_DIGITS`` significant digits (below ``_SMALLEST_READ``).
    """
    values = [float(v) for v in _EPOCH_LOSS.findall(printout)]
    return [v if v >= _SMALLEST_READ and not weighted else math.nan for v in values]


class SklearnSGD(Contender):
    """``SGDRegressor``: a linear model updated one sample at a time."""

    name = "sklearn-sgd"

    @classmethod
    def unavailable(cls, problem: Problem, batch_size: int, device: str) -> str | None:
        if not (problem.is_linear and problem.task == "regression"):
            return "SGDRegressor trains linear regressions only"
        reason = inexpressible(problem, "SGDRegressor")
        if reason:
            return reason
        if problem.data.y_train.ndim != 1:
            return "SGDRegressor trains one output only"
        if batch_size != 1:
            return "SGDRegressor updates one sample at a time (batch size 1 only)"
        return _cpu_only(device)

    def _fit(self, epochs: int) -> list[float]:
        problem, data = self.problem, self.problem.data
        coefs, intercepts = problem.initial_weights()
        self.model = SGDRegressor(
            penalty=None,
            alpha=0.0,
            learning_rate="constant",
            eta0=problem.eta0,
            max_iter=epochs,
            tol=None,
            shuffle=self.shuffle,
            random_state=problem.seed,
            verbose=1,
        )
        # SGDRegressor prints each epoch's mean loss (0.5 * (p - y)^2 before each update,
        # to 6 decimals, unweighted) and keeps no loss curve: read it from there.
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            self.model.fit(
                data.X_train,
                data.y_train,
                coef_init=coefs[0].ravel(),
                intercept_init=intercepts[0],
                sample_weight=data.w_train,
            )
        self.model.set_params(verbose=0, warm_start=True)
        losses = _printed_losses(printed.getvalue(), data.w_train is not None)
        if len(losses) != epochs:
            raise RuntimeError("could not read SGDRegressor's epoch losses from its verbose output")
        return losses

    def _continue(self, epochs: int) -> None:
        data = self.problem.data
        self.model.set_params(max_iter=epochs).fit(
            data.X_train, data.y_train, sample_weight=data.w_train
        )

    def predict(self, X: np.ndarray) -> np.ndarray:
        if hasattr(self, "model"):
            return self.model.predict(X)
        coefs, intercepts = self.problem.initial_weights()
        return (X @ coefs[0] + intercepts[0]).ravel()
