"""The data sets benchmarks train on: generated or shipped with scikit-learn, never downloaded.

Every data set serves every task: a regression target (scaled to unit variance), binary
labels (the shipped classes when there are two, else the target above its median) and
multiclass labels (the shipped classes, or the target cut at its quintiles). Features are
standardised on the training split. The generated data set takes its size from the
caller, so that data can grow with the model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, make_regression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from ..training import OrtBenchError

#: Fraction of the rows held out for validation.
VALIDATION_FRACTION = 0.2
#: The generated data set's size when the caller does not choose one (the tutorial's).
GENERATED_SAMPLES = 1000
GENERATED_FEATURES = 100
#: The fewest rows a data set may be cut to (``n_samples``).
MIN_SAMPLES = 10
#: Classes of the multiclass labels made from a continuous target.
QUANTILE_CLASSES = 5
TASKS = ("regression", "binary", "multiclass")


def _make_regression(n_samples: int | None, n_features: int | None, seed: int):
    rows, features = n_samples or GENERATED_SAMPLES, n_features or GENERATED_FEATURES
    needed = 2 * rows * features * 8  # float64 features, and their float32 copies after
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory:
        raise OrtBenchError(
            f"make_regression of {rows} rows x {features} features needs about "
            f"{needed / 2**30:.0f} GiB, more than this machine's {memory / 2**30:.0f} GiB: "
            f"lower the batch size (generated data grow to 8 full batches of it), or "
            f"bench's --n-samples or --n-features"
        )
    return make_regression(rows, n_features=features, bias=2, random_state=seed)


def _shipped(loader):
    def load(n_samples: int | None, n_features: int | None, seed: int):
        return loader(return_X_y=True)

    return load


def _shifted_digits(n_samples: int | None, n_features: int | None, seed: int):
    """The digit images and their copies moved one pixel up, down, left and right (the
    row or column moved out comes back blank): five times the rows, so that an epoch
    holds eight batches of 256."""
    images, target = load_digits(return_X_y=True)
    images = images.reshape(-1, 8, 8)
    copies = [images]
    for axis in (1, 2):
        for step in (-1, 1):
            moved = np.roll(images, step, axis=axis)
            edge = 0 if step == 1 else -1
            if axis == 1:
                moved[:, edge, :] = 0
            else:
                moved[:, :, edge] = 0
            copies.append(moved)
    return np.concatenate(copies).reshape(-1, 64), np.tile(target, len(copies))


_LOADERS = {
    "make_regression": _make_regression,
    "diabetes": _shipped(load_diabetes),
    "breast_cancer": _shipped(load_breast_cancer),
    "digits": _shipped(load_digits),
    "digits_shifted": _shifted_digits,
}
#: Data sets whose shipped target is a class label.
_CLASSIFICATION = {"breast_cancer", "digits", "digits_shifted"}
#: Data sets generated at the size asked for.
GENERATED = {"make_regression"}

DATASETS = tuple(_LOADERS)


@dataclass(frozen=True)
class Split:
    """Training and validation rows, float32, read-only; sample weights when the data
    has them (None: every row weighs 1)."""

    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    w_train: np.ndarray | None = None
    w_val: np.ndarray | None = None


def _labels(name: str, target: np.ndarray, task: str) -> np.ndarray:
    classes = np.unique(target) if name in _CLASSIFICATION else None
    if task == "regression":
        return (target / target.std()).astype(np.float32)
    if task == "binary":
        binary = target if classes is not None and len(classes) == 2 else target > np.median(target)
        return binary.astype(np.int64)
    if classes is not None:
        return np.searchsorted(classes, target).astype(np.int64)
    cuts = np.quantile(target, np.linspace(0, 1, QUANTILE_CLASSES + 1)[1:-1])
    return np.digitize(target, cuts).astype(np.int64)


def split_rows(
    X: np.ndarray, y: np.ndarray, w: np.ndarray | None, classification: bool, seed: int
) -> Split:
    """Hold out :data:`VALIDATION_FRACTION` of the rows (stratified for class labels)."""
    arrays = [X, y] if w is None else [X, y, w]
    parts = train_test_split(
        *arrays,
        test_size=VALIDATION_FRACTION,
        random_state=seed,
        stratify=y if classification else None,
    )
    for part in parts:
        part.flags.writeable = False
    X_train, X_val, y_train, y_val, *weights = parts
    return Split(X_train, y_train, X_val, y_val, *weights)


def check_data_options(name: str, n_samples: int | None, n_features: int | None) -> None:
    """Raise a one-line error unless data set ``name`` can be loaded with these options.

    Parameters
    ----------
    name : str
        A data set name.
    n_samples, n_features : int or None
        The options of :func:`load_split`.

    Raises
    ------
    OrtBenchError
        For an unknown data set, fewer than 10 rows, or ``n_features`` below 1 or on a
        shipped data set.
    """
    if name not in _LOADERS:
        raise OrtBenchError(f"unknown dataset {name!r}: expected one of {list(DATASETS)}")
    if n_samples is not None and n_samples < MIN_SAMPLES:
        raise OrtBenchError(f"n_samples must be >= {MIN_SAMPLES}, got {n_samples}")
    if n_features is not None and name not in GENERATED:
        raise OrtBenchError(
            f"n_features applies to generated data sets ({', '.join(sorted(GENERATED))}), "
            f"not {name!r}"
        )
    if n_features is not None and n_features < 1:
        raise OrtBenchError(f"n_features must be >= 1, got {n_features}")


def load_split(
    name: str,
    task: str,
    n_samples: int | None = None,
    seed: int = 0,
    n_features: int | None = None,
) -> Split:
    """Load data set ``name`` for ``task`` (one of :data:`TASKS`) and split it.

    Parameters
    ----------
    name : str
        One of :data:`DATASETS`.
    task : str
        'regression' (float32 target), 'binary' or 'multiclass' (int64 labels).
    n_samples : int, optional
        Rows: the generated data set makes that many; a shipped one keeps that many,
        drawn at random (small runs for tests), or all it has when it has fewer.
    seed : int
        Seed of the generator, the row draw and the split.
    n_features : int, optional
        Features of the generated data set (shipped ones have their own).

    Returns
    -------
    Split
        Standardised float32 features, targets, read-only.

    Raises
    ------
    OrtBenchError
        For an unknown data set or task, fewer than 10 rows, or ``n_features`` on a
        shipped data set.
    """
    if task not in TASKS:
        raise OrtBenchError(f"unknown task {task!r}: expected one of {list(TASKS)}")
    check_data_options(name, n_samples, n_features)
    X, target = _LOADERS[name](n_samples, n_features, seed)
    if n_samples is not None and n_samples < len(X):
        rows = np.random.RandomState(seed).permutation(len(X))[:n_samples]
        X, target = X[rows], target[rows]
    y = _labels(name, target, task)
    split = split_rows(X, y, None, task != "regression", seed)
    scaler = StandardScaler().fit(split.X_train)
    X_train, X_val = (scaler.transform(X).astype(np.float32) for X in (split.X_train, split.X_val))
    for array in (X_train, X_val):
        array.flags.writeable = False
    return Split(X_train, split.y_train, X_val, split.y_val)
