"""``tools/seed_tests.py`` and ``tools/seed_standins.py``, which run onnxcustom's own tests
against ortbench from a checkout: the stand-ins compute what the libraries they replace
computed, and the runner counts what pytest reports."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.linear_model import LinearRegression, LogisticRegression, SGDClassifier

TOOLS = Path(__file__).resolve().parents[1] / "tools"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def standins():
    return load("seed_standins")


def run(model, X):
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"X": X})


def test_a_linear_regressor_predicts_as_scikit_learn(standins):
    X, y = make_regression(50, n_features=4, random_state=0)
    X = X.astype(np.float32)
    model = LinearRegression().fit(X, y)
    onx = standins.to_onnx(model, X, black_op={"LinearRegressor"})
    assert [i.name for i in onx.graph.initializer] == ["coef", "intercept"]
    np.testing.assert_allclose(run(onx, X)[0].ravel(), model.predict(X), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "model, classes",
    [(SGDClassifier(loss="log_loss", random_state=0), 2), (LogisticRegression(), 3)],
)
def test_a_linear_classifier_predicts_as_scikit_learn(standins, model, classes):
    X, y = make_classification(80, n_features=6, n_informative=4, n_classes=classes, random_state=0)
    X = X.astype(np.float32)
    model.fit(X, y)
    label, probabilities = run(standins.to_onnx(model, X, black_op={"LinearClassifier"}), X)
    np.testing.assert_allclose(probabilities, model.predict_proba(X), atol=1e-5)
    np.testing.assert_array_equal(label, model.predict(X))


@pytest.mark.training_build
def test_the_python_runtime_computes_what_onnxruntime_computes(standins):
    """A gradient graph with onnxruntime's ``BroadcastGradientArgs``, run by both."""
    from onnx import TensorProto, helper, numpy_helper

    from ortbench.training.seed import onnx_derivative

    bias = numpy_helper.from_array(np.array([[1, 2, 3]], dtype=np.float32), "bias")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "bias"], ["Y"])],
        "add",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 3])],
        [bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    gradient = onnx_derivative(model)
    assert "BroadcastGradientArgs" in {n.op_type for n in gradient.graph.node}
    feeds = standins.random_feed(gradient.graph.input)
    assert max(v.shape[0] for v in feeds.values()) == 10
    expected = onnxruntime.InferenceSession(
        gradient.SerializeToString(), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    got = standins.OnnxInference(gradient).run(feeds)
    for output, value in zip(gradient.graph.output, expected):
        np.testing.assert_allclose(got[output.name], value, rtol=1e-5, atol=1e-5)


def test_the_base_class_asserts_as_pyquickhelper(standins):
    case = standins.ExtTestCase()
    case.assertGreater(1, 1)  # not strict unless asked
    with pytest.raises(AssertionError):
        case.assertGreater(1, 1, strict=True)
    case.assertEqualArray(np.float64(0.5), np.float32(0.5))
    with pytest.raises(AssertionError):
        case.assertEqualArray(np.array([1.0]), np.array([1.001]), decimal=4)
    case.assertRaise(lambda: int("x"), ValueError)
    with pytest.raises(AssertionError):
        case.assertRaise(lambda: None, ValueError)
    result, logs = case.assertLogging(
        lambda: logging.getLogger("ortbench.seed").debug("[step] done") or 7,
        "ortbench.seed",
        level=logging.DEBUG,
    )
    assert (result, logs.strip()) == (7, "[step] done")


SEED_MODULE = """
import logging
from pyquickhelper.pycode import ExtTestCase
try:
    from onnxruntime import TrainingSession
except ImportError:
    TrainingSession = None
from onnxcustom import __max_supported_opset__ as opset
from onnxcustom.training.sgd_learning_rate import LearningRateSGD


class TestSeed(ExtTestCase):
    def test_default_rate(self):
        self.assertEqual(LearningRateSGD().learning_rate, "invscaling")
        self.assertEqual(opset, 15)
        self.assertTrue(logging.getLogger('onnxcustom').name.startswith("ortbench"))
        self.assertIn(SGDClassifier_loss(), ("log_loss",))

    def test_what_differs(self):
        self.assertEqual(LearningRateSGD().learning_rate, "constant")


def SGDClassifier(loss):
    return loss


def SGDClassifier_loss():
    return SGDClassifier(loss='log')


def log_loss(*args):
    pass


def unused(y, X, y_test, reg, X_test):
    log_loss(y, X[:, 1], eps=1e-6)
    log_loss(y_test, reg.predict_proba(X_test), eps=1 - 6)
"""


def checkout(folder: Path, runner) -> Path:
    """A checkout holding the seed's module names, one with tests, the others empty."""
    for module in runner.MODULES:
        path = folder / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SEED_MODULE if path.name == "test_learning_rate.py" else "")
    return folder


def test_the_runner_counts_passed_and_failed_tests_by_module(tmp_path):
    runner = load("seed_tests")
    root = checkout(tmp_path / "onnxcustom", runner)
    result = subprocess.run(
        [sys.executable, str(TOOLS / "seed_tests.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "test_learning_rate                         1 / 2" in result.stdout
    assert "all                                        1 / 2 (50.0%; 0 skipped)" in result.stdout
    failures = [line for line in result.stdout.splitlines() if line.startswith("failure:")]
    assert failures == [
        "failure: test_learning_rate::test_what_differs: AssertionError: 'invscaling' != 'constant'"
    ]


def test_the_runner_refuses_another_checkout_in_one_line(tmp_path):
    runner = load("seed_tests")
    root = checkout(tmp_path / "onnxcustom", runner)
    (root / runner.MODULES[3]).write_text("")  # no edit applies anywhere now
    result = subprocess.run(
        [sys.executable, str(TOOLS / "seed_tests.py"), str(root)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: these edits apply nowhere")
    assert len(result.stderr.strip().splitlines()) == 1
    result = subprocess.run(
        [sys.executable, str(TOOLS / "seed_tests.py"), str(tmp_path / "missing")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "give a checkout of onnxcustom" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
