"""Shared data and models: small, generated, and built once per session."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import fitted_mlp
from skl2onnx import to_onnx
from sklearn.datasets import make_regression

from ortbench.training.runtime.build import runtime_problem


@pytest.fixture(scope="session")
def regression():
    X, y = make_regression(120, n_features=5, noise=0.1, bias=2, random_state=0)
    return X.astype(np.float32), (y / 50).astype(np.float32)


@pytest.fixture(scope="session")
def mlp_onnx(regression):
    X, y = regression
    return to_onnx(fitted_mlp(X, y), X[:1])


def pytest_collection_modifyitems(config, items):
    """Skip the tests marked ``training_build``, and the cases parametrized with the
    ``'ort-training'`` backend, where onnxruntime's training build is absent (the
    environments of the ``cpu`` and ``gpu`` extras)."""
    problem = runtime_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=f"needs the training build: {problem}")
    for item in items:
        params = getattr(item, "callspec", None)
        values = params.params.values() if params is not None else ()
        needs_build = any(isinstance(v, str) and v == "ort-training" for v in values)
        if item.get_closest_marker("training_build") or needs_build:
            item.add_marker(skip)
