"""A user's own model and data through ``bench`` and ``profile``; the model-size axis; bad
input refused in one line before any cell runs."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import onnx
import pandas as pd
import pytest
from helpers import timed
from onnx import TensorProto, helper, numpy_helper
from skl2onnx import to_onnx
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LinearRegression
from sklearn.metrics import log_loss
from sklearn.neural_network import MLPClassifier, MLPRegressor

from ortbench.bench.contenders import make_contender
from ortbench.bench.problems import make_problem, sized_problems
from ortbench.bench.store import RESULTS_CSV
from ortbench.bench.user_model import UserFiles, load_user_problem, mlp_layers
from ortbench.cli import main
from ortbench.report.baselines import group_baseline
from ortbench.report.scaling import fixed_batch_size, write_scaling_plot

TORCH = importlib.util.find_spec("torch") is not None
ENGINE = ("ort-full", "ort-fwbw", "ort-fwbw-nesterov", "ort-portable-full")
RNG = np.random.RandomState(0)
W1, B1 = RNG.randn(4, 6).astype(np.float32) * 0.5, RNG.randn(6).astype(np.float32) * 0.1
W2, B2 = RNG.randn(6, 1).astype(np.float32) * 0.5, np.array([0.3], np.float32)


def tanh_network(weights=True, input_type=TensorProto.FLOAT) -> onnx.ModelProto:
    """A hand-built regression model, Gemm -> Tanh -> Gemm.

    Input ``X`` (N, 4); output ``y`` (N, 1) = tanh(X W1 + b1) W2 + b2. Without
    ``weights`` the graph is Tanh(X) summed over columns: nothing to train.
    """
    if not weights:
        nodes = [
            helper.make_node("Tanh", ["X"], ["t"]),
            helper.make_node("ReduceSum", ["t", "axes"], ["y"], keepdims=1),
        ]
        inits = [numpy_helper.from_array(np.array([1], np.int64), "axes")]
    else:
        nodes = [
            helper.make_node("Gemm", ["X", "W1", "b1"], ["h"]),
            helper.make_node("Tanh", ["h"], ["a"]),
            helper.make_node("Gemm", ["a", "W2", "b2"], ["y"]),
        ]
        inits = [
            numpy_helper.from_array(v, n)
            for v, n in ((W1, "W1"), (B1, "b1"), (W2, "W2"), (B2, "b2"))
        ]
    graph = helper.make_graph(
        nodes,
        "user_model",
        [helper.make_tensor_value_info("X", input_type, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def numpy_forward(X: np.ndarray) -> np.ndarray:
    return (np.tanh(X.astype(np.float64) @ W1 + B1) @ W2 + B2).ravel()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The hand-built model and one data set in every format."""
    folder = tmp_path_factory.mktemp("user")
    onnx.save(tanh_network(), folder / "model.onnx")
    rng = np.random.RandomState(1)
    X = rng.randn(200, 4).astype(np.float32)
    y = 2 * numpy_forward(X) + 1 + 0.1 * rng.randn(200)  # far from the model: it learns
    w = rng.uniform(0.5, 2, 200)
    np.savez(folder / "data.npz", X=X, y=y, sample_weight=w)
    np.save(folder / "X.npy", X)
    np.save(folder / "y.npy", y)
    table = pd.DataFrame(X, columns=["a", "b", "c", "d"]).assign(target=y, w=w)
    table.to_csv(folder / "data.csv", index=False)
    table.drop(columns="w").to_parquet(folder / "data.parquet")
    return folder


def run_bench(tmp_path, *options: str) -> pd.DataFrame:
    """One timing round per cell: these tests check what was trained, not the times, so a
    cell whose one slope a loaded machine made "unstable" still counts (``--keep-going``;
    :func:`trained` reads the statuses)."""
    argv = ["bench", "--batch-sizes", "16", "--devices", "cpu", "--epochs", "2", "--repeat", "1"]
    assert main([*argv, *options, "--out", str(tmp_path), "--keep-going"]) == 0
    (folder,) = tmp_path.iterdir()
    assert (folder / "index.html").exists()
    return pd.read_csv(folder / RESULTS_CSV)


