"""A classifier whose output is a Sigmoid's (torch's ``BCELoss`` form) trains with the
binary log loss of each column, -(y log p + (1 - y) log(1 - p)): with one column for two
classes as scikit-learn's binary MLPClassifier does (and predicts both classes'
probabilities), with one column per class as torch's BCELoss on one-hot targets."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import StandardScaler

from ortbench.bench.contenders import CONTENDERS, Unavailable, make_contender
from ortbench.bench.user_model import UserFiles, load_user_problem
from ortbench.cli import main
from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    NegLogLearningLoss,
    OrtBenchError,
)
from ortbench.training.runtime.build import runtime_problem

EPOCHS, BATCH = 3, 32


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X).astype(np.float32)
    return X[:300], np.where(y[:300] == 1, "benign", "malignant")  # any two labels


def _started(X, y) -> MLPClassifier:
    """scikit-learn's binary MLP (one logistic output column) after one epoch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return MLPClassifier(
            hidden_layer_sizes=(8,),
            solver="sgd",
            learning_rate_init=0.05,
            momentum=0.0,
            alpha=1e-4,
            batch_size=BATCH,
            shuffle=False,
            max_iter=1,
            random_state=0,
        ).fit(X, y)


def sigmoid_mlp(mlp: MLPClassifier, last: str = "Sigmoid") -> onnx.ModelProto:
    """The MLP as a plain graph (no label output): MatMul, Add, Relu, MatMul, Add, then
    ``last`` makes the one probability column."""
    (W1, W2), (b1, b2) = mlp.coefs_, mlp.intercepts_
    tail = (
        [helper.make_node("Sigmoid", ["s"], ["p"])]
        if last == "Sigmoid"
        else [helper.make_node("Clip", ["s", "zero", "one"], ["p"])]
    )
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h"]),
        helper.make_node("MatMul", ["h", "W2"], ["s0"]),
        helper.make_node("Add", ["s0", "b2"], ["s"]),
        *tail,
    ]
    values = {"W1": W1, "b1": b1, "W2": W2, "b2": b2}
    constants = {"zero": np.float32(0), "one": np.float32(1)} if last != "Sigmoid" else {}
    graph = helper.make_graph(
        nodes,
        "binary",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, W1.shape[0]])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [None, 1])],
        [
            numpy_helper.from_array(np.asarray(v, np.float32), k)
            for k, v in {**values, **constants}.items()
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _trainers():
    cases = [
        (FullTrainer, "portable", False),
        (FullTrainer, "portable", True),
        (ForwardBackwardTrainer, "portable", False),
    ]
    training = [
        (FullTrainer, "ort-training", False),
        (ForwardBackwardTrainer, "ort-training", False),
    ]
    return cases + [pytest.param(*c, marks=pytest.mark.training_build) for c in training]


@pytest.mark.parametrize(("trainer", "backend", "loop"), _trainers())
def test_a_sigmoid_column_follows_scikit_learns_binary_mlp(data, trainer, backend, loop):
    X, y = data
    mlp = _started(X, y)
    loss = {"loss": "log"} if trainer is FullTrainer else {"learning_loss": NegLogLearningLoss()}
    model = trainer(
        sigmoid_mlp(mlp),
        **loss,
        learning_rate=LearningRateSGD(eta0=0.05, alpha=1e-4),
        batch_size=BATCH,
        max_iter=EPOCHS,
        shuffle=False,
        backend=backend,
        **({"epoch_loop": True} if loop else {}),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.set_params(warm_start=True, max_iter=EPOCHS).fit(X, y)
    model.fit(X, y)
    # scikit-learn's curve holds the first epoch's loss too, and its penalty term
    np.testing.assert_allclose(model.train_losses_, mlp.loss_curve_[1:], rtol=2e-4)
    np.testing.assert_allclose(model.predict_proba(X), mlp.predict_proba(X), atol=2e-5)
    np.testing.assert_array_equal(model.classes_, mlp.classes_)
    np.testing.assert_array_equal(model.predict(X), mlp.predict(X))
    assert model.score(X, y) == pytest.approx(mlp.score(X, y))


def test_one_column_not_made_by_a_sigmoid_is_refused_in_one_line(data):
    X, y = data
    model = FullTrainer(sigmoid_mlp(_started(X, y), last="Clip"), loss="log", backend="portable")
    with pytest.raises(OrtBenchError, match="one column for 2 classes") as error:
        model.fit(X, y)
    assert "\n" not in str(error.value) and "Sigmoid" in str(error.value)


def _files(tmp_path, model: onnx.ModelProto, X, y) -> UserFiles:
    onnx.save(model, tmp_path / "binary.onnx")
    np.savez(tmp_path / "binary.npz", X=X, y=y)
    data = (str(tmp_path / "binary.npz"),)
    return UserFiles(str(tmp_path / "binary.onnx"), data, loss="log")


def test_every_contender_trains_the_binary_loss_of_a_users_sigmoid_column(data, tmp_path):
    X, y = data
    labels = (y == "benign").astype(np.int64)
    files = _files(tmp_path, sigmoid_mlp(_started(X, labels)), X, labels)
    problem = load_user_problem(files)
    assert (problem.task, problem.loss_name) == ("binary", "log")
    curves = {}
    for name in CONTENDERS:
        if "nesterov" in name or name == "sklearn-sgd":
            continue
        if name.startswith("ort-") and "portable" not in name and runtime_problem():
            continue
        try:
            contender = make_contender(name, problem, BATCH, shuffle=False)
        except Unavailable as e:
            assert name.split("-")[0] in ("torch", "jax"), (name, str(e))
            continue
        curves[name] = contender.fit(2).loss_curve_
    assert "sklearn-mlp-sgd" in curves and "ort-portable-full" in curves
    reference = curves.pop("sklearn-mlp-sgd")
    for name, curve in curves.items():
        np.testing.assert_allclose(curve, reference, rtol=2e-4, err_msg=name)


def test_class_names_of_a_csv_train_as_their_sorted_index(data, tmp_path):
    """A CSV's text labels are classes in sorted order, the last one positive, as the
    trainers' ``classes_``: the same problem as its integer labels."""
    X, y = data
    model = sigmoid_mlp(_started(X, y))
    onnx.save(model, tmp_path / "binary.onnx")
    table = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])]).assign(label=y)
    table.to_csv(tmp_path / "names.csv", index=False)
    named = load_user_problem(
        UserFiles(
            str(tmp_path / "binary.onnx"), (str(tmp_path / "names.csv"),), "label", loss="log"
        )
    )
    numbered = _files(tmp_path, model, X, (y == "malignant").astype(np.int64))
    expected = load_user_problem(numbered)
    assert named.task == "binary"
    np.testing.assert_array_equal(named.data.y_train, expected.data.y_train)
    curves = [
        make_contender("ort-portable-full", p, BATCH).fit(1).loss_curve_ for p in (named, expected)
    ]
    assert curves[0] == curves[1]


