"""The seed's classes take a float or a name for their learning rate, loss and penalty, and
a fraction for ``validation_every``, through ``set_params`` as through their constructor:
scikit-learn's ``clone`` and model selection set them so."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from skl2onnx import to_onnx
from sklearn.base import clone
from sklearn.datasets import make_regression
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.neural_network import MLPRegressor

from ortbench.training.seed import OrtGradientForwardBackwardOptimizer, OrtGradientOptimizer


@pytest.fixture(scope="module")
def data():
    X, y = make_regression(40, n_features=4, random_state=0)
    X, y = X.astype(np.float32), (y / 100).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPRegressor(hidden_layer_sizes=(6,), solver="sgd", max_iter=1, random_state=0)
        mlp.fit(X, y)
    return X, y, to_onnx(mlp, X[:1])


def forward_backward(onx, **params):
    return OrtGradientForwardBackwardOptimizer(onx, max_iter=2, batch_size=8, **params)


def full(onx, **params):
    from ortbench.training import add_loss_output

    weights = OrtGradientForwardBackwardOptimizer(onx).weights_to_train
    return OrtGradientOptimizer(add_loss_output(onx), weights, max_iter=2, batch_size=8, **params)


GRIDS = [
    {"learning_rate": [1e-2, 1e-3]},
    {"learning_rate": ["SGD", "Nesterov"]},
    {"learning_loss": ["square_error", "absolute_error"]},
    {"learning_penalty": ["", "elastic"]},
    {"validation_every": [0.5, 1]},
]


@pytest.mark.parametrize("grid", GRIDS, ids=lambda g: next(iter(g)))
def test_grid_search_over_each_form(data, grid):
    X, y, onx = data
    search = GridSearchCV(
        forward_backward(onx, learning_rate=1e-3), grid, cv=2, error_score="raise"
    )
    search.fit(X, y)
    assert set(search.cv_results_["params"][0]) == set(grid)


@pytest.mark.parametrize("make", [forward_backward, full], ids=["forward_backward", "full"])
def test_set_params_takes_what_the_constructor_takes(data, make):
    """``set_params(learning_rate=1e-3)`` then fit: the losses of the constructor given
    1e-3 (the fit refused a float before); a clone keeps the parameters."""
    X, y, onx = data
    np.random.seed(0)  # the seed's classes draw their starting weights
    given = make(onx, learning_rate=1e-3).fit(X, y)
    np.random.seed(0)
    model = make(onx).set_params(learning_rate=1e-3, validation_every=0.5)
    assert model.validation_every == given.validation_every == 1
    np.testing.assert_array_equal(model.fit(X, y).train_losses_, given.train_losses_)
    again = clone(model)
    assert repr(again.get_params()) == repr(model.get_params())