def trained(results: pd.DataFrame) -> pd.DataFrame:
    """The rows of cells that trained: "ok", or "unstable" (their timing only)."""
    return results[results.status.map(timed)]


def summary_of(tmp_path) -> str:
    (folder,) = tmp_path.iterdir()
    return (folder / "summary.md").read_text()


@pytest.mark.training_build
@pytest.mark.parametrize(
    "data",
    [
        ["data.npz"],
        ["X.npy", "y.npy"],
        ["data.csv", "--target", "target", "--sample-weight", "w"],
        ["data.parquet", "--target", "target"],
    ],
)
def test_bench_trains_a_hand_built_model(files, tmp_path, data):
    data = [str(files / d) if "." in d else d for d in data]
    contenders = [*ENGINE, "sklearn-mlp-sgd", "torch-sgd"]
    results = run_bench(
        tmp_path, "--model", str(files / "model.onnx"), "--data", *data,
        "--contenders", *contenders,
    )  # fmt: skip
    assert list(results.contender) == contenders
    assert (results.problem == "model.onnx").all()
    assert (results.trained_values == W1.size + B1.size + W2.size + B2.size).all()
    ok = trained(results)
    # torch runs the graph itself, scikit-learn its Gemm layers (a tanh MLP)
    assert list(ok.contender) == [*ENGINE, "sklearn-mlp-sgd", *(["torch-sgd"] if TORCH else [])]
    # the starting loss is the hand-built network's, on the training rows the split kept
    # (weighted when the data has weights): the same for every engine contender
    X, y = np.load(files / "X.npy"), np.load(files / "y.npy")
    weighted = "--sample-weight" in data or data[0].endswith(".npz")
    w = np.load(files / "data.npz")["sample_weight"] if weighted else np.ones(len(X))
    full = np.average(0.5 * (numpy_forward(X) - y) ** 2, weights=w)
    assert np.allclose(ok.initial_loss, ok.initial_loss.iloc[0], rtol=1e-5)
    assert ok.initial_loss.iloc[0] == pytest.approx(full, rel=0.3)
    assert (ok.final_train_loss < ok.initial_loss).all()
    # one trajectory of plain SGD: the engine's, scikit-learn's and torch's
    sgd = ok[~ok.contender.str.contains("nesterov")].final_train_loss
    np.testing.assert_allclose(sgd, sgd.iloc[0], rtol=1e-5)
    # scikit-learn ran: speed-ups are over it (when its one timing round was a measurement)
    if results.set_index("contender").status["sklearn-mlp-sgd"] == "ok":
        assert "| 16 | ort-full | " in summary_of(tmp_path)
        assert "speed-up vs sklearn-mlp-sgd" in summary_of(tmp_path)


@pytest.mark.training_build
def test_baseline_option(files, tmp_path):
    results = run_bench(
        tmp_path, "--model", str(files / "model.onnx"), "--data", str(files / "data.npz"),
        "--contenders", "ort-full", "ort-fwbw", "--baseline", "ort-fwbw",
        "--learning-rate", "0.02",
    )  # fmt: skip
    assert (results.learning_rate == 0.02).all()
    size = W1.size + B1.size + W2.size + B2.size
    title = f"## model.onnx ({size} trained values, learning rate 0.02) on data.npz, cpu"
    assert title in summary_of(tmp_path)
    assert group_baseline(results) == "ort-fwbw"
    assert group_baseline(results.assign(baseline=np.nan)) == "ort-full"
    assert "speed-up vs ort-fwbw" in summary_of(tmp_path)
    assert main(["bench", "--contenders", "ort-full", "--baseline", "ort-fwbw"]) == 2


@pytest.mark.training_build
def test_the_starting_loss_is_the_models_own(files):
    problem = load_user_problem(UserFiles(str(files / "model.onnx"), (str(files / "data.npz"),)))
    data = problem.data
    expected = np.average(
        0.5 * (numpy_forward(data.X_train) - data.y_train) ** 2, weights=data.w_train
    )
    output = make_contender("ort-fwbw", problem, 16).predict(data.X_train)
    assert problem.loss(data.y_train, output, data.w_train) == pytest.approx(expected, rel=1e-5)
    assert make_problem("model.onnx", "data.npz") is problem


