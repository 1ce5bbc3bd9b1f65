"""The seed's forward/backward wrapper, ``OrtGradientForwardBackward``: names, forward
against scikit-learn's predictions, backward against closed-form gradients and finite
differences; and the seed's rewrite of ``Reciprocal``."""

from __future__ import annotations

import logging
import pickle

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression

from ortbench.training import OrtBenchError
from ortbench.training.runtime import capi
from ortbench.training.runtime.devices import ort_device
from ortbench.training.seed import (
    LOGGER,
    OrtGradientForwardBackward,
    _rewrite_op_no_grad,
    rewrite_op_no_grad,
)

pytestmark = pytest.mark.training_build


def _cpu_values(arrays) -> list:
    return [capi.OrtValue.ortvalue_from_numpy(a, ort_device("cpu")) for a in arrays]


@pytest.fixture
def linear(seed_linear):
    """(model, X, coef, intercept) with weights apart from the model's zeros."""
    onx, X, _ = seed_linear
    rng = np.random.default_rng(1)
    coef = rng.normal(size=(3, 1)).astype(np.float32)
    intercept = np.array([0.7], np.float32)
    return onx, X, coef, intercept


def test_names_follow_the_seed(linear):
    onx = linear[0]
    passes = OrtGradientForwardBackward(onx).cls_type_
    assert passes._input_names == ["X"]
    assert passes._output_names == ["variable"]
    assert passes._weights_to_train == ["coef", "intercept"]
    assert passes._grad_input_names == passes._onx_inp == ["X", "coef", "intercept"]
    assert passes._bw_fetches_names == ["X_grad", "coef_grad", "intercept_grad"]
    assert passes._onx_out == passes._bw_fetches_names
    assert [i.name for i in passes._sess_eval.get_inputs()] == ["X", "coef", "intercept"]
    assert repr(OrtGradientForwardBackward(onx)) == "OrtGradientForwardBackward(...)"


@pytest.mark.parametrize("form", ["numpy", "ortvalues", "vector"])
def test_forward_gives_the_prediction_and_backward_the_gradients(linear, form):
    onx, X, coef, intercept = linear
    inst = OrtGradientForwardBackward(onx).new_instance()
    arrays = [X, coef, intercept]
    feeds = {
        "numpy": arrays,
        "ortvalues": _cpu_values(arrays),
        "vector": capi.value_vector(_cpu_values(arrays)),
    }[form]
    # a prediction near zero is a difference of terms near 1, whose float32 rounding
    # differs between the CPUs' kernels: the tolerance needs an absolute part
    expected = X @ coef + intercept
    evaluated = inst.forward(feeds)
    np.testing.assert_allclose(evaluated[0].numpy(), expected, rtol=1e-5, atol=1e-6)
    trained = inst.forward(feeds, training=True)
    np.testing.assert_allclose(trained[0].numpy(), expected, rtol=1e-5, atol=1e-6)

    upstream = np.random.default_rng(2).normal(size=expected.shape).astype(np.float32)
    grads = [g.numpy() for g in inst.backward([upstream])]
    np.testing.assert_allclose(grads[0], upstream @ coef.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads[1], X.T @ upstream, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[2], upstream.sum(axis=0), rtol=1e-4, atol=1e-5)


def test_the_batch_size_may_change_and_a_flat_gradient_is_read_in_the_outputs_shape(linear):
    onx, X, coef, intercept = linear
    inst = OrtGradientForwardBackward(onx).new_instance()
    for rows in (1, 25):
        inst.forward([X[:rows], coef, intercept], training=True)
        upstream = np.arange(rows, dtype=np.float32).reshape(rows, 1) + 1
        grads = inst.backward([upstream.reshape(1, -1)])
        np.testing.assert_allclose(grads[1].numpy(), X[:rows].T @ upstream, rtol=1e-4, atol=1e-5)


def test_backward_refuses_what_it_cannot_read(linear):
    onx, X, coef, intercept = linear
    inst = OrtGradientForwardBackward(onx).new_instance()
    with pytest.raises(OrtBenchError, match="forward"):
        inst.backward([np.ones((60, 1), np.float32)])
    inst.forward([X, coef, intercept], training=True)
    with pytest.raises(OrtBenchError, match=r"shaped \[60, 1\] has shape \[2, 7\]"):
        inst.backward([np.ones((2, 7), np.float32)])
    with pytest.raises(OrtBenchError, match="forward takes 3 values"):
        inst.forward([X, coef])


