"""Both trainers against independent references: scikit-learn and finite differences."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import fitted_mlp, ortbench_names, sklearn_epoch
from skl2onnx import to_onnx
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import r2_score
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.preprocessing import StandardScaler

from ortbench.training import (
    ElasticLearningPenalty,
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateAdamW,
    LearningRateSGD,
    LearningRateSGDNesterov,
    NegLogLearningLoss,
    OrtBenchError,
    OrtGradientForwardBackwardOptimizer,
    OrtGradientOptimizer,
    add_loss_output,
)
from ortbench.training.losses import SquareLearningLoss

CONSTANT = dict(learning_rate="constant")


def sgd(eta0=0.01):
    return LearningRateSGD(eta0, **CONSTANT)


def numpy_mlp_loss(weights: dict, X, y) -> float:
    """0.5 * mean((p - y)^2) of a relu MLP written in numpy, in float64."""
    a = X.astype(np.float64)
    k = 0
    while f"coefficient{k or ''}" in weights:
        suffix = k or ""
        a = a @ weights[f"coefficient{suffix}"] + weights[f"intercepts{suffix}"]
        if f"coefficient{k + 1}" in weights:
            a = np.maximum(a, 0)
        k += 1
    return float(0.5 * np.mean((a.ravel() - y) ** 2))


def finite_difference_gradient(weights: dict, X, y, eps=1e-4) -> dict:
    grads = {}
    for name, value in weights.items():
        grad = np.zeros_like(value, dtype=np.float64)
        for index in np.ndindex(value.shape):
            plus = {k: v.astype(np.float64).copy() for k, v in weights.items()}
            minus = {k: v.astype(np.float64).copy() for k, v in weights.items()}
            plus[name][index] += eps
            minus[name][index] -= eps
            grad[index] = (numpy_mlp_loss(plus, X, y) - numpy_mlp_loss(minus, X, y)) / (2 * eps)
        grads[name] = grad
    return grads


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
@pytest.mark.parametrize("hidden", [(), (4,)], ids=["linear", "mlp"])
def test_one_full_batch_step_is_the_finite_difference_gradient(trainer, hidden, regression):
    X, y = regression
    X, y = X[:40], y[:40]
    onx = to_onnx(fitted_mlp(X, y, hidden=hidden), X[:1])
    eta = 0.01
    model = trainer(onx, learning_rate=sgd(eta), batch_size=len(X), max_iter=1, shuffle=False)
    before = model.initial_state()
    after = model.fit(X, y).get_state()
    expected = finite_difference_gradient(before, X, y)
    for name in before:
        got = (before[name] - after[name]) / eta
        np.testing.assert_allclose(got, expected[name], rtol=2e-3, atol=2e-4, err_msg=name)


@pytest.mark.parametrize(
    ("trainer", "learning_rate", "momentum"),
    [
        (ForwardBackwardTrainer, sgd(0.01), 0.0),
        (ForwardBackwardTrainer, LearningRateSGDNesterov(0.01, momentum=0.9, **CONSTANT), 0.9),
        (FullTrainer, sgd(0.01), 0.0),
    ],
    ids=["fwbw-sgd", "fwbw-nesterov", "full-sgd"],
)
@pytest.mark.parametrize("backend", [None, "portable"], ids=["default backend", "portable"])
@pytest.mark.parametrize("batch_size", [16, 1])
def test_one_epoch_follows_scikit_learn(
    trainer, learning_rate, momentum, backend, batch_size, regression
):
    """At batch 1 the loss's gradient is one product with the labels the loader scaled
    (where the losses are computed after the epoch, on the CPU)."""
    X, y = regression
    onx, start, end = sklearn_epoch(X, y, momentum, batch_size=batch_size)
    model = trainer(
        onx, learning_rate=learning_rate, batch_size=batch_size, max_iter=1, shuffle=False
    )
    state = model.set_params(backend=backend).fit(X, y).get_state()
    names = ortbench_names(len(start) // 2)
    # an epoch of 120 steps with momentum at batch 1 carries 8 times the rounding of 15
    rtol = 1e-5 if batch_size > 1 else 1e-4
    for name, w0, w1 in zip(names, start, end):
        expected = w1 - w0
        got = state[name] - w0.reshape(state[name].shape)
        np.testing.assert_allclose(
            got.ravel(), expected.ravel(), rtol=rtol, atol=rtol * np.abs(expected).max()
        )


@pytest.mark.parametrize("momentum", [False, True], ids=["sgd", "nesterov"])
def test_forward_backward_at_batch_1_follows_the_differentiated_loss(
    momentum, regression, mlp_onnx
):
    """The seed's squared error (gradient 2 (p - y)) at batch 1: the portable
    forward/backward trainer's loss gradient, one product with the labels the loader
    scaled, against full training's loss differentiated node by node (a zero penalty
    leaves no hand-written head), with sample weights and shuffled rows."""
    X, y = regression
    w = np.random.RandomState(4).uniform(0.2, 2.0, len(X)).astype(np.float32)
    rate = LearningRateSGDNesterov(0.002, momentum=0.9, **CONSTANT) if momentum else sgd(0.002)
    loss = SquareLearningLoss(convention="seed")
    params = dict(learning_rate=rate, batch_size=1, max_iter=3, random_state=0, backend="portable")
    fwbw = ForwardBackwardTrainer(mlp_onnx, learning_loss=loss, **params)
    full = FullTrainer(mlp_onnx, loss=loss, penalty={"coefficient": {"l2": 0.0}}, **params)
    fwbw.fit(X, y, w)
    full.fit(X, y, w)
    assert fwbw._steps._scaled and full._steps._head is None
    np.testing.assert_allclose(fwbw.train_losses_, full.train_losses_, rtol=1e-4)
    for name, value in full.get_state().items():
        np.testing.assert_allclose(fwbw.get_state()[name], value, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "backend", [pytest.param("ort-training", marks=pytest.mark.training_build), "portable"]
)
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_wide_relu_layer_follows_scikit_learn(trainer, backend, regression):
    """A Relu of 16 x 300 values takes its gradient as a mask product (see relu_gradient),
    the narrow one after it keeps the one-node form: the epoch is still scikit-learn's."""
    X, y = regression
    onx, start, end = sklearn_epoch(X, y, 0.0, hidden=(300, 4))
    model = trainer(onx, learning_rate=sgd(0.01), batch_size=16, max_iter=1, shuffle=False)
    state = model.set_params(backend=backend).fit(X, y).get_state()
    for name, w0, w1 in zip(ortbench_names(3), start, end):
        expected = w1 - w0
        got = state[name] - w0.reshape(state[name].shape)
        np.testing.assert_allclose(
            got.ravel(), expected.ravel(), rtol=1e-5, atol=1e-5 * np.abs(expected).max()
        )