def test_every_contender_trains_a_users_model_at_its_learning_rate(files):
    """--learning-rate reaches every contender: the portable engine and the torch and JAX
    peers follow one curve at 0.05, another than at the default."""
    model, data = str(files / "model.onnx"), (str(files / "data.npz"),)
    names = ["ort-portable-full", "ort-portable-fwbw"]
    names += [n for n, lib in (("torch-sgd", "torch"), ("jax-sgd", "jax")) if installed(lib)]
    curves = {}
    for rate in (None, 0.05):
        problem = load_user_problem(UserFiles(model, data, learning_rate=rate))
        assert problem.eta0 == (0.001 if rate is None else rate)
        curves[rate] = {n: make_contender(n, problem, 16).fit(2).loss_curve_ for n in names}
    for name in names:
        np.testing.assert_allclose(curves[0.05][name], curves[0.05][names[0]], rtol=1e-5)
        assert not np.allclose(curves[0.05][name], curves[None][name], rtol=1e-3), name


def installed(library: str) -> bool:
    return importlib.util.find_spec(library) is not None


@pytest.mark.training_build
def test_profile_runs_a_hand_built_model(files, tmp_path, capsys):
    argv = ["profile", "ort-fwbw", "--model", str(files / "model.onnx")]
    argv += ["--data", str(files / "data.csv"), "--target", "target", "--sample-weight", "w"]
    argv += ["--epochs", "1"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "model.onnx on data.csv" in out
    (folder,) = tmp_path.iterdir()
    operators = pd.read_csv(folder / "profile-ort-fwbw" / "operators.csv")
    assert operators.op_type.str.contains("Gemm").any()  # the user's layers ran
    assert (operators.input_shapes.str.startswith("15x4")).any()  # batch 15 of 4 features


def fitted(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y)


def test_a_second_head_is_left_out_and_said_once_in_one_line(tmp_path, capsys):
    """A model with a second output (another head): the default weights leave out those
    only that head reads, every engine contender trains the first output from the same
    loss, and the trainers' warning reaches the terminal as one line, once."""
    rng = np.random.RandomState(0)
    weights = {"T": rng.randn(10, 12), "Tb": rng.randn(12), "H1": rng.randn(12, 2)}
    weights["H2"] = rng.randn(12, 3)
    nodes = [
        helper.make_node("MatMul", ["X", "T"], ["t0"]),
        helper.make_node("Add", ["t0", "Tb"], ["t1"]),
        helper.make_node("Relu", ["t1"], ["h"]),
        helper.make_node("MatMul", ["h", "H1"], ["Y"]),
        helper.make_node("MatMul", ["h", "H2"], ["z"]),
        helper.make_node("Softmax", ["z"], ["Z"], axis=1),
    ]
    outputs = [("Y", 2), ("Z", 3)]
    graph = helper.make_graph(
        nodes,
        "two_heads",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 10])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, k]) for n, k in outputs],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, tmp_path / "two.onnx")
    np.savez(tmp_path / "two.npz", X=rng.randn(200, 10), y=rng.randn(200, 2))
    contenders = ["ort-portable-full", "ort-portable-fwbw"]
    results = run_bench(
        tmp_path / "out", "--model", str(tmp_path / "two.onnx"), "--data",
        str(tmp_path / "two.npz"), "--contenders", *contenders,
    )  # fmt: skip
    ran = trained(results)
    assert sorted(ran.contender) == sorted(contenders)
    assert np.allclose(ran.final_train_loss, ran.final_train_loss.iloc[0], rtol=1e-5)
    lines = [x for x in capsys.readouterr().err.splitlines() if "do not reach" in x]
    assert lines == [
        "ortbench: warning: FullTrainer: 1 initializers do not reach the trained output 'Y' "
        "and are not trained: ['H2']",
        "ortbench: warning: ForwardBackwardTrainer: 1 initializers do not reach the trained "
        "output 'Y' and are not trained: ['H2']",
    ]


