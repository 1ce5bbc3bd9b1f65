"""Fitted trainers pickle, deep-copy and joblib-dump, then predict and train on unchanged."""

from __future__ import annotations

import copy
import io
import pickle

import joblib
import numpy as np
import pytest
from sklearn.model_selection import cross_validate

from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateAdamW,
    LearningRateSGD,
    LearningRateSGDNesterov,
    OrtBenchError,
)

KINDS = [
    (FullTrainer, "ort-training", LearningRateSGD),  # the on-device API has no momentum
    (FullTrainer, "portable", LearningRateSGDNesterov),
    (ForwardBackwardTrainer, "ort-training", LearningRateSGDNesterov),
    (ForwardBackwardTrainer, "portable", LearningRateSGDNesterov),
]
IDS = [f"{t.__name__}-{b}" for t, b, _ in KINDS]


def _joblib_round_trip(model):
    buffer = io.BytesIO()
    joblib.dump(model, buffer)
    buffer.seek(0)
    return joblib.load(buffer)


ROUND_TRIPS = {
    "pickle": lambda m: pickle.loads(pickle.dumps(m)),
    "deepcopy": copy.deepcopy,
    "joblib": _joblib_round_trip,
}


@pytest.mark.parametrize(("trainer", "backend", "rate"), KINDS, ids=IDS)
@pytest.mark.parametrize("how", list(ROUND_TRIPS))
def test_round_trip_predicts_and_trains_on_as_if_uninterrupted(
    trainer, backend, rate, how, regression, mlp_onnx
):
    X, y = regression
    settings = dict(learning_rate=rate(0.01), backend=backend, batch_size=16, random_state=3)
    straight = trainer(mlp_onnx, max_iter=4, **settings).fit(X, y)
    first = trainer(mlp_onnx, max_iter=2, warm_start=True, **settings).fit(X, y)
    copied = ROUND_TRIPS[how](first)
    assert "_steps" not in vars(copied)  # nothing of onnxruntime travels
    np.testing.assert_array_equal(copied.predict(X), first.predict(X))
    # two more epochs from the copy's weights, optimizer state (momentum) and shuffling
    # sequence are the last two of an uninterrupted fit: a restarted momentum, or the
    # first two epochs' batches again, would part from it
    copied.fit(X, y)
    for name, value in straight.get_state().items():
        np.testing.assert_allclose(copied.get_state()[name], value, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(copied.train_losses_, straight.train_losses_, rtol=1e-6)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_a_trainer_given_a_file_unpickles_without_it(trainer, regression, mlp_onnx, tmp_path):
    """The pickle holds the model the fit prepared: the file named by model_onnx may be
    gone where it is read, or hold another model since."""
    X, y = regression
    path = tmp_path / "model.onnx"
    path.write_bytes(mlp_onnx.SerializeToString())
    settings = dict(learning_rate=LearningRateSGD(0.01), batch_size=16, random_state=3)
    straight = trainer(mlp_onnx, max_iter=4, **settings).fit(X, y)
    first = trainer(str(path), max_iter=2, warm_start=True, **settings).fit(X, y)
    pickled = pickle.dumps(first)
    path.unlink()
    gone = pickle.loads(pickled)
    np.testing.assert_array_equal(gone.predict(X), first.predict(X))
    gone.fit(X, y)
    np.testing.assert_allclose(gone.train_losses_, straight.train_losses_, rtol=1e-6)
    path.write_bytes(b"not the model any more")
    np.testing.assert_array_equal(pickle.loads(pickled).predict(X), first.predict(X))


def test_unfitted_trainer_round_trips_unfitted(regression, mlp_onnx):
    X, _ = regression
    copied = pickle.loads(pickle.dumps(ForwardBackwardTrainer(mlp_onnx)))
    with pytest.raises(OrtBenchError, match="not fitted yet"):
        copied.predict(X)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_cross_validate_in_two_processes_returns_fitted_trainers(trainer, regression, mlp_onnx):
    X, y = regression
    model = trainer(mlp_onnx, learning_rate=LearningRateSGD(0.01), max_iter=3, random_state=0)
    result = cross_validate(model, X, y, cv=2, n_jobs=2, return_estimator=True)
    assert np.isfinite(result["test_score"]).all()
    for estimator, score in zip(result["estimator"], result["test_score"]):
        assert estimator.n_iter_ == 3
        assert -1 < score < 1
    half = len(X) // 2
    first = result["estimator"][0]  # fitted on the second half, scored on the first
    assert first.score(X[:half], y[:half]) == pytest.approx(result["test_score"][0], rel=1e-5)


@pytest.mark.training_build
def test_adamw_says_its_moments_restart_after_unpickling(regression, mlp_onnx):
    X, y = regression
    model = FullTrainer(mlp_onnx, learning_rate=LearningRateAdamW(), max_iter=1).fit(X, y)
    copied = pickle.loads(pickle.dumps(model))
    with pytest.warns(UserWarning, match="AdamW's moments stay inside onnxruntime"):
        np.testing.assert_array_equal(copied.predict(X), model.predict(X))