#: The trainers whose rate changes every epoch with invscaling: the forward/backward
#: steps, and the full steps one run per step or per epoch (the step factor reaches their
#: graphs through the batches' gradient scales, refreshed when the rate changes).
OVER_EPOCHS = {
    "forward/backward": (ForwardBackwardTrainer, {}),
    "full": (FullTrainer, {}),
    "full, epoch loop": (FullTrainer, {"epoch_loop": True}),
}


MOMENTA = {"nesterov": (0.9, True), "classical": (0.9, False), "no momentum": (0.0, False)}


def _over_epochs_cases():
    """Each trainer, momentum and backend that runs: the epoch loop is portable only, and
    onnxruntime's on-device training has no momentum."""
    for trainer, (klass, options) in OVER_EPOCHS.items():
        for momentum, (value, _) in MOMENTA.items():
            yield pytest.param(momentum, trainer, "portable", id=f"{momentum}-{trainer}-portable")
            if not options and not (klass is FullTrainer and value):
                yield pytest.param(
                    momentum, trainer, "ort-training", marks=pytest.mark.training_build,
                    id=f"{momentum}-{trainer}-ort-training",
                )  # fmt: skip


@pytest.mark.parametrize(("momentum", "trainer", "backend"), list(_over_epochs_cases()))
def test_invscaling_follows_scikit_learn_over_epochs(momentum, trainer, backend, regression):
    """Three epochs whose rate changes every epoch, with and without momentum, against
    MLPRegressor."""

    klass, options = OVER_EPOCHS[trainer]
    momentum, nesterov = MOMENTA[momentum]
    X, y = regression
    settings = dict(
        learning_rate="invscaling", learning_rate_init=0.05, power_t=0.5, momentum=momentum,
        nesterovs_momentum=nesterov, alpha=0.0, shuffle=False, batch_size=16,
    )  # fmt: skip
    reference = fitted_mlp(X, y, **settings)
    onx = to_onnx(reference, X[:1])
    reference.set_params(warm_start=True, max_iter=3)
    reference.t_ = 0  # scikit-learn counts samples across fits: restart the schedule
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference.fit(X, y)
    schedule = dict(learning_rate="invscaling", power_t=0.5)
    if momentum:
        rate = LearningRateSGDNesterov(0.05, momentum=momentum, nesterov=nesterov, **schedule)
    else:
        rate = LearningRateSGD(0.05, **schedule)
    model = klass(
        onx, learning_rate=rate, batch_size=16, max_iter=3, shuffle=False, backend=backend,
        **options,
    )  # fmt: skip
    state = model.fit(X, y).get_state()
    names = ortbench_names(len(reference.coefs_))
    for name, expected in zip(names, reference.coefs_ + reference.intercepts_):
        np.testing.assert_allclose(state[name].ravel(), expected.ravel(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("momentum", "trainer", "backend"),
    [c for c in _over_epochs_cases() if c.values[0] == "classical"],
)
def test_shuffled_epochs_follow_scikit_learn_from_the_same_seed(
    momentum, trainer, backend, regression
):
    """Shuffled epochs (the last batch short) from the same seed and weights see the rows
    in MLPRegressor's order: every epoch after the first shuffles the previous order."""

    klass, options = OVER_EPOCHS[trainer]
    X, y = regression
    settings = dict(
        learning_rate_init=0.01, momentum=0.9, nesterovs_momentum=False, alpha=0.0,
        shuffle=True, batch_size=16, random_state=5,
    )  # fmt: skip
    reference = fitted_mlp(X, y, **settings)
    onx = to_onnx(reference, X[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference.set_params(warm_start=True, max_iter=3).fit(X, y)
    rate = LearningRateSGDNesterov(0.01, momentum=0.9, nesterov=False, **CONSTANT)
    model = klass(
        onx, learning_rate=rate, batch_size=16, max_iter=3, random_state=5, backend=backend,
        **options,
    )  # fmt: skip
    state = model.fit(X, y).get_state()
    names = ortbench_names(len(reference.coefs_))
    for name, expected in zip(names, reference.coefs_ + reference.intercepts_):
        np.testing.assert_allclose(state[name].ravel(), expected.ravel(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_warm_start_with_another_batch_size(trainer, regression, mlp_onnx):
    X, y = regression
    settings = dict(learning_rate=sgd(0.01), max_iter=1, shuffle=False)
    model = trainer(mlp_onnx, batch_size=10, warm_start=True, **settings).fit(X, y)
    middle = model.get_trained_onnx()
    after = model.set_params(batch_size=32).fit(X, y).get_state()
    # the same epoch from the saved weights by a new trainer built for batch size 32
    expected = trainer(middle, batch_size=32, **settings).fit(X, y).get_state()
    for name, value in expected.items():
        np.testing.assert_allclose(after[name], value, rtol=1e-6, atol=1e-7, err_msg=name)
    assert len(model.train_losses_) == 2


@pytest.mark.parametrize(
    ("trainer", "options"),
    [
        (FullTrainer, {}),
        (FullTrainer, {"backend": "portable", "epoch_loop": True}),
        (ForwardBackwardTrainer, {}),
    ],
    ids=["full", "full-epoch-loop", "forward-backward"],
)
def test_a_batch_larger_than_the_data_is_clipped_as_scikit_learn_does(trainer, options, regression):
    """A batch_size beyond the training rows is clipped to them with a warning, as
    scikit-learn's MLP does, and the epochs follow its trajectory."""

    X, y = regression[0][:12], regression[1][:12]
    settings = dict(learning_rate_init=0.01, momentum=0.0, alpha=0.0, shuffle=False, batch_size=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scikit-learn's own clipping warning
        reference = fitted_mlp(X, y, **settings)
        onx = to_onnx(reference, X[:1])
        reference.set_params(warm_start=True, max_iter=3).fit(X, y)
    model = trainer(onx, learning_rate=sgd(0.01), batch_size=50, max_iter=3, shuffle=False)
    model.set_params(**options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = model.fit(X, y).get_state()
    messages = [str(w.message) for w in caught if not issubclass(w.category, ConvergenceWarning)]
    assert messages == [
        f"{trainer.__name__}: batch_size=50 is larger than the 12 training rows: it is "
        "clipped to 12, as scikit-learn's MLP does"
    ]
    names = ortbench_names(len(reference.coefs_))
    for name, expected in zip(names, reference.coefs_ + reference.intercepts_):
        np.testing.assert_allclose(state[name].ravel(), expected.ravel(), rtol=1e-5, atol=1e-6)


def test_invscaling_schedule_matches_scikit_learn():
    rate = LearningRateSGD(eta0=0.1, learning_rate="invscaling", power_t=0.5).init_learning_rate()
    assert rate.value == 0.1
    assert rate.update_learning_rate(99) == pytest.approx(0.1 / 100**0.5)


@pytest.fixture(scope="module")
def breast_cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X).astype(np.float32)
    return train_test_split(X, y, test_size=0.3, random_state=0)


@pytest.mark.parametrize("zipmap", [False, True])
def test_binary_classification_matches_mlpclassifier(breast_cancer, zipmap):
    X_train, X_test, y_train, y_test = breast_cancer
    settings = dict(hidden_layer_sizes=(10,), solver="sgd", learning_rate_init=0.01)
    settings.update(momentum=0.0, alpha=0.0, batch_size=16, random_state=0)
    reference = MLPClassifier(max_iter=1, **settings).fit(X_train, y_train)
    onx = to_onnx(reference, X_train[:1], options={"zipmap": zipmap})
    reference.set_params(warm_start=True, max_iter=20, tol=0, n_iter_no_change=100)
    expected = reference.fit(X_train, y_train).score(X_test, y_test)
    fits = [
        ForwardBackwardTrainer(onx, learning_loss=NegLogLearningLoss(), learning_rate=sgd()),
        FullTrainer(onx, loss="log", learning_rate=sgd()),
    ]
    for model in fits:
        model.set_params(batch_size=16, max_iter=20, random_state=0)
        score = model.fit(X_train, y_train).score(X_test, y_test)
        assert score >= expected - 0.02, (type(model).__name__, score, expected)
        assert model.train_losses_[-1] < model.train_losses_[0]
        labels, proba = onnxruntime.InferenceSession(
            model.get_trained_onnx().SerializeToString()
        ).run(None, {"X": X_test})
        np.testing.assert_array_equal(labels, model.predict(X_test))
        assert len(proba) == len(X_test)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_the_repr_summarises_the_model(trainer, mlp_onnx):
    """A model given as bytes printed 700 characters of protobuf in the repr."""
    data = mlp_onnx.SerializeToString()
    text = repr(trainer(data, max_iter=3))
    assert f"model_onnx=<serialized model: {len(data):,} bytes>" in text and len(text) < 200
    nodes = len(mlp_onnx.graph.node)
    assert f"<ModelProto {mlp_onnx.graph.name!r}: {nodes} nodes>" in repr(trainer(mlp_onnx))


@pytest.mark.parametrize("rate", ["given", "default"])
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_grid_search_picks_a_learning_rate(trainer, rate, regression, mlp_onnx):
    """The rate's parameters are tuned as scikit-learn's nested ones, on the default rate
    too (learning_rate=None)."""
    X, y = regression
    grid = GridSearchCV(
        trainer(
            mlp_onnx, learning_rate=sgd() if rate == "given" else None, max_iter=5, random_state=0
        ),
        {"learning_rate__eta0": [1e-6, 1e-2], "batch_size": [8, 32]},
        cv=2,
    )
    grid.fit(X, y)
    assert grid.best_params_["learning_rate__eta0"] == 1e-2
    assert grid.best_estimator_.score(X, y) > 0.2  # refit on all data, 1e-6 stays near 0
    assert "ModelProto" in repr(grid.best_estimator_)
    assert trainer().learning_rate is None  # no default object was changed
    loss = "loss" if trainer is FullTrainer else "learning_loss"
    with pytest.raises(OrtBenchError, match=f"^cannot set {loss}__eps: {loss} is None"):
        trainer(mlp_onnx).set_params(**{f"{loss}__eps": 1e-3})


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_same_seed_same_result_and_warm_start(trainer, regression, mlp_onnx):
    X, y = regression
    model = trainer(mlp_onnx, learning_rate=sgd(), max_iter=3, random_state=7)
    a = model.fit(X, y).get_state()
    b = clone(model).fit(X, y).get_state()
    c = clone(model).set_params(random_state=8).fit(X, y).get_state()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert any(not np.array_equal(a[n], c[n]) for n in a)

    model.set_params(warm_start=True, max_iter=2).fit(X, y)
    assert len(model.train_losses_) == 5
    assert model.train_losses_[-1] < model.train_losses_[0]
    # n_iter_ counts the epochs of the last fit, as scikit-learn's MLP does
    reference = MLPRegressor(hidden_layer_sizes=(4,), solver="sgd", max_iter=3, warm_start=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference.fit(X, y).set_params(max_iter=2).fit(X, y)
    assert model.n_iter_ == reference.n_iter_ == 2
    assert len(model.train_losses_) == len(reference.loss_curve_) == 5


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_warm_start_continues_the_shuffles_and_a_new_seed_starts_them_again(
    trainer, regression, mlp_onnx
):
    X, y = regression
    settings = dict(learning_rate=sgd(), batch_size=16, random_state=3)
    straight = trainer(mlp_onnx, max_iter=4, **settings).fit(X, y)
    model = trainer(mlp_onnx, max_iter=2, warm_start=True, **settings).fit(X, y)
    middle = model.get_trained_onnx()
    model.fit(X, y)  # epochs 3 and 4 of the same sequence of shuffles
    np.testing.assert_allclose(model.train_losses_, straight.train_losses_, rtol=1e-6)

    model = trainer(mlp_onnx, max_iter=2, warm_start=True, **settings).fit(X, y)
    model.set_params(random_state=5).fit(X, y)
    expected = trainer(middle, max_iter=2, **{**settings, "random_state": 5}).fit(X, y)
    np.testing.assert_allclose(model.train_losses_[2:], expected.train_losses_, rtol=1e-6)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_trained_onnx_reproduces_predict(trainer, regression, mlp_onnx, tmp_path):
    X, y = regression
    model = trainer(mlp_onnx, learning_rate=sgd(), max_iter=3).fit(X, y)
    trained = model.get_trained_onnx()
    session = onnxruntime.InferenceSession(trained.SerializeToString())
    assert [o.name for o in session.get_outputs()] == [o.name for o in mlp_onnx.graph.output]
    np.testing.assert_allclose(session.run(None, {"X": X})[0].ravel(), model.predict(X), rtol=1e-6)
    untrained = onnxruntime.InferenceSession(mlp_onnx.SerializeToString())
    assert model.score(X, y) > r2_score(y, untrained.run(None, {"X": X})[0].ravel()) + 0.05
    paths = model.save_onnx_graph(tmp_path)
    assert paths
    for name, path in paths.items():
        assert onnx.load(path).graph.node, name
    assert set(model.trained_coef_) == set(model.get_state())


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_validation_losses_and_sample_weights(trainer, regression, mlp_onnx):
    X, y = regression
    model = trainer(mlp_onnx, learning_rate=sgd(), max_iter=4, validation_every=2)
    model.fit(X[:80], y[:80], X_val=X[80:], y_val=y[80:])
    assert len(model.validation_losses_) == 2
    assert model.validation_losses_[-1] < model.validation_losses_[0] * 1.5
    # zero weight on half of the data: the same fit as training without those rows
    weights = np.r_[np.ones(60), np.zeros(60)].astype(np.float32)
    ones = trainer(mlp_onnx, learning_rate=sgd(), max_iter=1, batch_size=120, shuffle=False)
    half = clone(ones).set_params(batch_size=60)
    a = ones.fit(X, y, sample_weight=weights).get_state()
    b = half.fit(X[:60], y[:60]).get_state()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6)
    # a batch whose weights are all zero changes nothing (no 0 / 0 in the loss)
    zero_batch = clone(half).fit(X, y, sample_weight=weights)
    assert np.isfinite(zero_batch.train_losses_).all()
    for name, value in zero_batch.get_state().items():
        np.testing.assert_allclose(value, b[name], rtol=1e-5, atol=1e-6)


def test_penalty_shrinks_coefficients(regression, mlp_onnx):
    X, y = regression
    plain = ForwardBackwardTrainer(mlp_onnx, learning_rate=sgd(), max_iter=5, random_state=0)
    penalised = clone(plain).set_params(learning_penalty=ElasticLearningPenalty(l1=0, l2=0.05))
    a, b = plain.fit(X, y).get_state(), penalised.fit(X, y).get_state()
    assert np.abs(b["coefficient"]).sum() < np.abs(a["coefficient"]).sum()
    assert penalised.train_losses_[0] > plain.train_losses_[0]  # the penalty is in the loss


def test_full_trainer_penalty_matches_forward_backward(regression, mlp_onnx):
    X, y = regression
    names = ["coefficient", "coefficient1", "coefficient2"]
    full = FullTrainer(
        mlp_onnx,
        learning_rate=sgd(),
        max_iter=2,
        shuffle=False,
        penalty={n: {"l1": 0.01, "l2": 0.02} for n in names},
    ).fit(X, y)
    fwbw = ForwardBackwardTrainer(
        mlp_onnx,
        learning_rate=sgd(),
        max_iter=2,
        shuffle=False,
        learning_penalty=ElasticLearningPenalty(l1=0.01, l2=0.02),
    ).fit(X, y)
    np.testing.assert_allclose(full.train_losses_, fwbw.train_losses_, rtol=1e-4)
    for name, value in full.get_state().items():
        np.testing.assert_allclose(value, fwbw.get_state()[name], rtol=1e-4, atol=1e-6)


def test_seed_classes_extend_the_trainers():
    assert issubclass(OrtGradientOptimizer, FullTrainer)
    assert issubclass(OrtGradientForwardBackwardOptimizer, ForwardBackwardTrainer)


def test_full_trainer_takes_a_model_that_already_outputs_its_loss(regression, mlp_onnx):
    X, y = regression
    settings = dict(learning_rate=sgd(), max_iter=2, shuffle=False)
    with_loss = add_loss_output(mlp_onnx)
    given = FullTrainer(with_loss, **settings).fit(X, y)
    added = FullTrainer(mlp_onnx, **settings).fit(X, y)
    np.testing.assert_allclose(given.train_losses_, added.train_losses_, rtol=1e-6)
    np.testing.assert_allclose(given.predict(X), added.predict(X), rtol=1e-5)


@pytest.mark.training_build
def test_adamw_first_step_is_a_signed_gradient_step(regression):
    X, y = regression
    X, y = X[:40], y[:40]
    onx = to_onnx(fitted_mlp(X, y, hidden=(4,)), X[:1])
    rate = LearningRateAdamW(eta0=1e-3, weight_decay=0.01)
    model = FullTrainer(onx, learning_rate=rate, batch_size=len(X), max_iter=1, shuffle=False)
    before = model.initial_state()
    after = model.fit(X, y).get_state()
    gradient = finite_difference_gradient(before, X, y)
    for name, w0 in before.items():
        # first AdamW step: m_hat = g, v_hat = g^2, so w -= lr * (g / |g| + decay * w)
        expected = w0 - 1e-3 * (np.sign(gradient[name]) + 0.01 * w0)
        clear = np.abs(gradient[name]) > 1e-3  # eps dominates tiny gradients
        np.testing.assert_allclose(after[name][clear], expected[clear], rtol=1e-4, atol=2e-6)
    model.set_params(max_iter=20).fit(X, y)
    assert model.train_losses_[-1] < model.train_losses_[0]


def test_the_readme_example_trains_quietly():
    """``python examples/train_mlp.py``, which the README offers: both trainers lower the
    loss epoch after epoch, and nothing but their two lines is printed."""
    example = Path(__file__).parents[1] / "examples" / "train_mlp.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert [line.split(" R2 ")[0].strip() for line in lines] == [
        "full training",
        "forward/backward",
    ]
    for line in lines:
        losses = [float(v) for v in re.search(r"last losses \[(.*)\]", line)[1].split()]
        assert len(losses) == 3 and losses[0] > losses[1] > losses[2] > 0, line