@pytest.mark.skipif(not TORCH, reason="torch is not installed")
def test_torch_says_unavailable_for_a_node_it_refuses_in_that_form(tmp_path):
    """The torch runner refuses some nodes by their attributes (an AveragePool with both
    ceil_mode and count_include_pad divides as ONNX does not): the cell is unavailable,
    with the runner's reason, not failed."""
    from ortbench.bench.contenders import CONTENDERS

    rng = np.random.RandomState(0)
    nodes = [
        helper.make_node("Reshape", ["X", "shape"], ["x4"]),
        helper.make_node(
            "AveragePool", ["x4"], ["pooled"], name="pool", kernel_shape=[2, 2],
            strides=[2, 2], ceil_mode=1, count_include_pad=1,
        ),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "W"], ["Y"]),
    ]  # fmt: skip
    weights = {"shape": np.array([-1, 1, 5, 7], np.int64), "W": rng.randn(12, 1)}
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 35])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])],
        [numpy_helper.from_array(np.asarray(v, v.dtype if v.dtype == np.int64 else np.float32), k)
         for k, v in weights.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.save(model, tmp_path / "pool.onnx")
    X = rng.randn(200, 35).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=X, y=X[:, 0])
    problem = load_user_problem(UserFiles(str(tmp_path / "pool.onnx"), (str(tmp_path / "d.npz"),)))
    reason = CONTENDERS["torch-sgd"].unavailable(problem, 16, "cpu")
    assert reason == (
        "torch runs no AveragePool with both ceil_mode and count_include_pad (node 'pool')"
    )
    assert CONTENDERS["ort-portable-full"].unavailable(problem, 16, "cpu") is None


@pytest.mark.training_build
def test_a_converted_scikit_learn_mlp_gets_every_contender(tmp_path):
    X, y = (
        make_problem("mlp", "diabetes").data.X_train,
        make_problem("mlp", "diabetes").data.y_train,
    )
    mlp = fitted(
        MLPRegressor(hidden_layer_sizes=(12, 5), activation="tanh", max_iter=1, random_state=0),
        X,
        y,
    )
    onnx.save(to_onnx(mlp, X[:1]), tmp_path / "mlp.onnx")
    np.savez(tmp_path / "d.npz", X=X, y=y)
    out = tmp_path / "out"
    contenders = ["sklearn-mlp-sgd", "torch-sgd", "ort-fwbw"]
    results = run_bench(
        out, "--model", str(tmp_path / "mlp.onnx"), "--data", str(tmp_path / "d.npz"),
        "--contenders", *contenders,
    )  # fmt: skip
    ran = set(trained(results).contender)
    assert ran == ({"sklearn-mlp-sgd", "ort-fwbw"} | ({"torch-sgd"} if TORCH else set()))
    # every contender starts from the converted model: scikit-learn's own loss
    problem = load_user_problem(UserFiles(str(tmp_path / "mlp.onnx"), (str(tmp_path / "d.npz"),)))
    own = 0.5 * np.mean((mlp.predict(problem.data.X_train) - problem.data.y_train) ** 2)
    assert np.allclose(trained(results).initial_loss, own, rtol=1e-4)


@pytest.mark.training_build
def test_a_converted_classifier_trains_with_the_log_loss(tmp_path):
    data = make_problem("mlp-multiclass", "digits", n_samples=400).data
    X, y = data.X_train, data.y_train + 3  # labels 3..12: any integers are classes
    mlp = fitted(MLPClassifier(hidden_layer_sizes=(16,), max_iter=1, random_state=0), X, y)
    onnx.save(to_onnx(mlp, X[:1], options={"zipmap": False}), tmp_path / "clf.onnx")
    np.savez(tmp_path / "digits.npz", X=X, y=y)
    files = UserFiles(str(tmp_path / "clf.onnx"), (str(tmp_path / "digits.npz"),))
    problem = load_user_problem(files)
    assert (problem.task, problem.loss_name) == ("multiclass", "log")
    own = log_loss(problem.data.y_train, mlp.predict_proba(problem.data.X_train))
    for name in ["sklearn-mlp-sgd", "ort-fwbw", "ort-full", *(["torch-sgd"] if TORCH else [])]:
        contender = make_contender(name, problem, 16)
        output = contender.predict(problem.data.X_train)
        assert problem.loss(problem.data.y_train, output) == pytest.approx(own, rel=1e-4), name
        assert contender.fit(2).loss_curve_[-1] < own, name