def test_bench_refuses_one_column_not_made_by_a_sigmoid(data, tmp_path, capsys):
    X, y = data
    labels = (y == "benign").astype(np.int64)
    files = _files(tmp_path, sigmoid_mlp(_started(X, labels), last="Clip"), X, labels)
    argv = ["bench", "--model", files.model, "--data", files.data[0], "--loss", "log"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 column for 2 classes" in err and "Sigmoid" in err, err
    assert not (tmp_path / "out").exists()


def _torch_bce_curve(module, X: np.ndarray, targets: np.ndarray, lr: float) -> list[float]:
    """torch's own SGD on the module with BCELoss summed over the columns and averaged over
    the rows of each batch, in order: each epoch's mean of the batches' losses."""
    import torch

    optimizer = torch.optim.SGD(module.parameters(), lr=lr)
    inputs, expected = torch.from_numpy(X), torch.from_numpy(targets)
    curve = []
    for _ in range(EPOCHS):
        total = 0.0
        for start in range(0, len(X), BATCH):
            rows = slice(start, start + BATCH)
            optimizer.zero_grad()
            p = module(inputs[rows])
            loss = torch.nn.functional.binary_cross_entropy(p, expected[rows], reduction="sum")
            (loss / len(p)).backward()
            optimizer.step()
            total += loss.item()
        curve.append(total / len(X))
    return curve


@pytest.mark.parametrize("columns", [1, 10], ids=["one column", "one per class"])
def test_a_torch_bce_classifier_follows_torch(columns):
    """The module torch trains with BCELoss, exported as it is, on the digits (two classes
    for one column, ten for ten: each column's binary loss, not the log of each row's own
    column alone): the same epoch losses and probabilities."""
    torch = pytest.importorskip("torch")
    from sklearn.datasets import load_digits
    from torch_modules import export

    X, y = load_digits(n_class=2 if columns == 1 else 10, return_X_y=True)
    X, y = (X[:300] / 16).astype(np.float32), y[:300]
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(64, 12), torch.nn.Tanh(), torch.nn.Linear(12, columns), torch.nn.Sigmoid()
    )
    model = FullTrainer(
        export(module, 64),
        loss="log",
        learning_rate=LearningRateSGD(eta0=0.05, alpha=0.0),
        batch_size=BATCH,
        max_iter=EPOCHS,
        shuffle=False,
        backend="portable",
    ).fit(X, y)
    assert model.learning_loss_.probability_function == "sigmoid"
    if columns == 1:
        targets = (y == model.classes_[1]).astype(np.float32).reshape(-1, 1)
    else:
        targets = np.eye(columns, dtype=np.float32)[y]
    np.testing.assert_allclose(
        model.train_losses_, _torch_bce_curve(module, X, targets, 0.05), rtol=1e-5
    )
    p = module(torch.from_numpy(X)).detach().numpy()
    expected = np.hstack([1 - p, p]) if columns == 1 else p
    np.testing.assert_allclose(model.predict_proba(X), expected, atol=1e-6)
