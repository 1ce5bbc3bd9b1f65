"""The JAX contenders against scikit-learn's MLP trained from the same weights on the same
batches: loss curves and weights after a few epochs (skipped where jax is absent)."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import re

import numpy as np
import pytest

from ortbench.bench.contenders import Unavailable, make_contender
from ortbench.bench.problems import make_problem

JAX = importlib.util.find_spec("jax") is not None
needs_jax = pytest.mark.skipif(not JAX, reason="jax is not installed")


def trained(name, problem, batch_size, epochs=3, shuffle=False):
    return make_contender(name, problem, batch_size, shuffle=shuffle).fit(epochs)


def layer_weights(contender):
    """Coefficients then intercepts, whichever library trained them."""
    if hasattr(contender, "model"):  # scikit-learn's MLP
        return [*contender.model.coefs_, *contender.model.intercepts_]
    coefs, intercepts = contender.weights()
    return [*coefs, *intercepts]


def assert_same_trajectory(found, expected, rtol=1e-4):
    np.testing.assert_allclose(found.loss_curve_, expected.loss_curve_, rtol=rtol, atol=1e-6)
    for got, want in zip(layer_weights(found), layer_weights(expected), strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-5)


@needs_jax
@pytest.mark.parametrize(
    ("name", "reference", "problem_name", "dataset"),
    [
        ("jax-sgd", "sklearn-mlp-sgd", "mlp", "diabetes"),
        ("jax-nesterov", "sklearn-mlp-nesterov", "mlp", "diabetes"),
        ("jax-scan", "sklearn-mlp-sgd", "mlp", "diabetes"),
        ("jax-sgd", "sklearn-mlp-sgd", "mlp-binary", "breast_cancer"),
        ("jax-nesterov", "sklearn-mlp-nesterov", "mlp-multiclass", "digits"),
    ],
)
def test_jax_follows_scikit_learn(name, reference, problem_name, dataset):
    problem = make_problem(problem_name, dataset, n_samples=200)
    # 160 training rows in batches of 24: six full batches and a partial one per epoch
    assert len(problem.data.X_train) % 24
    assert_same_trajectory(trained(name, problem, 24), trained(reference, problem, 24))


@needs_jax
def test_jax_follows_scikit_learn_with_a_penalty_and_a_decaying_rate():
    """alpha's penalty on the coefficients and 'invscaling' rates, changed once per epoch."""
    problem = make_problem("mlp", "diabetes", n_samples=200)
    reference = copy.deepcopy(problem.reference)
    reference.set_params(alpha=0.5, learning_rate="invscaling", power_t=0.25)
    problem = dataclasses.replace(problem, reference=reference, eta0=0.01)
    for name, baseline in [
        ("jax-sgd", "sklearn-mlp-sgd"),
        ("jax-nesterov", "sklearn-mlp-nesterov"),
    ]:
        assert_same_trajectory(trained(name, problem, 16), trained(baseline, problem, 16))


@needs_jax
@pytest.mark.parametrize("batch_size", [24, 160, 1])
def test_one_scan_per_epoch_is_the_same_trajectory_as_one_call_per_step(batch_size):
    problem = make_problem("mlp", "diabetes", n_samples=200)
    step = trained("jax-sgd", problem, batch_size, epochs=2, shuffle=True)
    scan = trained("jax-scan", problem, batch_size, epochs=2, shuffle=True)
    assert_same_trajectory(scan, step, rtol=1e-5)
    assert scan.n_steps_ == step.n_steps_ == 2 * problem.steps_per_epoch(batch_size)
    # the timed path continues from the current weights, as fit does
    assert_same_trajectory(scan.continue_fit(1), step.continue_fit(1), rtol=1e-5)


TORCH = importlib.util.find_spec("torch") is not None


@needs_jax
@pytest.mark.skipif(not TORCH, reason="torch is not installed")
@pytest.mark.parametrize("problem_name", ["cnn", "transformer"])
@pytest.mark.parametrize(
    ("name", "reference"),
    [("jax-sgd", "torch-sgd"), ("jax-nesterov", "torch-nesterov"), ("jax-scan", "torch-sgd")],
)
def test_jax_trains_the_networks_scikit_learn_cannot_express_as_torch_does(
    problem_name, name, reference
):
    """The graph run by JAX (convolutions, pooling, attention, LayerNorm, GELU's Erf)
    against the same graph run by torch: from the same weights, on the same batches."""
    problem = make_problem(problem_name, "digits", n_samples=400)
    found = trained(name, problem, 16, epochs=2)
    expected = trained(reference, problem, 16, epochs=2)
    np.testing.assert_allclose(found.loss_curve_, expected.loss_curve_, rtol=1e-5)
    assert found.loss_curve_[1] < found.loss_curve_[0]
    X = problem.data.X_val[:20]
    np.testing.assert_allclose(found.predict(X), expected.predict(X), rtol=1e-4, atol=1e-5)


@needs_jax
def test_a_graph_jax_cannot_run_names_the_operator_and_its_node():
    problem = make_problem("transformer", "digits", n_samples=200)
    model = copy.deepcopy(problem.onnx_model)
    node = next(n for n in model.graph.node if n.op_type == "Erf")
    node.op_type = "Erfc"
    problem = dataclasses.replace(problem, onnx_model=model)
    expected = f"jax runs no ONNX operator Erfc (node {node.name!r})"
    with pytest.raises(Unavailable, match=rf"^{re.escape(expected)}$"):
        make_contender("jax-sgd", problem, 16)


@needs_jax
def test_a_node_form_jax_refuses_makes_its_cell_unavailable(tmp_path):
    """A node whose operator JAX runs, in a form it refuses (AveragePool with ceil_mode
    and counted pads): the cell is unavailable, found before anything trains, as torch's
    are, not failed."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from ortbench.bench.contenders import unavailable_reason
    from ortbench.bench.user_model import UserFiles, load_user_problem

    nodes = [
        helper.make_node("Reshape", ["X", "shape"], ["image"]),
        helper.make_node(
            "AveragePool",
            ["image"],
            ["pooled"],
            name="pool",
            kernel_shape=[3, 3],
            strides=[2, 2],
            ceil_mode=1,
            count_include_pad=1,
        ),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "W"], ["Y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([-1, 1, 4, 4], np.int64), "shape"),
        numpy_helper.from_array(np.ones((4, 1), np.float32), "W"),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, tmp_path / "net.onnx")
    X = np.random.default_rng(0).standard_normal((80, 16)).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=X, y=X.sum(1))
    problem = load_user_problem(UserFiles(str(tmp_path / "net.onnx"), (str(tmp_path / "d.npz"),)))
    reason = unavailable_reason("jax-sgd", problem, 8, "cpu")
    assert reason == (
        "jax runs no AveragePool with both ceil_mode and count_include_pad (node 'pool')"
    )