@pytest.mark.training_build
@pytest.mark.parametrize(
    "same",
    [
        ["sklearn-mlp-sgd", "ort-fwbw", "ort-full", "torch-sgd"],
        ["sklearn-mlp-nesterov", "ort-fwbw-nesterov", "torch-nesterov"],
    ],
)
def test_sample_weights_give_the_same_trajectory_everywhere(tmp_path, same):
    """Weighted batches (sum(w * loss) / sum(w) per batch) in every library alike."""
    rng = np.random.RandomState(0)
    X = rng.randn(400, 6).astype(np.float32)
    y, w = np.sin(X[:, 0]) + X[:, 1], rng.uniform(0.2, 3, 400)
    mlp = fitted(MLPRegressor(hidden_layer_sizes=(8,), max_iter=1, random_state=0), X, y)
    onnx.save(to_onnx(mlp, X[:1]), tmp_path / "w.onnx")
    np.savez(tmp_path / "w.npz", X=X, y=y, sample_weight=w)
    problem = load_user_problem(UserFiles(str(tmp_path / "w.onnx"), (str(tmp_path / "w.npz"),)))
    names = [n for n in same if TORCH or not n.startswith("torch")]
    found = {n: make_contender(n, problem, 16, shuffle=False).fit(3).loss_curve_ for n in names}
    for name in names[1:]:
        np.testing.assert_allclose(found[name], found[names[0]], rtol=1e-5, err_msg=name)


def test_sklearn_sgd_leaves_blank_the_losses_its_printout_cannot_tell(tmp_path):
    """SGDRegressor prints its epoch losses with 6 decimals, unweighted: a linear model
    that fits its data to 1e-9 reads "0.000000", which is no loss of 0; weighted data
    read the unweighted mean. Both are left blank (NaN); a loss it prints with 3
    significant digits or more is kept, and follows the engine's trajectory."""
    rng = np.random.RandomState(0)
    X = rng.randn(200, 4).astype(np.float32)
    y = X @ np.array([1.0, 2.0, 3.0, 4.0]) + 0.5
    onnx.save(to_onnx(LinearRegression().fit(X, y), X[:1]), tmp_path / "linreg.onnx")
    data = {
        "fit": {"y": y + 1e-4 * rng.randn(200)},
        "far": {"y": 2 * y},
        "weighted": {"y": 2 * y, "sample_weight": rng.uniform(0.5, 2, 200)},
    }
    curves = {}
    for name, arrays in data.items():
        np.savez(tmp_path / f"{name}.npz", X=X, **arrays)
        files = UserFiles(str(tmp_path / "linreg.onnx"), (str(tmp_path / f"{name}.npz"),))
        problem = load_user_problem(files)
        curves[name] = make_contender("sklearn-sgd", problem, 1, shuffle=False).fit(3).loss_curve_
        if name == "far":
            engine = make_contender("ort-portable-fwbw", problem, 1, shuffle=False).fit(3)
    assert np.isnan(curves["fit"]).all() and len(curves["fit"]) == 3
    assert np.isnan(curves["weighted"]).all()
    np.testing.assert_allclose(curves["far"], engine.loss_curve_, rtol=1e-5)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_the_layers_of_a_converted_classifier(n_classes):
    rng = np.random.RandomState(0)
    X = rng.randn(60, 4).astype(np.float32)
    y = rng.randint(0, n_classes, 60)
    mlp = fitted(MLPClassifier(hidden_layer_sizes=(5,), activation="logistic", max_iter=1), X, y)
    coefs, intercepts, activation, out = mlp_layers(to_onnx(mlp, X[:1], options={"zipmap": False}))
    assert activation == "logistic" and out == mlp.out_activation_
    for found, expected in zip([*coefs, *intercepts], [*mlp.coefs_, *mlp.intercepts_]):
        np.testing.assert_allclose(found, expected, rtol=1e-6)
    # Gemm layers, as torch's Linear exports them (transB=1 there, 0 here)
    coefs, intercepts, activation, out = mlp_layers(tanh_network())
    assert activation == "tanh" and out == "identity"
    for found, expected in zip([*coefs, *intercepts], [W1, W2, B1, B2.ravel()]):
        np.testing.assert_array_equal(found, expected)
    transposed = tanh_network()  # torch's form: the weights stored (out, in), transB=1
    for node in transposed.graph.node:
        if node.op_type == "Gemm":
            node.attribute.append(helper.make_attribute("transB", 1))
    for init in transposed.graph.initializer:
        if init.name in ("W1", "W2"):
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).T.copy(), init.name))
    for found, expected in zip(mlp_layers(transposed)[0], [W1, W2]):
        np.testing.assert_array_equal(found, expected)


