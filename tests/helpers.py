"""Helpers the test modules share (fixtures live in ``conftest.py``)."""

from __future__ import annotations

import warnings

import onnxruntime
import pytest
from skl2onnx import to_onnx
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPRegressor

#: For tests of what a CPU-only onnxruntime says when CUDA is asked for.
cpu_build_only = pytest.mark.skipif(
    "CUDAExecutionProvider" in onnxruntime.get_available_providers(), reason="a GPU build"
)


def fitted_mlp(X, y, hidden=(6, 4), **kwargs) -> MLPRegressor:
    """An MLPRegressor with weights set by one SGD epoch (no convergence warning)."""
    params = dict(hidden_layer_sizes=hidden, solver="sgd", max_iter=1, random_state=0)
    params.update(kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return MLPRegressor(**params).fit(X, y)


def sklearn_epoch(X, y, momentum, hidden=(6, 4), batch_size=16):
    """Initial weights, then MLPRegressor's weights after one more epoch of SGD."""
    reference = fitted_mlp(
        X,
        y,
        hidden=hidden,
        learning_rate_init=0.01,
        momentum=momentum,
        alpha=0.0,
        shuffle=False,
        batch_size=batch_size,
    )
    onx = to_onnx(reference, X[:1])
    start = [c.copy() for c in reference.coefs_] + [b.copy() for b in reference.intercepts_]
    reference.set_params(warm_start=True).fit(X, y)
    end = reference.coefs_ + reference.intercepts_
    return onx, start, end


def ortbench_names(n_layers):
    suffixes = [str(k) if k else "" for k in range(n_layers)]
    return [f"coefficient{s}" for s in suffixes] + [f"intercepts{s}" for s in suffixes]


def weights_of(model) -> dict:
    """A trainer's weights as arrays by name: what ``get_state()`` gives, or the seed's
    forward/backward class's list of OrtValues by ``weights_`` order."""
    state = model.get_state()
    if isinstance(state, list):
        return {name: value.numpy() for name, value in zip(model.weights_, state)}
    return state


def timed(status: str) -> bool:
    """Whether a bench cell ran and was timed: "ok", or "unstable: <reason>" where a loaded
    machine spread its rounds (its times only are no measurement)."""
    return status == "ok" or status.startswith("unstable: ")


def shown_in_summary(
    summary: str, status: str, contender: str, problem: str, batch_size: int, dataset="diabetes"
) -> bool:
    """Whether ``summary.md`` shows a cpu cell where its status puts it: a timed row when
    "ok", else a row of "Cells without a measurement" that gives the status."""
    if status == "ok":
        return f"| {batch_size} | {contender} |" in summary
    row = f"| {contender} | {problem} | {dataset} | {batch_size} | cpu | {status} |"
    return row in summary
