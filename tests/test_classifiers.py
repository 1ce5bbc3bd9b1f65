"""Classifier graphs train with the log loss by default, through their raw scores."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime
import pytest
from scipy.special import expit, log_softmax, softmax
from skl2onnx import to_onnx
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    NegLogLearningLoss,
    OrtBenchError,
)

EPOCHS = 4


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


def _split(X, y):
    return train_test_split(X.astype(np.float32), y, test_size=0.3, random_state=0)


@pytest.fixture(scope="module")
def binary():
    X, y = load_breast_cancer(return_X_y=True)
    return _split(StandardScaler().fit_transform(X), y)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return _split(X, y)  # unscaled: large scores, which overflowed skl2onnx's Exp before


def _mlp():
    settings = dict(hidden_layer_sizes=(16,), solver="sgd", learning_rate_init=0.01)
    return MLPClassifier(momentum=0.0, alpha=0.0, batch_size=10, random_state=0, **settings)


def _sgd():
    settings = dict(learning_rate="constant", eta0=0.01, alpha=1e-4, random_state=0)
    return SGDClassifier(loss="log_loss", **settings)


def _onnx_and_reference(make, X, y, zipmap: bool):
    """The ONNX model of ``make()`` after its first epochs (solver iterations for
    LogisticRegression, whose first one moves little), and the estimator trained by
    scikit-learn EPOCHS more epochs (or iterations) from those weights."""
    first = EPOCHS if make is LogisticRegression else 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = make().set_params(max_iter=first).fit(X, y)
        onx = to_onnx(model, X[:1], options={"zipmap": zipmap})
        if isinstance(model, SGDClassifier):
            for _ in range(EPOCHS):
                model.partial_fit(X, y)
        else:
            model.set_params(warm_start=True, max_iter=EPOCHS).fit(X, y)
    return onx, model


CASES = {
    "mlp-binary-zipmap": (_mlp, "binary", True),
    "mlp-binary": (_mlp, "binary", False),
    "mlp-10-zipmap": (_mlp, "digits", True),
    "mlp-10": (_mlp, "digits", False),
    "sgd-binary": (_sgd, "binary", True),
    "sgd-10": (_sgd, "digits", False),
    "logreg-binary": (LogisticRegression, "binary", True),
    "logreg-10": (LogisticRegression, "digits", False),
}


@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer], ids=lambda t: t.__name__)
@pytest.mark.parametrize("case", list(CASES))
def test_classifier_with_default_settings_matches_scikit_learn(case, trainer, backend, request):
    make, data, zipmap = CASES[case]
    X_train, X_test, y_train, y_test = request.getfixturevalue(data)
    onx, reference = _onnx_and_reference(make, X_train, y_train, zipmap)
    model = trainer(onx, max_iter=EPOCHS, random_state=0, backend=backend)
    model.fit(X_train, y_train)  # default loss and learning rate: no divergence
    assert model.is_classifier_
    assert model.learning_loss_.probability_function in ("sigmoid", "softmax")
    assert model.train_losses_[-1] < model.train_losses_[0]
    expected = reference.score(X_test, y_test)
    assert model.score(X_test, y_test) >= expected - 0.03, (model.train_losses_, expected)
    proba = model.predict_proba(X_test)
    np.testing.assert_allclose(proba.sum(axis=1), 1, rtol=1e-5)
    np.testing.assert_array_equal(model.predict(X_test), model.classes_[proba.argmax(axis=1)])


@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer], ids=lambda t: t.__name__)
def test_binary_logistic_regression_reports_its_log_loss(trainer, backend, binary):
    """skl2onnx writes a binary LogisticRegression as two mirrored score columns: the
    loss a fit reports is scikit-learn's log loss of the model, not twice it."""
    X, _, y, _ = binary
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reference = LogisticRegression(max_iter=5).fit(X, y)
    onx = to_onnx(reference, X[:1], options={"zipmap": False})
    rate = LearningRateSGD(1e-9)  # one step over all the rows, weights almost unchanged
    model = trainer(onx, learning_rate=rate, batch_size=len(X), max_iter=1, backend=backend)
    model.fit(X, y, X_val=X, y_val=y)
    expected = log_loss(y, reference.predict_proba(X))
    assert model.train_losses_[0] == pytest.approx(expected, rel=1e-5)
    assert model.validation_losses_[0] == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(model.predict_proba(X), reference.predict_proba(X), atol=1e-5)