def test_model_size_axis():
    assert sized_problems(("linear", "mlp"), ((8, 4), (16,))) == ("linear", "mlp-8-4", "mlp-16")
    problem = make_problem("mlp-multiclass-8-4", "digits", n_samples=100)
    assert problem.hidden == (8, 4) and problem.task == "multiclass"
    assert problem.trained_values == 64 * 8 + 8 + 8 * 4 + 4 + 4 * 10 + 10
    generated = make_problem("mlp-8", "make_regression", n_samples=300, n_features=7)
    assert generated.data.X_train.shape == (240, 7)


@pytest.mark.training_build
def test_cli_hidden_runs_every_size(tmp_path):
    results = run_bench(
        tmp_path, "--hidden", "8,4", "16", "--problem", "mlp", "--dataset", "make_regression",
        "--n-samples", "120", "--n-features", "5", "--contenders", "ort-fwbw",
    )  # fmt: skip
    assert list(results.problem) == ["mlp-8-4", "mlp-16"]
    assert list(results.trained_values) == [5 * 8 + 8 + 8 * 4 + 4 + 4 + 1, 5 * 16 + 16 + 16 + 1]
    assert len(trained(results)) == len(results)
    title = "## mlp-8-4 (89 trained values, learning rate 0.001) on make_regression, cpu"
    assert title in summary_of(tmp_path)
    # the scaling plot of these rows with positive times (a slope on a loaded machine can
    # come out negative, and is then left out)
    (folder,) = tmp_path.iterdir()
    (folder / "scaling.png").unlink(missing_ok=True)
    timed = results.assign(seconds_per_step=results.trained_values * 1e-7)
    timed.to_csv(folder / RESULTS_CSV, index=False)
    (path,) = write_scaling_plot(folder)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results.assign(seconds_per_step=-1e-6).to_csv(folder / RESULTS_CSV, index=False)
    assert write_scaling_plot(folder) == []


def test_the_size_panel_compares_at_the_batch_most_sizes_ran():
    rows = pd.DataFrame(
        {"problem": ["a", "a", "b", "b", "c"], "batch_size": [16, 256, 16, 256, 1024]}
    )
    assert fixed_batch_size(rows) == 256
    assert fixed_batch_size(rows[rows.batch_size != 256]) == 16


