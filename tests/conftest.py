"""Shared data and models: small, generated, and built once per session."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import fitted_mlp
from skl2onnx import to_onnx
from sklearn.datasets import make_regression


@pytest.fixture(scope="session")
def regression():
    X, y = make_regression(120, n_features=5, noise=0.1, bias=2, random_state=0)
    return X.astype(np.float32), (y / 50).astype(np.float32)


@pytest.fixture(scope="session")
def mlp_onnx(regression):
    X, y = regression
    return to_onnx(fitted_mlp(X, y), X[:1])
