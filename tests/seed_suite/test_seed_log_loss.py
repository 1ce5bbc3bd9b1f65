"""The seed's binary log loss: ``add_loss_output(onx, 'log')`` from the seed namespace reads
int64 labels, keeps the model's element type, frees the name ``label``, and the seed's
full class trains on it."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortbench.training import OrtBenchError
from ortbench.training.seed import LearningRateSGD, OrtGradientOptimizer, add_loss_output

pytestmark = pytest.mark.training_build


def _seed_log_loss(y, p1, eps, weight=None):
    """The seed's loss in numpy: clipped, rows scaled to sum to 1, mean over rows."""
    p = np.clip(np.stack([1 - p1, p1], axis=1), eps, 1 - eps)
    p = p / p.sum(axis=1, keepdims=True)
    rows = -np.log(p[np.arange(len(y)), y])
    return (rows if weight is None else rows * weight).mean()


def _run(model, feeds):
    sess = onnxruntime.InferenceSession(model.SerializeToString())
    return sess.run(["loss"], feeds)[0]


@pytest.mark.parametrize("eps", [1e-6, 0.2, -5.0])
def test_the_log_loss_of_a_double_model_is_the_seeds(eps):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "identity",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, [None, 2])],
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    p1 = np.array([0.0, 0.0, 0.2, 0.5, 0.8, 1.0, 0.9])
    y = np.array([0, 1, 0, 1, 1, 1, 0])
    w = np.linspace(0.5, 2.0, len(y))
    X = np.stack([1 - p1, p1], axis=1)
    model = add_loss_output(onx, "log", eps=eps)
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    label = next(i for i in model.graph.input if i.name == "label")
    assert label.type.tensor_type.elem_type == TensorProto.INT64
    loss = _run(model, {"X": X, "label": y.reshape(-1, 1)})
    assert loss.shape == (1, 1) and loss.dtype == np.float64
    if eps > 0:
        np.testing.assert_allclose(loss[0, 0], _seed_log_loss(y, p1, eps), rtol=1e-12)
    else:  # no clipping: log(0) makes the loss NaN or infinite, as the seed's did
        assert not np.isfinite(loss[0, 0])
    with_weight = onnx.ModelProto()
    with_weight.CopyFrom(onx)
    with_weight.graph.initializer.append(numpy_helper.from_array(np.ones(2, np.float32), "w"))
    with pytest.raises(OrtBenchError, match="holds float64 probabilities"):
        add_loss_output(with_weight, "log", penalty={"w": 0.1})
    weighted = add_loss_output(onx, "log", eps=0.1, weight_name="weight")
    loss = _run(weighted, {"X": X, "label": y.reshape(-1, 1), "weight": w})
    np.testing.assert_allclose(loss[0, 0], _seed_log_loss(y, p1, 0.1, w), rtol=1e-12)


def _binary_classifier(coef, intercept):
    """A logistic model with a skl2onnx classifier's outputs: ``label``, then
    ``probabilities`` (two columns)."""
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "coef"], ["product"]),
            helper.make_node("Add", ["product", "intercept"], ["score"]),
            helper.make_node("Sigmoid", ["score"], ["p1"]),
            helper.make_node("Sub", ["one", "p1"], ["p0"]),
            helper.make_node("Concat", ["p0", "p1"], ["probabilities"], axis=1),
            helper.make_node("ArgMax", ["probabilities"], ["label"], axis=1, keepdims=0),
        ],
        "classifier",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, coef.shape[0]])],
        [
            helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [None, 2]),
        ],
        [
            numpy_helper.from_array(coef, "coef"),
            numpy_helper.from_array(intercept, "intercept"),
            numpy_helper.from_array(np.ones(1, np.float32), "one"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def test_the_seed_class_trains_a_classifier_on_int64_labels():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3)).astype(np.float32)
    y = (X[:, 0] - X[:, 1] > 0).astype(np.int64)
    coef = rng.normal(size=(3, 1)).astype(np.float32)
    intercept = np.array([0.1], np.float32)
    onx = _binary_classifier(coef, intercept)
    onx_loss = add_loss_output(onx, "log", output_index=1)
    # the classifier's own label output is renamed, the name goes to the labels
    assert [o.name for o in onx_loss.graph.output] == ["loss", "_label_", "probabilities"]
    eta0 = 0.5
    model = OrtGradientOptimizer(
        onx_loss,
        ["coef", "intercept"],
        learning_rate=LearningRateSGD(eta0, learning_rate="constant"),
        batch_size=len(X),
        max_iter=1,
        warm_start=True,
    )
    model.fit(X, y.reshape(-1, 1))
    # one step of the seed's rule: the rate divided by the batch size, on the mean loss
    p1 = 1 / (1 + np.exp(-(X.astype(np.float64) @ coef + intercept).ravel()))
    residual = (p1 - y) / len(X)
    step = eta0 / len(X)
    state = model.get_state()
    np.testing.assert_allclose(
        state["coef"].ravel(), coef.ravel() - step * X.T @ residual, rtol=1e-4
    )
    np.testing.assert_allclose(state["intercept"], intercept - step * residual.sum(), rtol=1e-4)
    initial = _seed_log_loss(y, p1, 1e-6)
    np.testing.assert_allclose(model.train_losses_[0] * len(X), initial, rtol=1e-5)
    with pytest.raises(OrtBenchError, match="int64 class labels"):
        model.fit(X, y.astype(np.float32))