def test_logistic_regression_gradient_matches_finite_differences():
    X, y = make_classification(
        60, n_features=5, n_classes=3, n_informative=3, n_redundant=0, random_state=0
    )
    X = X.astype(np.float32)
    model = LogisticRegression().fit(X, y)
    coef, intercept = model.coef_.T.astype(np.float32), model.intercept_.astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "coef"], ["scores"]),
            helper.make_node("Add", ["scores", "intercept"], ["raw"]),
            helper.make_node("Softmax", ["raw"], ["probabilities"], axis=1),
        ],
        "logistic",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 5])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 3])],
        [numpy_helper.from_array(coef, "coef"), numpy_helper.from_array(intercept, "intercept")],
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    wrapper = OrtGradientForwardBackward(onx)
    inst = wrapper.new_instance()
    rows = X[:4]
    out = inst.forward([rows, coef, intercept], training=True)
    np.testing.assert_allclose(out[0].numpy(), model.predict_proba(rows), rtol=1e-4, atol=1e-6)
    upstream = np.random.default_rng(3).normal(size=(4, 3)).astype(np.float32)
    grads = [g.numpy() for g in inst.backward([upstream])]
    feeds = {"X": rows.astype(np.float64), "coef": coef.astype(np.float64)}
    feeds["intercept"] = intercept.astype(np.float64)

    def objective(values):  # float64 numpy: an independent reference
        raw = values["X"] @ values["coef"] + values["intercept"]
        proba = np.exp(raw - raw.max(axis=1, keepdims=True))
        return float((proba / proba.sum(axis=1, keepdims=True) * upstream).sum())

    for k, name in enumerate(wrapper.cls_type_._grad_input_names):
        numeric = np.zeros_like(feeds[name])
        for index in np.ndindex(feeds[name].shape):
            plus, minus = dict(feeds), dict(feeds)
            plus[name], minus[name] = feeds[name].copy(), feeds[name].copy()
            plus[name][index] += 1e-6
            minus[name][index] -= 1e-6
            numeric[index] = (objective(plus) - objective(minus)) / 2e-6
        np.testing.assert_allclose(grads[k], numeric, rtol=1e-3, atol=1e-5, err_msg=name)


def test_pickling_rebuilds_the_passes(linear):
    onx, X, coef, intercept = linear
    restored = pickle.loads(pickle.dumps(OrtGradientForwardBackward(onx)))
    got = restored.new_instance().forward([X, coef, intercept])
    np.testing.assert_allclose(got[0].numpy(), X @ coef + intercept, rtol=1e-5, atol=1e-6)


def test_providers_and_weights_are_checked_and_logging_names_the_weights(linear, caplog):
    onx = linear[0]
    with pytest.raises(ValueError, match="providers"):
        OrtGradientForwardBackward(onx, providers=["NONE"])
    with pytest.raises(ValueError, match="'bias'"):
        OrtGradientForwardBackward(onx, weights_to_train=["coef", "bias"])
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        OrtGradientForwardBackward(onx, enable_logging=True)
    assert "[OrtGradientForwardBackward]" in caplog.text
    assert "weights_to_train=['coef', 'intercept']" in caplog.text


def test_the_reciprocal_rewrite_computes_the_same_values():
    assert _rewrite_op_no_grad is rewrite_op_no_grad
    graph = helper.make_graph(
        [helper.make_node("Reciprocal", ["X"], ["Y"])],
        "reciprocal",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, [None, 2])],
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    rewritten = rewrite_op_no_grad(onx)
    assert [n.op_type for n in rewritten.graph.node] == ["Div"]
    assert [n.op_type for n in onx.graph.node] == ["Reciprocal"]  # the input is left alone
    X = np.array([[2.0, -4.0], [0.5, 8.0]])
    sess = onnxruntime.InferenceSession(
        rewritten.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_array_equal(sess.run(None, {"X": X})[0], 1 / X)