def bad_inputs(folder):
    """(arguments, what the one line must say) for each kind of bad input."""
    (folder / "text.onnx").write_text("not a model")
    onnx.save(tanh_network(weights=False), folder / "still.onnx")
    onnx.save(tanh_network(input_type=TensorProto.DOUBLE), folder / "double.onnx")
    onnx.save(tanh_network(), folder / "m.onnx")
    X = np.random.RandomState(0).randn(30, 4).astype(np.float32)
    np.savez(folder / "wide.npz", X=np.hstack([X, X]), y=X[:, 0])
    np.savez(folder / "nan.npz", X=np.where(X > 1.5, np.nan, X), y=X[:, 0])
    np.savez(folder / "empty.npz", X=X[:0], y=X[:0, 0])
    np.savez(folder / "ok.npz", X=X, y=X[:, 0])
    pd.DataFrame(X, columns=list("abcd")).assign(t=X[:, 0]).to_csv(folder / "t.csv", index=False)
    pd.DataFrame(X, columns=list("abcd")).assign(t=X[:, 0], s="x").to_csv(
        folder / "text.csv", index=False
    )
    pd.DataFrame(X[:0], columns=list("abcd")).assign(t=X[:0, 0]).to_csv(
        folder / "header.csv", index=False
    )
    pd.DataFrame({"t": X[:, 0]}).to_csv(folder / "target.csv", index=False)
    pd.DataFrame(X, columns=list("abcd")).assign(t=np.where(X[:, 0] > 0, "yes", "no")).to_csv(
        folder / "names.csv", index=False
    )
    softmax = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["s"]), helper.make_node("Softmax", ["s"], ["p"])],
        "three_classes",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [None, 3])],
        [numpy_helper.from_array(np.ones((4, 3), np.float32), "W")],
    )
    onnx.save(helper.make_model(softmax), folder / "softmax.onnx")
    np.savez(folder / "labels.npz", X=X, y=np.arange(30) % 3)
    m, ok = str(folder / "m.onnx"), str(folder / "ok.npz")
    return [
        ([str(folder / "text.onnx"), ok], ["text.onnx", "not an ONNX model"]),
        ([str(folder / "still.onnx"), ok], ["still.onnx", "nothing to train"]),
        ([str(folder / "double.onnx"), ok], ["double.onnx", "float input"]),
        ([m, str(folder / "wide.npz")], ["wide.npz", "8 features", "expects 4"]),
        ([m, str(folder / "nan.npz")], ["nan.npz", "NaN"]),
        ([m, str(folder / "empty.npz")], ["empty.npz", "empty"]),
        ([m, str(folder / "t.csv"), "--target", "label"], ["t.csv", "no column 'label'"]),
        ([m, str(folder / "text.csv"), "--target", "t"], ["text.csv", "not numeric"]),
        ([m, str(folder / "header.csv"), "--target", "t"], ["header.csv", "has no rows"]),
        (
            [m, str(folder / "target.csv"), "--target", "t"],
            ["target.csv", "no feature columns besides 't'"],
        ),
        ([m, ok, "--weights", "W9"], ["m.onnx", "unknown weight 'W9'"]),
        ([m, ok, "--loss", "log"], ["ok.npz", "integer class labels"]),
        ([m, ok, "--learning-rate", "0"], ["--learning-rate must be a finite number > 0"]),
        (
            [str(folder / "softmax.onnx"), str(folder / "labels.npz")],
            ["labels.npz", "has 3", "for 3 class labels, give --loss log"],
        ),
        (
            [m, str(folder / "names.csv"), "--target", "t"],
            ["names.csv", "class names ('no', 'yes')", "--loss log"],
        ),
    ]


@pytest.mark.parametrize("command", ["bench", "profile"])
def test_bad_input_is_one_line_before_any_cell(tmp_path, capsys, command):
    out = tmp_path / "out"
    for (model, data, *options), expected in bad_inputs(tmp_path):
        argv = [command, *(["ort-fwbw"] if command == "profile" else [])]
        argv += ["--model", model, "--data", data, *options, "--out", str(out)]
        assert main(argv) == 2, expected
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("ortbench: error: "), err
        assert all(part in err for part in expected), (expected, err)
    assert not out.exists() or not any(out.iterdir())  # no run folder


