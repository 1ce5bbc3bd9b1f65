"""The exceptions the seed raised for mistakes, still one-line ortbench errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import weights_of
from sklearn.exceptions import NotFittedError

from ortbench.training import (
    ConvergenceError,
    DerivativeOptions,
    FullTrainer,
    LearningRateSGD,
    OrtBenchError,
    onnx_derivative,
)
from ortbench.training.errors import NotFittedTrainerError
from ortbench.training.seed import (
    OrtGradientForwardBackwardOptimizer,
    OrtGradientOptimizer,
    add_loss_output,
)


def test_not_fitted_is_a_value_error_and_an_attribute_error(seed_linear):
    assert issubclass(NotFittedTrainerError, (NotFittedError))
    onx, _, _ = seed_linear
    model = OrtGradientForwardBackwardOptimizer(onx, ["coef", "intercept"])
    for expected in (AttributeError, ValueError, OrtBenchError):
        with pytest.raises(expected, match="not fitted"):
            model.get_state()
    # hasattr relies on AttributeError: an unfitted trainer has no state
    assert not hasattr(model, "trained_coef_")


@pytest.mark.parametrize("options", [1, 6, "FillGrad"])
def test_derivative_options_of_another_type_are_a_type_error(seed_linear, options):
    onx, _, _ = seed_linear
    with pytest.raises(TypeError, match="must be a DerivativeOptions") as caught:
        onnx_derivative(onx, weights=[], options=options)
    assert isinstance(caught.value, OrtBenchError)
    # the same value as a DerivativeOptions is accepted when it is valid
    if options == 6:
        onnx_derivative(onx, weights=[], options=DerivativeOptions(options), backend="portable")


def test_the_full_class_refuses_momentum_as_not_implemented(seed_linear):
    onx, _, _ = seed_linear
    with pytest.raises(NotImplementedError, match="plain SGD only") as caught:
        OrtGradientOptimizer(add_loss_output(onx), ["coef", "intercept"], learning_rate="Nesterov")
    assert isinstance(caught.value, OrtBenchError)


@pytest.mark.training_build
def test_use_numpy_is_accepted_and_changes_nothing(seed_linear):
    onx, X, y = seed_linear
    states = []
    for use_numpy in (False, True):
        np.random.seed(1)
        model = OrtGradientOptimizer(add_loss_output(onx), ["coef", "intercept"], max_iter=3)
        model.fit(X, y, use_numpy=use_numpy)
        states.append(weights_of(model))
    for name in ("coef", "intercept"):
        np.testing.assert_array_equal(states[0][name], states[1][name])


def test_the_seed_keeps_every_epoch_whose_loss_is_finite(seed_linear):
    """The seed stopped on a loss that is not finite only: at a huge rate, the epochs
    before keep their (huge) losses; FullTrainer stops as soon as the weights overflow."""
    onx, _, _ = seed_linear
    X = np.arange(60, dtype=np.float32).reshape(-1, 3)
    y = np.arange(20, dtype=np.float32)
    seed = OrtGradientOptimizer(
        add_loss_output(onx), ["coef", "intercept"], learning_rate=1e9, warm_start=True
    )
    with pytest.raises(ConvergenceError, match=r"the loss is (inf|nan)"):
        seed.fit(X, y.reshape(-1, 1))
    assert len(seed.train_losses_) >= 1 and np.isfinite(seed.train_losses_).all()
    trainer = FullTrainer(onx, learning_rate=LearningRateSGD(1e9))
    with pytest.raises(ConvergenceError, match="overflow float32"):
        trainer.fit(X, y)
    assert trainer.train_losses_ == []
