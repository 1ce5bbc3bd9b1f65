"""Classifier graphs train with the log loss by default, through their raw scores."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from scipy.special import expit, log_softmax, softmax

from ortbench.training import NegLogLearningLoss


@pytest.mark.parametrize("function", ["sigmoid", "softmax"])
def test_stable_log_losses_match_scipy_on_large_scores(function):
    rng = np.random.default_rng(0)
    scores = (rng.normal(size=(6, 3)) * 60).astype(np.float32)  # exp(60) overflows float32
    labels = np.eye(3, dtype=np.float32)[rng.integers(0, 3, 6)]
    scale = np.full((6, 1), 1 / 6, np.float32)
    session = onnxruntime.InferenceSession(
        NegLogLearningLoss(function).build_onnx_function().SerializeToString()
    )
    feeds = {"expected": labels, "predicted": scores, "loss_scale": scale, "grad_scale": scale}
    loss, grad = session.run(None, feeds)
    s = scores.astype(np.float64)
    if function == "sigmoid":
        expected = np.sum(np.logaddexp(0, s) - labels * s, axis=1).mean()
        expected_grad = (expit(s) - labels) / 6
    else:
        expected = -np.sum(labels * log_softmax(s, axis=1), axis=1).mean()
        expected_grad = (softmax(s, axis=1) - labels) / 6
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    np.testing.assert_allclose(grad, expected_grad, atol=1e-6)
