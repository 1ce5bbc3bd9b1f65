"""The seed's named small graphs compute what their names say (numpy formulas, and
gradients checked by central finite differences of the loss they come with)."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from scipy.special import expit

from ortbench.training import OrtBenchError
from ortbench.training.seed import (
    function_onnx_graph,
    get_supported_functions,
    unreduced_onnx_loss,
)

RNG = np.random.default_rng(3)
X1 = RNG.normal(size=(8, 1)).astype(np.float32)
X2 = RNG.normal(size=(8, 1)).astype(np.float32)
W = RNG.uniform(0.5, 1.5, size=8).astype(np.float32)


def run(onx, **feeds):
    sess = onnxruntime.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def numeric_grad(loss, x2, h=1e-3):
    """d loss / d x2 by central differences, in float64."""
    grad = np.zeros_like(x2, dtype=np.float64)
    for i in range(len(x2)):
        up, down = x2.astype(np.float64), x2.astype(np.float64)
        up[i] += h
        down[i] -= h
        grad[i] = (loss(up) - loss(down)) / (2 * h)
    return grad


LOSSES = {
    "grad_loss_square_error": (lambda d: d**2, {}),
    "grad_loss_absolute_error": (np.abs, {}),
    "grad_loss_elastic_error": (
        lambda d: 0.3 * np.abs(d) + 0.7 * d**2,
        {"l1_weight": 0.3, "l2_weight": 0.7},
    ),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("weighted", [False, True])
def test_losses_and_their_gradients(name, weighted):
    term, kwargs = LOSSES[name]
    onx = function_onnx_graph(name, weight_name="weight" if weighted else None, **kwargs)
    feeds = {"X1": X1, "X2": X2}
    w = W.reshape(-1, 1) if weighted else 1.0
    if weighted:
        feeds["weight"] = W
    got = run(onx, **feeds)
    expected = (term(X1.astype(np.float64) - X2) * w).sum()
    assert got["Y"].shape == ()
    np.testing.assert_allclose(got["Y"], expected, rtol=1e-5)
    # the gradient w.r.t. the prediction, up to the seed's sign for the L1 part
    fd = numeric_grad(lambda p: (term(X1 - p) * w).sum(), X2)
    if name == "grad_loss_square_error":
        np.testing.assert_allclose(got["Y_grad"], fd, rtol=1e-3, atol=1e-3)
    l1 = {"grad_loss_absolute_error": 1.0, "grad_loss_elastic_error": 0.3}.get(name, 0)
    l2 = {"grad_loss_square_error": 1.0, "grad_loss_elastic_error": 0.7}.get(name, 0)
    d = X1 - X2
    np.testing.assert_allclose(
        got["Y_grad"], (l1 * np.sign(d) - 2 * l2 * d) * w, rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(-2 * l2 * d * w - l1 * np.sign(d) * w, fd, rtol=1e-3, atol=1e-3)
    if weighted:  # not fed, the weights default to one
        np.testing.assert_allclose(
            run(onx, X1=X1, X2=X2)["Y"], term(X1.astype(np.float64) - X2).sum(), rtol=1e-5
        )


def test_unreduced_loss_is_one_term_per_row():
    onx = function_onnx_graph("grad_loss_square_error", weight_name="weight")
    rows = unreduced_onnx_loss(onx)
    assert [n.op_type for n in rows.graph.node].count("ReduceSum") == 0
    score = run(rows, X1=X1, X2=X2, weight=W)["score"]
    np.testing.assert_allclose(score, (X1 - X2) ** 2 * W.reshape(-1, 1), rtol=1e-6)
    assert [o.name for o in rows.graph.output] == ["score"]


def test_sigmoid_log_loss_matches_scikit_learn():
    from sklearn.metrics import log_loss

    labels = (RNG.normal(size=(8, 1)) > 0).astype(np.int64)
    labels[:2] = [[0], [1]]
    got = run(function_onnx_graph("grad_sigmoid_neg_log_loss_error"), X1=labels, X2=X2)
    p = expit(X2.astype(np.float64))
    np.testing.assert_allclose(got["Y"] / 8, log_loss(labels.ravel(), p.ravel()), rtol=1e-5)
    fd = numeric_grad(lambda s: log_loss(labels.ravel(), expit(s).ravel(), normalize=False), X2)
    np.testing.assert_allclose(got["Y_grad"], fd, rtol=1e-3, atol=1e-4)


def test_steps_and_penalties():
    g = RNG.normal(size=(8, 1)).astype(np.float32)
    alpha, beta = np.array([0.3], np.float32), np.array([-0.6], np.float32)
    got = run(function_onnx_graph("axpyw"), X1=X1, X2=X2, G=g, alpha=alpha, beta=beta)
    z = alpha * X1 + beta * g
    np.testing.assert_allclose(got["Z"], z, rtol=1e-6)
    np.testing.assert_allclose(got["Y"], z + X2, rtol=1e-6)
    got = run(function_onnx_graph("axpyw2"), X1=X1, X2=X2, G=g, alpha=alpha, beta=beta)
    np.testing.assert_allclose(got["Y"], alpha * X1 + X2 + beta * z, rtol=1e-5, atol=1e-6)
    got = run(function_onnx_graph("axpy"), X1=X1, X2=X2, alpha=alpha)
    np.testing.assert_allclose(got["Y"], alpha * X1 + X2, rtol=1e-6)

    elastic = {"l1_weight": 0.2, "l2_weight": 0.4}
    got = run(function_onnx_graph("grad_penalty_elastic_error", **elastic), X=X1)
    assert got["Y"].shape == ()
    np.testing.assert_allclose(got["Y"], 0.2 * np.abs(X1).sum() + 0.4 * (X1**2).sum(), rtol=1e-5)
    fd = numeric_grad(lambda x: 0.2 * np.abs(x).sum() + 0.4 * (x**2).sum(), X1)
    np.testing.assert_allclose(got["Y_grad"], fd, rtol=1e-3, atol=1e-3)
    loss = np.array([[1.5]], np.float32)
    got = run(
        function_onnx_graph("n_penalty_elastic_error", n_tensors=2, **elastic),
        loss=loss,
        W0=X1,
        W1=X2[:3],
    )
    penalty = sum(0.2 * np.abs(x).sum() + 0.4 * (x**2).sum() for x in (X1, X2[:3]))
    np.testing.assert_allclose(got["Y"], [1.5 + penalty], rtol=1e-5)
    got = run(function_onnx_graph("update_penalty_elastic_error", l1=0.2, l2=0.4), X=X1)
    np.testing.assert_allclose(got["Y"], X1 - 0.2 * np.sign(X1) - 0.8 * X1, rtol=1e-5)


def test_unary_and_linear_graphs_and_the_catalogue():
    a = RNG.normal(size=(1, 3)).astype(np.float32)
    b = RNG.normal(size=(8, 3)).astype(np.float32)
    got = run(function_onnx_graph("linear_regression"), X=X1, A=a, B=b)
    np.testing.assert_allclose(got["Y"], X1 @ a + b, rtol=1e-6)
    np.testing.assert_array_equal(run(function_onnx_graph("copy"), X=X1)["Y"], X1)
    np.testing.assert_array_equal(run(function_onnx_graph("zero"), X=X1)["Y"], 0 * X1)
    double = function_onnx_graph("square_error", dtype=np.float64)
    x64 = X1.astype(np.float64)
    assert run(double, X1=x64, X2=x64 + 1)["Y"] == pytest.approx(8.0)
    catalogue = get_supported_functions()
    assert {"square_error", "grad_square_error", "axpyw2"} <= set(catalogue)
    assert all(isinstance(doc, str) and doc for doc in catalogue.values())


def test_an_unknown_name_or_parameter_is_one_line():
    with pytest.raises(OrtBenchError, match="unknown function 'H'"):
        function_onnx_graph("H")
    with pytest.raises(OrtBenchError, match="does not take"):
        function_onnx_graph("copy", l1=0.1)