def stop_profiles(monkeypatch) -> list:
    """Make ``profile`` stop (exit 130) once its checks passed; the requests it made."""
    from ortbench.commands import profile as command

    requests = []

    def stopped(request, folder, **options):
        requests.append(request)
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "profile", stopped)
    return requests


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ortbench: error: "), err
    assert "Warning" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("command", "replaced"),
    [
        (["bench"], "--problem, --dataset, --hidden, --n-samples and --n-features"),
        (["profile", "ort-fwbw"], "--problem, --dataset and --hidden"),
    ],
    ids=["bench", "profile"],
)
def test_model_and_data_refuse_the_options_they_replace(
    files, tmp_path, capsys, monkeypatch, command, replaced
):
    requests = stop_profiles(monkeypatch)
    own = ["--model", str(files / "model.onnx"), "--data", str(files / "data.npz")]
    for option in (["--problem", "cnn"], ["--dataset", "diabetes"], ["--hidden", "8"]):
        assert main([*command, *own, *option, "--out", str(tmp_path / "out")]) == 2, option
        assert one_error_line(capsys) == f"ortbench: error: --model and --data replace {replaced}\n"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert requests == []
    # and the options of your own model without it: they were ignored, silently
    for options, said in (
        (["--loss", "log"], "--loss goes"),
        (["--learning-rate", "0.1", "--weights", "W1"], "--weights and --learning-rate go"),
    ):
        assert main([*command, *options, "--out", str(tmp_path / "out")]) == 2, options
        assert one_error_line(capsys) == (
            f"ortbench: error: {said} with --model and --data (your own model): give both, "
            "or leave them out\n"
        )
    assert requests == []


def test_profile_refuses_a_batch_size_the_bench_would_not_time(
    files, tmp_path, capsys, monkeypatch
):
    """200 rows, 160 for training: batch sizes up to 20 fill an epoch with 8 batches, as
    the bench requires; 21 is refused in one line, with no warning of the trainers."""
    requests = stop_profiles(monkeypatch)
    argv = ["profile", "ort-portable-fwbw", "--model", str(files / "model.onnx")]
    argv += ["--data", str(files / "data.npz"), "--out", str(tmp_path / "out")]
    for batch_size in (21, 1000):
        assert main([*argv, "--batch-size", str(batch_size)]) == 2
        err = one_error_line(capsys)
        assert f"batch size {batch_size} is more than an eighth of the 160 training rows" in err
        assert "batch sizes up to 20 run on them" in err
        assert f"needs data of {10 * batch_size} rows" in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert main([*argv, "--batch-size", "20"]) == 130  # profiled (stopped at once)
    assert [r.batch_size for r in requests] == [20]


def test_bench_refuses_a_matrix_with_no_cell_to_run_before_its_folder(files, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["bench", "--model", str(files / "model.onnx"), "--data", str(files / "data.npz")]
    argv += ["--contenders", "ort-portable-fwbw", "--devices", "cpu", "--out", str(out)]
    assert main([*argv, "--batch-sizes", "1000", "2000"]) == 2
    err = one_error_line(capsys)
    assert err.startswith(
        "ortbench: error: no cell can run: batch size 1000 is more than an eighth of the 160 "
        "training rows of data.npz"
    )
    assert "batch sizes up to 20 run on them" in err and "(and 1 other reason)" in err
    assert not out.exists() or not any(out.iterdir())


def test_the_files_of_the_command_line_are_found_from_any_directory(tmp_path, monkeypatch):
    """``--model``/``--data`` given relative to the user's directory reach ``ab``'s and the
    profilers' workers, which run in other directories, as absolute paths."""
    import argparse

    monkeypatch.chdir(tmp_path)
    options = argparse.Namespace(
        model="m.onnx", data=["d.npz", "sub/e.npz"], target=None, sample_weight=None,
        weights=None, loss=None, learning_rate=0.05,
    )  # fmt: skip
    user = UserFiles.from_options(options)
    assert user.model == str(tmp_path / "m.onnx")
    assert user.data == (str(tmp_path / "d.npz"), str(tmp_path / "sub" / "e.npz"))
    assert user.names == ("m.onnx", "d.npz+e.npz")
    assert user.learning_rate == 0.05
    monkeypatch.chdir("/")
    assert UserFiles.from_json(user.to_json()) == user
