"""Each loss is written three times in one class: its ONNX graphs, its numpy rows and its
torch rows. The three agree in value, and torch's autograd agrees with the gradient graph."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from skl2onnx import to_onnx
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPRegressor

from ortbench.bench.contenders import make_contender
from ortbench.bench.user_model import USER_LOSSES, UserFiles, load_user_problem
from ortbench.training.losses import (
    LOSSES,
    ElasticLearningLoss,
    NegLogLearningLoss,
    SquareLearningLoss,
    loss_from_name,
)

torch = pytest.importorskip("torch")

#: Every loss by its name, and the variants its parameters select.
CASES = {
    **{name: loss_from_name(name) for name in LOSSES},
    "squared_error-seed": SquareLearningLoss(convention="seed"),
    "elastic-0.2-0.9": ElasticLearningLoss(0.2, 0.9),
    "log-sigmoid": NegLogLearningLoss(probability_function="sigmoid"),
    "log-softmax": NegLogLearningLoss(probability_function="softmax"),
}


def batch(loss, rows: int = 7, columns: int = 3):
    """Predictions and targets of the kind ``loss`` reads, and sample weights."""
    rng = np.random.default_rng(5)
    weight = rng.uniform(0.5, 2, rows)
    if not loss.is_classification:
        predicted = rng.standard_normal((rows, columns))
        return predicted, rng.standard_normal((rows, columns)), weight
    expected = np.eye(columns)[rng.integers(0, columns, rows)]
    if loss.probability_function == "sigmoid":  # independent binary columns
        expected = rng.integers(0, 2, (rows, columns)).astype(np.float64)
    if loss.probability_function is None:
        return rng.dirichlet(np.ones(columns), rows), expected, weight
    return 3 * rng.standard_normal((rows, columns)), expected, weight


def run(model, feeds):
    session = onnxruntime.InferenceSession(model.SerializeToString())
    return session.run(None, {k: v.astype(np.float32) for k, v in feeds.items()})


@pytest.mark.parametrize("name", list(CASES))
def test_numpy_rows_are_the_samples_graph(name):
    loss = CASES[name]
    predicted, expected, _ = batch(loss)
    (graph_rows,) = run(
        loss.build_samples_function(), {"expected": expected, "predicted": predicted}
    )
    np.testing.assert_allclose(loss.numpy_rows(predicted, expected), graph_rows, rtol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_torch_rows_and_autograd_are_the_loss_graph(name):
    loss = CASES[name]
    predicted, expected, weight = batch(loss)
    tensor = torch.tensor(predicted, requires_grad=True)
    rows = loss.torch_rows(tensor, torch.tensor(expected))
    np.testing.assert_allclose(
        rows.detach().numpy(), loss.numpy_rows(predicted, expected), rtol=1e-12
    )
    share = weight / weight.sum()
    (rows * torch.tensor(share)).sum().backward()
    scale = share.reshape(-1, 1)
    feeds = {"expected": expected, "predicted": predicted, "loss_scale": scale}
    value, gradient = run(loss.build_onnx_function(), {**feeds, "grad_scale": scale})
    assert value == pytest.approx(float(share @ rows.detach().numpy()), rel=1e-5)
    np.testing.assert_allclose(gradient, tensor.grad.numpy(), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("columns", [1, 3])
@pytest.mark.parametrize("name", ["squared_error", "absolute_error", "elastic", "log-sigmoid"])
def test_a_loss_graph_of_known_width_keeps_a_matrix_loss(name, columns):
    """The trainers' loss graph, built for the prediction's width: the loss of numpy's rows,
    shaped (1, 1), and for one column without the node that reduces it to a scalar."""
    loss = CASES[name]
    predicted, expected, weight = batch(loss, columns=columns)
    scale = (weight / weight.sum()).reshape(-1, 1)
    feeds = {"expected": expected, "predicted": predicted, "loss_scale": scale}
    model = loss.build_onnx_function(columns)
    value, gradient = run(model, {**feeds, "grad_scale": -0.5 * scale})
    assert value.shape == (1, 1)
    reference = scale.ravel() @ loss.numpy_rows(predicted, expected)
    assert value[0, 0] == pytest.approx(reference, rel=1e-5)
    _, scalar_gradient = run(loss.build_onnx_function(), {**feeds, "grad_scale": -0.5 * scale})
    np.testing.assert_array_equal(gradient, scalar_gradient)
    reductions = [n for n in model.graph.node if n.op_type == "ReduceSum"]
    assert len(reductions) == (columns != 1)


@pytest.mark.parametrize("name", list(CASES))
def test_the_losses_of_an_epoch_are_numpy_rows_weighed_batch_by_batch(name):
    """The graph of every batch's loss at once (the losses computed after an epoch) gives
    each batch's weighted mean of numpy's rows; the gradient-only graph a step runs then
    gives the loss graph's gradient, reading no loss scale."""
    loss = CASES[name]
    predicted, expected, weight = batch(loss, rows=12)
    scale = np.concatenate([w / w.sum() for w in weight.reshape(3, 4)]).reshape(-1, 1)
    stacked = {"expected": expected, "predicted": predicted, "loss_scale": scale}
    (losses,) = run(
        loss.build_epoch_function(), {k: v.reshape(3, 4, -1) for k, v in stacked.items()}
    )
    rows = loss.numpy_rows(predicted, expected) * scale.ravel()
    np.testing.assert_allclose(losses.ravel(), rows.reshape(3, 4).sum(axis=1), rtol=1e-5)
    assert losses.shape == (3, 1, 1)
    only = loss.build_onnx_function(3, gradient_only=True)
    assert [i.name for i in only.graph.input] == ["expected", "predicted", "grad_scale"]
    assert [o.name for o in only.graph.output] == ["loss_grad"]
    grad_scale = -0.5 * scale
    (gradient,) = run(
        only, {"expected": expected, "predicted": predicted, "grad_scale": grad_scale}
    )
    _, reference = run(loss.build_onnx_function(3), {**stacked, "grad_scale": grad_scale})
    np.testing.assert_array_equal(gradient, reference)


