"""The examples of ``examples/seed/`` written after the seed's reference examples run to
the end (a few epochs each: about two seconds in all, after the imports)."""

from __future__ import annotations

import os
import runpy
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "seed")


def test_linear_regression_example_approaches_least_squares(monkeypatch):
    monkeypatch.setenv("SEED_MAX_ITER", "40")
    monkeypatch.syspath_prepend(EXAMPLES)
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        done = runpy.run_path(os.path.join(EXAMPLES, "orttraining_linear_regression.py"))
    for name, curve in done["curves"].items():
        assert len(curve) == 40 and curve[-1] < curve[0] / 10, name
    errors = done["errors"]
    # trained from random weights, the test error gets near least squares' own; the full
    # class's where the training build runs it
    trained = ["forward/backward", *(["full"] if "full" in done["curves"] else [])]
    assert set(errors) == {"scikit-learn", *trained}
    for name in trained:
        assert errors[name] < 3 * errors["scikit-learn"] + 0.1, name


def _run(name, monkeypatch, tmp_path, max_iter):
    """Runs one example with ``max_iter`` epochs, its files written under ``tmp_path``."""
    monkeypatch.setenv("SEED_MAX_ITER", str(max_iter))
    monkeypatch.setenv("SEED_OUT", str(tmp_path))
    monkeypatch.syspath_prepend(EXAMPLES)
    return runpy.run_path(os.path.join(EXAMPLES, name))


def test_neural_network_example_trains_three_ways(monkeypatch, tmp_path):
    done = _run("orttraining_nn.py", monkeypatch, tmp_path, 15)
    for name, curve in done["curves"].items():
        assert len(curve) == 15 and curve[-1] < curve[0], name
    errors = done["errors"]
    for name in done["trained"]:
        # trained from random weights, each ONNX copy beats predicting the mean
        assert errors[name] < errors["predict the mean"], name
    assert (tmp_path / "orttraining_nn.png").stat().st_size > 0
    for path in done["graphs"].values():
        assert os.path.getsize(path) > 0 and path.startswith(str(tmp_path))


def test_benchmark_example_times_every_trainer_and_batch_size(monkeypatch, tmp_path):
    done = _run("orttraining_benchmark.py", monkeypatch, tmp_path, 3)
    table = done["table"]
    assert set(table["batch_size"]) == set(done["BATCH_SIZES"])
    assert (table["s/epoch"] > 0).all() and np.isfinite(table["last loss"]).all()
    assert (tmp_path / "orttraining_benchmark.png").stat().st_size > 0
    if "full" in set(table["trainer"]):
        # same first weights, same seed loss, same steps: both classes end at one loss
        loss = table.set_index(["trainer", "batch_size"])["last loss"]
        for batch_size in done["BATCH_SIZES"]:
            np.testing.assert_allclose(
                loss["full", batch_size], loss["forward/backward", batch_size], rtol=1e-3
            )


def test_classification_example_beats_the_majority_class(monkeypatch, tmp_path):
    done = _run("orttraining_classification.py", monkeypatch, tmp_path, 10)
    curve = done["trainer"].train_losses_
    assert len(curve) == 10 and curve[-1] < curve[0]
    accuracy = done["accuracy"]
    assert accuracy["forward/backward, log loss"] > accuracy["majority class"] + 0.2
    assert (tmp_path / "orttraining_classification.png").stat().st_size > 0
