"""The seed's data shapes: labels and sample weights as (n, 1) columns, an intermediate
result without a declared shape trained as the output, weighted per-row losses, and the
trained weights written into another model."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from helpers import weights_of
from onnx import helper
from skl2onnx import to_onnx
from sklearn.datasets import make_classification
from sklearn.linear_model import SGDClassifier

from ortbench.training import OrtBenchError
from ortbench.training.graphs.outputs import select_outputs
from ortbench.training.graphs.weights import trainable_initializers
from ortbench.training.seed import (
    NegLogLearningLoss,
    OrtGradientForwardBackwardOptimizer,
)


def _raw_score_model():
    """A binary linear classifier whose one-column raw score is selected as the output,
    its shape undeclared (skl2onnx computes it as an intermediate result)."""
    X, y = make_classification(120, n_features=4, random_state=0)
    X = X.astype(np.float32)
    clf = SGDClassifier(loss="log_loss", random_state=0).fit(X, y)
    onx = to_onnx(clf, X, options={"zipmap": False, "raw_scores": True})
    onx = select_outputs(onx, ["score"])
    assert not onx.graph.output[0].type.tensor_type.HasField("shape")
    return onx, trainable_initializers(onx), X, y


def test_labels_and_weights_as_columns_train_as_1d_ones():
    onx, weights, X, y = _raw_score_model()
    w = np.random.default_rng(0).uniform(1, 2, size=len(y)).astype(np.float32)
    fitted = []
    for labels, sample_weight in ((y, w), (y.reshape(-1, 1), w.reshape(-1, 1))):
        np.random.seed(0)
        model = OrtGradientForwardBackwardOptimizer(
            onx,
            weights,
            weight_name="weight",
            learning_loss=NegLogLearningLoss(),
            learning_rate=1e-2,
            max_iter=5,
            batch_size=20,
        )
        model.fit(X, labels, sample_weight)
        fitted.append(model)
    for name in weights:
        np.testing.assert_allclose(
            weights_of(fitted[0])[name], weights_of(fitted[1])[name], rtol=1e-6
        )
    assert fitted[1].train_losses_[-1] < fitted[1].train_losses_[0]


def test_losses_take_sample_weights_and_weights_go_into_another_model(seed_linear):
    onx, X, y = seed_linear
    model = OrtGradientForwardBackwardOptimizer(
        onx, ["coef", "intercept"], learning_rate=1e-2, max_iter=3, batch_size=10
    )
    model.fit(X, y)
    w = np.linspace(0.5, 2, len(y)).astype(np.float32)
    plain = model.losses(X, y)
    np.testing.assert_allclose(model.losses(X, y, w), plain * w, rtol=1e-6)
    state = weights_of(model)
    predicted = X @ state["coef"] + state["intercept"]
    np.testing.assert_allclose(plain, ((predicted - y) ** 2).ravel(), rtol=1e-4)

    # the trained weights written into a copy of another model holding them
    other = helper.make_model(onx.graph, opset_imports=onx.opset_import)
    other.ir_version = onx.ir_version
    trained = model.get_trained_onnx(model=other)
    sess = onnxruntime.InferenceSession(
        trained.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(sess.run(None, {"X": X})[0], predicted, rtol=1e-5, atol=1e-6)
    lacking = helper.make_model(
        helper.make_graph(
            [helper.make_node("Identity", ["X"], ["Y"])],
            "identity",
            [onx.graph.input[0]],
            [helper.make_tensor_value_info("Y", 1, None)],
        ),
        opset_imports=onx.opset_import,
    )
    with pytest.raises(OrtBenchError, match="no initializers"):
        model.get_trained_onnx(model=lacking)
