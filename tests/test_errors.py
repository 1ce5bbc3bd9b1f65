"""Every bad input gets a one-line OrtBenchError raised by ortbench, never a raw runtime error."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import cpu_build_only, fitted_mlp
from onnx import helper
from skl2onnx import to_onnx

from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
    NoGradientError,
    OrtBenchError,
    onnx_derivative,
)
from ortbench.training.runtime import build, capi

TRAINERS = [FullTrainer, ForwardBackwardTrainer]
TRAINING = pytest.mark.training_build


def raises_one_line(match: str):
    class _Check:
        def __enter__(self):
            self._ctx = pytest.raises(OrtBenchError, match=match)
            self.info = self._ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            result = self._ctx.__exit__(*exc)
            assert "\n" not in str(self.info.value)
            return result

    return _Check()


@pytest.fixture(params=TRAINERS, ids=lambda t: t.__name__)
def trainer(request):
    return request.param


def test_file_that_is_not_onnx(trainer, tmp_path, regression):
    X, y = regression
    path = tmp_path / "model.onnx"
    path.write_text("certainly not protobuf \x00\x01")
    with raises_one_line("is not an ONNX model"):
        trainer(str(path)).fit(X, y)
    with raises_one_line("model file not found"):
        trainer(str(tmp_path / "missing.onnx")).fit(X, y)
    with raises_one_line("is a folder: give the path of the model's .onnx file"):
        trainer(str(tmp_path)).fit(X, y)
    with raises_one_line("must be an onnx.ModelProto"):
        trainer(42).fit(X, y)


def test_model_with_nothing_to_train(trainer, regression):
    X, y = regression
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["Y"])],
        "identity",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 5])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with raises_one_line("nothing to train"):
        trainer(model).fit(X, y)


def test_unknown_weight_name(trainer, regression, mlp_onnx):
    X, y = regression
    with raises_one_line("unknown weight 'nope'"):
        trainer(mlp_onnx, weights_to_train=["coefficient", "nope"]).fit(X, y)
    with raises_one_line("unknown weight 'nope'"):
        onnx_derivative(mlp_onnx, weights=["nope"])
    # a name twice built a graph with two definitions of it: onnxruntime's raw error on
    # the portable backend, a duplicated weight on the training build
    with raises_one_line("weights_to_train names 'coefficient' more than once"):
        trainer(mlp_onnx, weights_to_train=["coefficient", "intercepts", "coefficient"]).fit(X, y)


@pytest.mark.parametrize(
    ("X_change", "y_change", "match"),
    [
        (lambda X: X[:, :3], None, "X has 3 features, the model expects 5"),
        (lambda X: X.ravel(), None, "X must be a 2-D array"),
        (lambda X: X.astype(str), None, "X must be numeric"),
        (lambda X: np.where(X > 1, np.nan, X), None, "X contains NaN or infinity: drop or fill"),
        (lambda X: np.where(X > 1, np.inf, X), None, "X contains NaN or infinity: drop or fill"),
        (None, lambda y: y[:-3], "X has 120 rows but y has 117"),
        (None, lambda y: np.c_[y, y], "y has 2 columns, the model outputs 1"),
        (None, lambda y: np.where(y > 1, np.nan, y), "y contains NaN or infinity: drop those"),
        (None, lambda y: y.astype(str), "y must be numeric"),
    ],
)
def test_bad_data(trainer, regression, mlp_onnx, X_change, y_change, match):
    X, y = regression
    X = X_change(X) if X_change else X
    y = y_change(y) if y_change else y
    with raises_one_line(match):
        trainer(mlp_onnx).fit(X, y)


def test_targets_stacked_by_a_final_reshape_name_the_tensor_to_train(trainer, regression, mlp_onnx):
    """skl2onnx's MLPRegressor converter ends a two-target model with Reshape(-1, 1), one
    column for both: the error names the tensor before it, which holds scikit-learn's two
    predictions, and the model cut there trains. A one-target model given two columns gets
    no such advice."""
    X, y = regression
    Y = np.c_[y, -y]
    onx = to_onnx(fitted_mlp(X, Y), X[:1])
    with raises_one_line(r"y has 2 columns, the model outputs 1: its last node reshapes") as e:
        trainer(onx).fit(X, Y)
    name = re.search(r"reshapes '([^']+)' to \(-1, 1\)", str(e.value)).group(1)
    assert "onnx.utils.Extractor" in str(e.value)
    cut = onnx.utils.Extractor(onx).extract_model([onx.graph.input[0].name], [name])
    session = onnxruntime.InferenceSession(
        cut.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(
        session.run(None, {onx.graph.input[0].name: X})[0],
        fitted_mlp(X, Y).predict(X),
        rtol=1e-4,
        atol=1e-5,
    )
    losses = trainer(cut, learning_rate=LearningRateSGD(0.01), max_iter=3).fit(X, Y).train_losses_
    assert losses[-1] < losses[0]
    with raises_one_line("y has 2 columns, the model outputs 1") as e:
        trainer(mlp_onnx).fit(X, Y)
    assert str(e.value).endswith("the model outputs 1")


def test_bad_sample_weight(trainer, regression, mlp_onnx):
    X, y = regression
    with raises_one_line(r"sample_weight must have shape \(120,\)"):
        trainer(mlp_onnx).fit(X, y, sample_weight=np.ones(3))
    with raises_one_line("sample_weight must be finite"):
        trainer(mlp_onnx).fit(X, y, sample_weight=-np.ones(120))


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_batch_size_below_one(trainer, regression, mlp_onnx, batch_size):
    X, y = regression
    with raises_one_line("batch_size must be an integer >= 1"):
        trainer(mlp_onnx, batch_size=batch_size).fit(X, y)


@pytest.mark.parametrize("verbose", ["yes", -1, 0.5, None])
def test_verbose_is_a_bool_or_a_level(trainer, regression, mlp_onnx, verbose):
    X, y = regression
    with raises_one_line("verbose must be a bool or an integer >= 0"):
        trainer(mlp_onnx, verbose=verbose, max_iter=1).fit(X, y)


@pytest.mark.parametrize(
    ("device", "match"),
    [
        pytest.param(
            "cuda",
            "device 'cuda' is not available: the installed onnxruntime 1.19.2 offers",
            marks=pytest.mark.training_build,
        ),
        pytest.param(
            "cuda:1",
            "CUDA training needs the onnxruntime-training 1.19.2 CUDA build",
            marks=pytest.mark.training_build,
        ),
        ("tpu", "device must be 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
        ("cpu:0", "device must be"),
    ],
)
def test_device_not_available(trainer, regression, mlp_onnx, device, match):
    X, y = regression
    with raises_one_line(match):
        trainer(mlp_onnx, device=device).fit(X, y)


@cpu_build_only
def test_cuda_message_names_what_the_portable_backend_needs(trainer, regression, mlp_onnx):
    X, y = regression
    with raises_one_line("the portable backend runs on CUDA with onnxruntime-gpu"):
        trainer(mlp_onnx, device="cuda", backend="portable").fit(X, y)


@pytest.mark.training_build
def test_bad_learning_rates(regression, mlp_onnx):
    X, y = regression
    for eta0 in (0, -1.0, float("inf"), float("nan"), "0.1"):
        with raises_one_line("eta0 must be a finite number > 0"):
            ForwardBackwardTrainer(mlp_onnx, learning_rate=LearningRateSGD(eta0=eta0)).fit(X, y)
    with raises_one_line("power_t must be a finite number >= 0, got -1"):
        rate = LearningRateSGD(0.1, learning_rate="invscaling", power_t=-1)
        ForwardBackwardTrainer(mlp_onnx, learning_rate=rate).fit(X, y)
    with raises_one_line("learning_rate must be one of"):
        ForwardBackwardTrainer(mlp_onnx, learning_rate=LearningRateSGD(learning_rate="x")).fit(X, y)
    with raises_one_line("use backend=.portable. or ForwardBackwardTrainer for momentum"):
        FullTrainer(mlp_onnx, learning_rate=LearningRateSGDNesterov()).fit(X, y)
    with raises_one_line("unknown loss 'hinge'"):
        FullTrainer(mlp_onnx, loss="hinge").fit(X, y)


@pytest.mark.parametrize("backend", [pytest.param("ort-training", marks=TRAINING), "portable"])
def test_classifier_behind_a_zipmap_with_a_regression_loss(trainer, backend):
    """skl2onnx's default classifier export hides the probabilities' shape behind a
    ZipMap: a regression loss on one label column is refused before onnxruntime runs."""
    from sklearn.neural_network import MLPClassifier

    from ortbench.training import SquareLearningLoss

    rng = np.random.RandomState(0)
    X = rng.randn(40, 4).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.float32)
    onx = to_onnx(MLPClassifier((5,), max_iter=300).fit(X, y > 0), X[:1])  # with its ZipMap
    loss = {"loss": "squared_error"} if trainer is FullTrainer else {}
    loss = loss or {"learning_loss": SquareLearningLoss()}
    with raises_one_line("y has 1 columns, the model outputs 2: the model is a classifier"):
        trainer(onx, max_iter=1, backend=backend, **loss).fit(X, y)


def _graph(nodes, weights: dict, opset: int = 17) -> onnx.ModelProto:
    """X (n, 6) through ``nodes`` to Y (n, 1), over float ``weights``."""
    from onnx import TensorProto, numpy_helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 6])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", 1])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _training_forms() -> dict[str, onnx.ModelProto]:
    rng = np.random.RandomState(0)
    w1, w2 = rng.randn(6, 8).astype(np.float32), rng.randn(8, 1).astype(np.float32)
    dropout = _graph(
        [
            helper.make_node("MatMul", ["X", "W1"], ["h"]),
            helper.make_node("Dropout", ["h", "ratio", "on"], ["d"], name="drop"),
            helper.make_node("MatMul", ["d", "W2"], ["Y"]),
        ],
        {"W1": w1, "W2": w2, "ratio": np.float32(0.5), "on": np.bool_(True)},
    )
    stats = {k: np.full(8, v, np.float32) for k, v in (("s", 1), ("b", 0), ("m", 0), ("v", 1))}
    batch_norm = _graph(
        [
            helper.make_node("MatMul", ["X", "W1"], ["h"]),
            helper.make_node(
                "BatchNormalization", ["h", "s", "b", "m", "v"], ["n"], name="bn", training_mode=1
            ),
            helper.make_node("MatMul", ["n", "W2"], ["Y"]),
        ],
        {"W1": w1, "W2": w2, **stats},
    )
    return {"Dropout": dropout, "BatchNormalization": batch_norm}


@pytest.mark.parametrize("backend", [pytest.param("ort-training", marks=TRAINING), "portable"])
@pytest.mark.parametrize("op", ["Dropout", "BatchNormalization"])
def test_training_forms_are_refused_by_both_backends(trainer, backend, op, regression):
    """Random masks, or each batch's statistics with the padded rows in them, would train
    silently (the training build's builder differentiates both): both backends refuse."""
    X = np.random.RandomState(1).randn(40, 6).astype(np.float32)
    y = X[:, :1].copy()
    with raises_one_line(f"gradient for {op} in training form .*only the inference form"):
        trainer(_training_forms()[op], max_iter=1, backend=backend).fit(X, y)


@TRAINING
def test_a_gradient_kernel_the_training_build_lacks_is_named(trainer):
    """The builder writes ConvTransposeGrad, which the CPU build has no kernel for: the
    session's raw NOT_IMPLEMENTED (with a source path) becomes one line naming the node."""
    rng = np.random.RandomState(0)
    weights = {
        "shape": np.array([-1, 1, 2, 3], np.int64),
        "K": rng.randn(1, 2, 2, 2).astype(np.float32),
        "axes": np.array([1, 2, 3], np.int64),
        "W": rng.randn(1, 1).astype(np.float32),
    }
    model = _graph(
        [
            helper.make_node("Reshape", ["X", "shape"], ["x4"]),
            helper.make_node("ConvTranspose", ["x4", "K"], ["up"], name="up", strides=[2, 2]),
            helper.make_node("ReduceMean", ["up", "axes"], ["mean"], keepdims=0),
            helper.make_node("Unsqueeze", ["mean", "one"], ["col"]),
            helper.make_node("MatMul", ["col", "W"], ["Y"]),
        ],
        {**weights, "one": np.array([1], np.int64)},
        opset=18,
    )
    X = np.random.RandomState(1).randn(40, 6).astype(np.float32)
    with raises_one_line("no onnxruntime-training kernel for the gradient of operator "
                         "'ConvTranspose' \\(node 'up'\\)") as info:  # fmt: skip
        trainer(model, max_iter=1, backend="ort-training").fit(X, X[:, :1].copy())
    assert isinstance(info.value, NoGradientError)


@pytest.mark.parametrize("name", ["shuffle", "warm_start"])
def test_flags_must_be_booleans(trainer, regression, mlp_onnx, name):
    """A string such as 'no' is truthy: it is refused, not read as True."""
    X, y = regression
    with raises_one_line(f"{name} must be True or False, got 'no'"):
        trainer(mlp_onnx, max_iter=1, **{name: "no"}).fit(X, y)


def test_divergence_names_the_epoch_and_keeps_finite_weights(trainer, regression, mlp_onnx):
    X, y = regression
    model = trainer(
        mlp_onnx, learning_rate=LearningRateSGD(50.0, learning_rate="constant"), max_iter=30
    )
    with raises_one_line(r"training diverged at epoch \d+") as info:
        model.fit(X, y * 1000)
    epoch = int(str(info.value).split("epoch ")[1].split(":")[0])
    assert len(model.train_losses_) == epoch - 1  # the finite epochs before it
    state = model.get_state()
    assert all(np.isfinite(v).all() for v in state.values())


def test_not_fitted(trainer, regression, mlp_onnx):
    X, _ = regression
    with raises_one_line("not fitted yet"):
        trainer(mlp_onnx).predict(X)


@pytest.mark.training_build
def test_runtime_without_training_support(monkeypatch):
    monkeypatch.delattr(capi._C, "TrainingAgent")
    with raises_one_line(
        "is not the training build ortbench needs: install onnxruntime-training-cpu"
    ):
        build.check_training_build()


def test_a_missing_onnxruntime_symbol_is_named_in_one_line(monkeypatch):
    """The adapter reads a training-only symbol on first use, so a build that lacks it
    says which one and what to install (here, as a plain onnxruntime build would)."""
    monkeypatch.delattr(capi._C, "PartialGraphExecutionState", raising=False)
    monkeypatch.delitem(vars(capi), "PartialGraphExecutionState", raising=False)
    with raises_one_line("has no PartialGraphExecutionState: install onnxruntime-training"):
        capi.PartialGraphExecutionState()
    assert "PartialGraphExecutionState" in capi.missing(capi.TRAINING_SYMBOLS)


def test_a_log_softmax_output_under_the_log_loss_says_what_to_do(trainer):
    """A network ending with LogSoftmax (torch's NLLLoss form) under the log loss of
    probabilities took the log of logarithms: "diverged, the loss is nan". Refused in one
    line; the softmax of the log-probabilities it advises trains torch's NLLLoss."""
    from scipy.special import log_softmax

    from ortbench.training import NegLogLearningLoss

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4)).astype(np.float32)
    y = rng.integers(0, 3, 60)
    W = (rng.standard_normal((4, 3)) * 0.5).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["X", "W"], ["z"]),
            helper.make_node("LogSoftmax", ["z"], ["Y"], axis=1),
        ],
        "nll",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None, 3])],
        [onnx.numpy_helper.from_array(W, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    name = "loss" if trainer is FullTrainer else "learning_loss"
    params = dict(learning_rate=LearningRateSGD(1e-9), batch_size=60, max_iter=1, shuffle=False)
    with raises_one_line(r"output 'Y' is a LogSoftmax's .* NegLogLearningLoss\(probability_"):
        trainer(model, **params, **{name: NegLogLearningLoss()}).fit(X, y)
    fitted = trainer(model, **params, **{name: NegLogLearningLoss("softmax")}).fit(X, y)
    nll = -log_softmax(X @ W, axis=1)[np.arange(60), y].mean()
    assert fitted.train_losses_[0] == pytest.approx(nll, rel=1e-5)


@pytest.mark.parametrize("backend", [pytest.param("ort-training", marks=TRAINING), "portable"])
def test_a_kernel_refusing_a_batch_is_one_line_and_the_epoch_undone(trainer, backend, capfd):
    """An embedding index beyond the table's rows in one row of the data: onnxruntime's
    raw RuntimeError (with its source file on the training build) and its red log line.
    Now one line naming the node's complaint, the weights of before the epoch kept."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 20, (64, 2)).astype(np.float32)
    X[40, 1] = 25  # the table has 20 rows
    y = rng.standard_normal(64).astype(np.float32)
    table = rng.standard_normal((20, 4)).astype(np.float32)
    W = rng.standard_normal((8, 1)).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["X"], ["i"], to=onnx.TensorProto.INT64),
            helper.make_node("Gather", ["T", "i"], ["e"]),
            helper.make_node("Flatten", ["e"], ["f"], axis=1),
            helper.make_node("MatMul", ["f", "W"], ["Y"]),
        ],
        "embedding",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None, 1])],
        [onnx.numpy_helper.from_array(table, "T"), onnx.numpy_helper.from_array(W, "W")],
    )
    model = trainer(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
        backend=backend, max_iter=2, batch_size=16, shuffle=False,
    )  # fmt: skip
    with raises_one_line(
        r"^onnxruntime failed in epoch 1, which is undone: .*indices element out of data bounds"
    ) as raised:
        model.fit(X, y)
    assert "onnxruntime_src" not in str(raised.value)
    assert model.n_iter_ == 0
    state = model._weights_by_name()
    np.testing.assert_array_equal(state["T"], table)  # the batches before the bad row undone
    np.testing.assert_array_equal(state["W"], W)
    err = capfd.readouterr().err
    assert "sequential_executor" not in err and "onnxruntime_src" not in err
