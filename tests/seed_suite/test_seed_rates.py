"""The seed namespace's learning rates: the seed's defaults and schedules, checked
against the formulas written out here, and fits that converge with them."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import weights_of
from sklearn.linear_model import LinearRegression

from ortbench.training import LearningRateSGD as SklearnStyleSGD
from ortbench.training.seed import (
    LearningRateSGD,
    LearningRateSGDNesterov,
    OrtGradientForwardBackwardOptimizer,
)


def test_seed_sgd_decays_by_inverse_scaling_from_eta0():
    rate = LearningRateSGD()
    assert rate.learning_rate == "invscaling"
    values = np.array(list(rate.loop(50)))
    t = np.arange(50)
    np.testing.assert_allclose(values, 0.01 / (t + 1) ** 0.25, rtol=1e-12)
    assert (np.diff(values) < 0).all()


def test_seed_nesterov_decays_too():
    rate = LearningRateSGDNesterov(eta0=0.1)
    assert (rate.learning_rate, rate.momentum, rate.nesterov) == ("invscaling", 0.9, True)
    values = list(rate.loop(3))
    assert values[0] == 0.1 and values[2] < values[1] < values[0]


def test_the_engines_rate_keeps_scikit_learns_constant_default():
    values = list(SklearnStyleSGD().loop(5))
    assert values == [0.01] * 5


@pytest.mark.parametrize("eta0, alpha", [(0.01, 1e-4), (0.5, 1e-2)])
def test_seed_optimal_starts_at_eta0_and_decays_as_one_over_t0_plus_t(eta0, alpha):
    values = np.array(list(LearningRateSGD(eta0, alpha=alpha, learning_rate="optimal").loop(200)))
    assert values[0] == pytest.approx(eta0, rel=1e-12)
    # eta0 * t0 / (t0 + t): its inverse is affine in t, slope 1 / (eta0 * t0)
    inverse = 1 / values
    slopes = np.diff(inverse)
    np.testing.assert_allclose(slopes, slopes[0], rtol=1e-6)
    # t0 is Bottou's heuristic with the seed's squared-error gradient 2 (1 + typw)
    typw = np.sqrt(1 / np.sqrt(alpha))
    t0 = 2 * (1 + typw) / (alpha * typw)
    assert slopes[0] == pytest.approx(1 / (eta0 * t0), rel=1e-6)


@pytest.mark.parametrize("klass", [LearningRateSGD, LearningRateSGDNesterov])
def test_unknown_schedule_is_refused_when_created(klass):
    with pytest.raises(ValueError, match="learning_rate must be one of"):
        klass(learning_rate="EXC")


def test_seed_classes_build_seed_rates_from_names_and_floats(seed_linear):
    onx, _, _ = seed_linear
    for value, klass in [("SGD", LearningRateSGD), (0.02, LearningRateSGD)]:
        model = OrtGradientForwardBackwardOptimizer(onx, ["coef", "intercept"], learning_rate=value)
        assert type(model.learning_rate) is klass
    nesterov = OrtGradientForwardBackwardOptimizer(onx, learning_rate="Nesterov")
    assert type(nesterov.learning_rate) is LearningRateSGDNesterov


def test_an_optimal_schedule_fit_converges(seed_linear):
    onx, X, y = seed_linear
    np.random.seed(0)
    model = OrtGradientForwardBackwardOptimizer(
        onx,
        ["coef", "intercept"],
        learning_rate=LearningRateSGD(0.01, learning_rate="optimal"),
        max_iter=30,
    ).fit(X, y)
    losses = model.train_losses_
    assert len(losses) == 30 and np.isfinite(losses).all()
    assert losses[-1] < losses[0] / 10
    # the trained weights approach least squares
    reference = LinearRegression().fit(X, y)
    np.testing.assert_allclose(weights_of(model)["coef"].ravel(), reference.coef_.ravel(), atol=0.1)