def test_neglog_rows_are_scikit_learn_log_loss():
    from sklearn.metrics import log_loss

    loss = LOSSES["log"]()
    predicted, expected, weight = batch(loss)
    labels = expected.argmax(axis=1)
    rows = loss.numpy_rows(predicted, expected)
    assert np.average(rows, weights=weight) == pytest.approx(
        log_loss(labels, predicted, sample_weight=weight, labels=range(3)), rel=1e-12
    )


def test_a_user_problem_trains_with_a_loss_found_by_its_name(tmp_path):
    """``--loss elastic``, which no contender names in its own code: the starting loss is
    the elastic loss of the model's output, and the engine's contenders and torch follow
    one trajectory."""
    rng = np.random.RandomState(0)
    X = rng.randn(300, 5).astype(np.float32)
    y = np.sin(X[:, 0]) + X[:, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPRegressor(hidden_layer_sizes=(6,), max_iter=1, random_state=0).fit(X, y)
    onnx.save(to_onnx(mlp, X[:1]), tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", X=X, y=y)
    assert "elastic" in USER_LOSSES
    files = UserFiles(str(tmp_path / "m.onnx"), (str(tmp_path / "m.npz"),), loss="elastic")
    problem = load_user_problem(files)
    data = problem.data
    error = mlp.predict(data.X_train).astype(np.float64) - data.y_train
    own = np.mean(0.5 * np.abs(error) + 0.5 * error**2)
    assert problem.loss(data.y_train, mlp.predict(data.X_train)) == pytest.approx(own, rel=1e-6)
    names = ["ort-fwbw", "ort-full", "ort-portable-fwbw", "torch-sgd"]
    found = {n: make_contender(n, problem, 16, shuffle=False).fit(3).loss_curve_ for n in names}
    assert found["ort-fwbw"][-1] < own
    for name in names[1:]:
        np.testing.assert_allclose(found[name], found[names[0]], rtol=1e-4, err_msg=name)
