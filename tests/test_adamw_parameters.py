"""LearningRateAdamW's hyper-parameters: checked at fit with one-line errors on both
FullTrainer backends, integers used as floats, and the update its docstring writes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from sklearn.base import clone

from ortbench.training import FullTrainer, LearningRateAdamW, OrtBenchError

TRAINING = pytest.mark.training_build
BACKENDS = [pytest.param("ort-training", marks=TRAINING), "portable"]

N_ROWS, N_FEATURES = 16, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(0)
    X = rng.randn(N_ROWS, N_FEATURES).astype(np.float32)
    y = (X @ np.array([1.0, -2.0, 0.5]) + 0.3).astype(np.float32)
    return X, y


@pytest.fixture(scope="module")
def initial():
    rng = np.random.RandomState(1)
    return {
        "W": (rng.randn(N_FEATURES, 1) * 0.1).astype(np.float32),
        "B": np.array([0.05], dtype=np.float32),
    }


@pytest.fixture(scope="module")
def linear_onnx(initial):
    """variable = X @ W + B, the weights W and B as initializers."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["XW"]),
            helper.make_node("Add", ["XW", "B"], ["variable"]),
        ],
        "linear",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, N_FEATURES])],
        [helper.make_tensor_value_info("variable", TensorProto.FLOAT, [None, 1])],
        [numpy_helper.from_array(v, name) for name, v in initial.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def full_batch(model, rate, backend="ort-training", max_iter=1):
    return FullTrainer(
        model,
        learning_rate=rate,
        batch_size=N_ROWS,
        max_iter=max_iter,
        shuffle=False,
        backend=backend,
    )


BAD = [
    ("beta1", 1, "beta1 must be in [0, 1), got 1"),
    ("beta1", 1.5, "beta1 must be in [0, 1), got 1.5"),
    ("beta1", -0.1, "beta1 must be in [0, 1), got -0.1"),
    ("beta1", True, "beta1 must be in [0, 1), got True"),
    ("beta2", -1, "beta2 must be in [0, 1), got -1"),
    ("beta2", 1.0, "beta2 must be in [0, 1), got 1.0"),
    ("beta2", float("nan"), "beta2 must be in [0, 1), got nan"),
    ("beta2", "0.9", "beta2 must be in [0, 1), got '0.9'"),
    ("epsilon", 0, "epsilon must be a finite number > 0, got 0"),
    ("epsilon", -1, "epsilon must be a finite number > 0, got -1"),
    ("epsilon", float("inf"), "epsilon must be a finite number > 0, got inf"),
    ("epsilon", False, "epsilon must be a finite number > 0, got False"),
    ("weight_decay", -1, "weight_decay must be a finite number >= 0, got -1"),
    ("weight_decay", float("nan"), "weight_decay must be a finite number >= 0, got nan"),
    ("weight_decay", None, "weight_decay must be a finite number >= 0, got None"),
    ("eta0", 0, "eta0 must be a finite number > 0, got 0"),
    ("eta0", True, "eta0 must be a finite number > 0, got True"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("param", "value", "message"), BAD, ids=[f"{p}={v!r}" for p, v, _ in BAD])
def test_bad_value_is_one_line_error(backend, param, value, message, data, linear_onnx):
    """The error names the parameter, the value and the range, in one line, before
    onnxruntime (whose raw RuntimeError said 'Mismatched attribute type') sees it."""
    X, y = data
    rate = LearningRateAdamW(**{"eta0": 0.01, param: value})
    with pytest.raises(OrtBenchError) as info:
        full_batch(linear_onnx, rate, backend).fit(X, y)
    text = str(info.value)
    assert text == f"LearningRateAdamW: {message}"
    assert "\n" not in text and "onnxruntime" not in text.lower()


def test_values_are_kept_as_given_and_checked_at_fit(data, linear_onnx):
    """As scikit-learn's estimators do: construction, clone and set_params keep the value
    given; the fit refuses it."""
    X, y = data
    rate = LearningRateAdamW(beta1=1.5)
    assert clone(rate).get_params()["beta1"] == 1.5
    model = full_batch(linear_onnx, LearningRateAdamW(weight_decay=0), "portable")
    model = clone(model).set_params(learning_rate__weight_decay=-1)
    assert model.learning_rate.weight_decay == -1
    with pytest.raises(OrtBenchError, match=r"weight_decay must be a finite number >= 0"):
        model.fit(X, y)


@TRAINING
@pytest.mark.parametrize(
    "as_ints",
    [dict(weight_decay=0), dict(beta1=0, beta2=0, epsilon=1, weight_decay=1)],
    ids=["weight_decay=0", "all-ints"],
)
def test_integers_train_as_floats(as_ints, data, linear_onnx):
    """``weight_decay=0`` trains, exactly as ``weight_decay=0.0`` does; the estimator
    keeps the int it was given, its fitted copy the float onnxruntime reads."""
    X, y = data
    as_floats = {k: float(v) for k, v in as_ints.items()}
    fits = []
    for params in (as_ints, as_floats):
        model = full_batch(linear_onnx, LearningRateAdamW(0.01, **params), max_iter=3)
        fits.append(model.fit(X, y))
    ints, floats = fits
    assert ints.train_losses_ == floats.train_losses_
    assert len(ints.train_losses_) == 3
    for name, value in floats.get_state().items():
        np.testing.assert_array_equal(ints.get_state()[name], value)
    for name, value in as_ints.items():
        assert type(ints.learning_rate.get_params()[name]) is int
        assert type(ints.learning_rate_.get_params()[name]) is float
        assert ints.learning_rate_.get_params()[name] == value


def numpy_adamw(X, y, initial, steps, lr, beta1, beta2, epsilon, weight_decay, like_torch):
    """Full-batch steps on variable = X @ W + B with the loss 0.5 * mean((p - y)^2), in
    float64: the update LearningRateAdamW's docstring writes, or torch.optim.AdamW's."""
    w = {k: v.astype(np.float64) for k, v in initial.items()}
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    X = X.astype(np.float64)
    for t in range(1, steps + 1):
        residual = (X @ w["W"] + w["B"]).ravel() - y
        gradient = {"W": X.T @ residual[:, None] / len(X), "B": residual.mean(keepdims=True)}
        for k, g in gradient.items():
            m[k] = beta1 * m[k] + (1 - beta1) * g
            v[k] = beta2 * v[k] + (1 - beta2) * g**2
            m_hat, v_hat = m[k] / (1 - beta1**t), v[k] / (1 - beta2**t)
            if like_torch:
                w[k] = w[k] * (1 - lr * weight_decay) - lr * m_hat / (np.sqrt(v_hat) + epsilon)
            else:
                corrected = epsilon / np.sqrt(1 - beta2**t)
                w[k] = (1 - lr * weight_decay) * (w[k] - lr * m_hat / (np.sqrt(v_hat) + corrected))
    return w


@TRAINING
@pytest.mark.parametrize(
    "params",
    [
        dict(beta1=0.8, beta2=0.9, epsilon=0.1, weight_decay=0.3),
        dict(beta1=0, beta2=0, epsilon=1, weight_decay=1),
    ],
    ids=["floats", "ints"],
)
@pytest.mark.parametrize("steps", [1, 2])
def test_update_is_the_documented_formula(steps, params, data, initial, linear_onnx):
    """The on-device AdamW: epsilon added before the bias correction, the weight decayed
    after the step; torch.optim.AdamW's order is measurably different."""
    X, y = data
    lr = 0.05
    rate = LearningRateAdamW(lr, **params)
    state = full_batch(linear_onnx, rate, max_iter=steps).fit(X, y).get_state()
    documented = numpy_adamw(X, y, initial, steps, lr, **params, like_torch=False)
    torch_like = numpy_adamw(X, y, initial, steps, lr, **params, like_torch=True)
    for name, expected in documented.items():
        np.testing.assert_allclose(state[name], expected, rtol=1e-5, atol=1e-6)
    assert max(np.abs(state[k] - torch_like[k]).max() for k in state) > 1e-3
    if steps == 1:
        # the docstring's closed form of the first step: w - lr * g / (|g| + eps / sqrt(1 -
        # beta2)), then decayed
        Xd = X.astype(np.float64)
        residual = (Xd @ initial["W"] + initial["B"]).ravel() - y
        gradient = {"W": Xd.T @ residual[:, None] / len(X), "B": residual.mean(keepdims=True)}
        eps = params["epsilon"] / np.sqrt(1 - params["beta2"])
        for name, g in gradient.items():
            first = initial[name] - lr * g / (np.abs(g) + eps)
            expected = (1 - lr * params["weight_decay"]) * first
            np.testing.assert_allclose(state[name], expected, rtol=1e-5, atol=1e-6)