def _pipelines():
    from sklearn.decomposition import PCA
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import Normalizer

    return {
        # ai.onnx.ml nodes shape inference does not read through (no rewrite): the width
        # of the scores comes from a run on a row
        "normalizer + binary MLP": (make_pipeline(Normalizer(), MLPClassifier((8,))), 2),
        "imputer + binary MLP": (make_pipeline(SimpleImputer(), MLPClassifier((8,))), 2),
        "scaler + binary MLP": (make_pipeline(StandardScaler(), MLPClassifier((8,))), 2),
        "scaler + multiclass MLP": (make_pipeline(StandardScaler(), MLPClassifier((8,))), 10),
        "scaler + logistic": (make_pipeline(StandardScaler(), LogisticRegression()), 10),
        "PCA + logistic": (make_pipeline(PCA(10), LogisticRegression()), 2),
    }


@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer], ids=lambda t: t.__name__)
@pytest.mark.parametrize("name", list(_pipelines()))
def test_a_pipeline_s_preprocessing_is_read_through(name, trainer, backend):
    """A StandardScaler, Normalizer or SimpleImputer (ai.onnx.ml nodes, which shape
    inference does not read through) or a PCA before the classifier: the fit reports
    scikit-learn's log loss of the pipeline and predicts its probabilities (before, a binary
    MLP behind one trained a loss of three times its value on the training build and
    failed on the portable backend, and the PCA was refused)."""
    pipeline, n_classes = _pipelines()[name]
    X, y = load_digits(return_X_y=True)
    X, y = (X[:300] / 16).astype(np.float32), y[:300] % n_classes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        pipeline.set_params(**{f"{pipeline.steps[-1][0]}__max_iter": 5}).fit(X, y)
    onx = to_onnx(pipeline, X[:1], options={"zipmap": False}, target_opset=17)
    ml = {"Scaler", "Normalizer", "Imputer"}
    assert ml & {n.op_type for n in onx.graph.node} or "PCA" in name
    rate = LearningRateSGD(1e-9)  # one step over all the rows, weights almost unchanged
    model = trainer(onx, learning_rate=rate, batch_size=len(X), max_iter=1, backend=backend)
    model.fit(X, y)
    expected = log_loss(y, pipeline.predict_proba(X))
    assert model.train_losses_[0] == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(model.predict_proba(X), pipeline.predict_proba(X), atol=1e-5)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer])
def test_model_selection_splits_a_classifier_graph_into_stratified_folds(trainer):
    """scikit-learn's model selection tells a classifier graph from a regressor graph, as
    it tells ``MLPClassifier`` from ``MLPRegressor``: iris's sorted labels are split into
    stratified folds, each of which holds the three classes the graph outputs."""
    from sklearn.base import is_classifier, is_regressor
    from sklearn.datasets import load_iris
    from sklearn.model_selection import cross_validate
    from sklearn.neural_network import MLPRegressor

    X, y = load_iris(return_X_y=True)
    X = X.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        classifier = MLPClassifier(hidden_layer_sizes=(4,), max_iter=5, random_state=0)
        regressor = MLPRegressor(hidden_layer_sizes=(4,), max_iter=5, random_state=0)
        classifier.fit(X, y)
        regressor.fit(X, X[:, 0])
    model = trainer(to_onnx(classifier, X[:1], options={"zipmap": False}), max_iter=2)
    assert is_classifier(model) and not is_regressor(model)
    scores = cross_validate(model, X, y, cv=2, error_score="raise")["test_score"]
    assert scores.shape == (2,) and np.all((scores >= 0) & (scores <= 1))
    assert is_regressor(trainer(to_onnx(regressor, X[:1]), max_iter=2))
    unusable = trainer(b"not a model", max_iter=2)  # fit says why; the tags stay unset
    assert not is_classifier(unusable) and not is_regressor(unusable)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer], ids=lambda t: t.__name__)
