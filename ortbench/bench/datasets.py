"""The data sets benchmarks train on: generated or shipped with scikit-learn, never downloaded.

Every data set serves both tasks: a regression target (scaled to unit variance) and binary
labels (the shipped classes, or the regression target above its median). Features are
standardised on the training split.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, make_regression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from ..training import OrtBenchError

#: Fraction of the rows held out for validation.
VALIDATION_FRACTION = 0.2


def _make_regression(seed: int, n_samples: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    # the tutorial's data set: 1,000 rows, more when more are asked for
    return make_regression(max(1000, n_samples or 0), n_features=100, bias=2, random_state=seed)


def _diabetes(seed: int) -> tuple[np.ndarray, np.ndarray]:
    return load_diabetes(return_X_y=True)


def _breast_cancer(seed: int) -> tuple[np.ndarray, np.ndarray]:
    return load_breast_cancer(return_X_y=True)


_LOADERS = {
    "make_regression": _make_regression,
    "diabetes": _diabetes,
    "breast_cancer": _breast_cancer,
}
#: Data sets whose shipped target is a class label.
_CLASSIFICATION = {"breast_cancer"}

DATASETS = tuple(_LOADERS)
#: Generated data sets: they grow to the ``n_samples`` asked for.
GENERATED = ("make_regression",)


@dataclass(frozen=True)
class Split:
    """Training and validation rows, float32, read-only."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray


def load_split(name: str, task: str, n_samples: int | None = None, seed: int = 0) -> Split:
    """Load data set ``name`` for ``task`` ('regression' or 'binary') and split it.

    ``n_samples`` keeps that many rows (drawn at random) before splitting: small runs for
    tests; generated data sets make that many when they have fewer. Regression targets
    are float32, binary labels int64.
    """
    if name not in _LOADERS:
        raise OrtBenchError(f"unknown dataset {name!r}: expected one of {list(DATASETS)}")
    X, target = _LOADERS[name](seed, n_samples) if name in GENERATED else _LOADERS[name](seed)
    if n_samples is not None:
        if n_samples < 10:
            raise OrtBenchError(f"n_samples must be >= 10, got {n_samples}")
        rows = np.random.RandomState(seed).permutation(len(X))[:n_samples]
        X, target = X[rows], target[rows]
    if task == "binary":
        y = target if name in _CLASSIFICATION else target > np.median(target)
        y = y.astype(np.int64)
    else:
        y = (target / target.std()).astype(np.float32)
    stratify = y if task == "binary" else None
    X_train, X_val, y_train, y_val = train_test_split(
        X, y, test_size=VALIDATION_FRACTION, random_state=seed, stratify=stratify
    )
    scaler = StandardScaler().fit(X_train)
    arrays = [
        scaler.transform(X_train).astype(np.float32),
        y_train,
        scaler.transform(X_val).astype(np.float32),
        y_val,
    ]
    for array in arrays:
        array.flags.writeable = False
    return Split(*arrays)
