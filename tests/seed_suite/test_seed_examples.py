"""The examples of ``examples/seed/`` written after the seed's reference examples run to
the end (a few epochs each: about a second in all)."""

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
    # trained from random weights, the test error gets near least squares' own
    assert errors["forward/backward"] < 3 * errors["scikit-learn"] + 0.1