def test_class_labels_read_as_floats_are_classes(trainer, digits):
    """Labels 0., 1., ... (as a CSV gives them) train and predict as scikit-learn's
    classifiers do (float classes_), the same as their integers; fractional ones are
    refused in one line."""
    X_train, X_test, y_train, y_test = digits
    onx, _ = _onnx_and_reference(_mlp, X_train, y_train, zipmap=False)
    settings = dict(max_iter=2, random_state=0, backend="portable")
    as_floats = trainer(onx, **settings).fit(X_train, y_train.astype(float))
    as_integers = trainer(onx, **settings).fit(X_train, y_train)
    np.testing.assert_array_equal(as_floats.classes_, as_integers.classes_.astype(float))
    np.testing.assert_array_equal(as_floats.predict(X_test), as_integers.predict(X_test))
    assert as_floats.predict(X_test).dtype == float
    assert as_floats.score(X_test, y_test.astype(float)) == as_integers.score(X_test, y_test)
    with pytest.raises(OrtBenchError, match=r"^y holds fractional class labels \(\[0.5, 1.5"):
        trainer(onx, **settings).fit(X_train, y_train + 0.5)


@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer], ids=lambda t: t.__name__)
@pytest.mark.parametrize("data", ["binary", "digits"])
def test_a_linear_classifier_of_class_names_trains_as_of_their_index(trainer, data, request):
    """skl2onnx writes a LogisticRegression fitted on names with string labels: the same
    weights and trajectory as fitted on the names' index, the names predicted."""
    X_train, X_test, y_train, _ = request.getfixturevalue(data)
    names = np.array([f"class {c:02d}" for c in range(10)])
    settings = dict(max_iter=3, random_state=0, backend="portable")
    models = {}
    for labels in (names[y_train], y_train):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fitted = LogisticRegression(max_iter=3).fit(X_train, labels)
        onx = to_onnx(fitted, X_train[:1], options={"zipmap": False})
        models[labels.dtype.kind] = trainer(onx, **settings).fit(X_train, labels)
    named, numbered = models["U"], models["i"]
    np.testing.assert_allclose(named.train_losses_, numbered.train_losses_, rtol=1e-6)
    np.testing.assert_array_equal(named.predict(X_test), names[numbered.predict(X_test)])


@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("trainer", [FullTrainer, ForwardBackwardTrainer], ids=lambda t: t.__name__)
def test_a_width_shape_inference_cannot_tell_is_read_from_a_run(trainer, backend):
    """One Sigmoid column whose width shape inference loses (a Reshape to a shape computed
    through Ceil): the labels took the two classes' width and broadcast against it in the
    loss, silently; a run of the model on a row gives the width."""
    from onnx import TensorProto, helper, numpy_helper

    shape = np.array([-1.0, 0.5], np.float32)  # Ceil: [-1, 1]
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 4)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.standard_normal(40) > 0).astype(np.int64)
    W = (rng.standard_normal((4, 1)) * 0.5).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["z"]),
            helper.make_node("Constant", [], ["shape_f"], value=numpy_helper.from_array(shape)),
            helper.make_node("Ceil", ["shape_f"], ["shape_c"]),
            helper.make_node("Cast", ["shape_c"], ["shape"], to=TensorProto.INT64),
            helper.make_node("Reshape", ["z", "shape"], ["s"]),
            helper.make_node("Sigmoid", ["s"], ["Y"]),
        ],
        "lost_width",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from ortbench.training.graphs.outputs import static_width

    assert static_width(model, "s") is None  # what the test is about
    params = dict(learning_rate=LearningRateSGD(1e-9), batch_size=40, max_iter=1, shuffle=False)
    name = "loss" if trainer is FullTrainer else "learning_loss"
    fitted = trainer(model, backend=backend, **params, **{name: NegLogLearningLoss()}).fit(X, y)
    expected = log_loss(y, expit(X @ W).ravel())
    assert fitted.train_losses_[0] == pytest.approx(expected, rel=1e-5)
