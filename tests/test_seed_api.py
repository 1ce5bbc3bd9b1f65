"""The seed's API (ortbench.training.seed and the seed options of the engine's pieces),
checked against numpy references, scikit-learn and what the seed documents show."""

from __future__ import annotations

import logging
import os
import pickle
import runpy
import warnings

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import cpu_build_only, weights_of
from onnx import TensorProto, helper
from skl2onnx import to_onnx
from sklearn.base import clone
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDRegressor
from sklearn.neural_network import MLPClassifier

from ortbench.training import (
    AbsoluteLearningLoss,
    BaseLearningLoss,
    BaseLearningPenalty,
    BaseLearningRate,
    ConvergenceError,
    DerivativeOptions,
    ElasticLearningLoss,
    ElasticLearningPenalty,
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
    NoLearningPenalty,
    OrtBenchError,
    OrtGradientForwardBackwardOptimizer,
    OrtGradientOptimizer,
    SquareLearningLoss,
    add_loss_output,
    onnx_derivative,
    trainable_initializers,
)
from ortbench.training.graphs.outputs import select_outputs
from ortbench.training.seed import add_loss_output as seed_add_loss_output

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "seed")
MODELS = runpy.run_path(os.path.join(EXAMPLES, "seed_models.py"))
COEF = np.array([[0.5], [-1.0], [2.0]], dtype=np.float32)
INTERCEPT = np.array([0.3], dtype=np.float32)


class _Fitted:
    coef_ = COEF.ravel()
    intercept_ = float(INTERCEPT[0])


@pytest.fixture(scope="module")
def linear():
    """A linear model (coef, intercept) and data it does not fit exactly."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(24, 3)).astype(np.float32)
    y = (X @ np.array([1.0, 2.0, -1.0]) + 0.5 + rng.normal(size=24) * 0.1).astype(np.float32)
    return MODELS["linear_onnx"](_Fitted()), X, y


def _predict(X, coef, intercept):
    return (X.astype(np.float64) @ coef + intercept).ravel()


def _gd(X, y, steps, derivative, coef=COEF, intercept=INTERCEPT, penalty=None, momentum=None):
    """Full-batch gradient descent in numpy: one (rate) per epoch; returns weights, losses."""
    coef, intercept = coef.astype(np.float64), intercept.astype(np.float64)
    velocity = [np.zeros_like(coef), np.zeros_like(intercept)]
    for rate in steps:
        d = _predict(X, coef, intercept) - y
        g = derivative(d)
        grads = [X.T @ g.reshape(-1, 1) / len(y), np.array([g.mean()])]
        if penalty is not None:
            grads[0] = grads[0] + penalty(coef)
        for k, (w, grad) in enumerate(zip((coef, intercept), grads)):
            if momentum is None:
                w -= rate * grad
            else:
                velocity[k] = momentum * velocity[k] - rate * grad
                w += momentum * velocity[k] - rate * grad
    return coef, intercept


def _seed_rates(eta0, n, power_t=0.25):
    """The seed's invscaling: the first two epochs at eta0, then eta0 / epoch ** power_t."""
    return [eta0] + [eta0 / k**power_t for k in range(1, n)]


def _fwbw(onx, X, **kwargs):
    params = dict(batch_size=len(X), max_iter=3, warm_start=True)
    params.update(kwargs)
    return OrtGradientForwardBackwardOptimizer(onx, ["coef", "intercept"], **params)


# -- learning rates ------------------------------------------------------------------------


def test_select_learning_rate_follows_the_seed():
    rate = BaseLearningRate.select(0.1)
    assert (type(rate), rate.eta0, rate.learning_rate) == (LearningRateSGD, 0.1, "invscaling")
    sgd = BaseLearningRate.select("SGD")
    assert (type(sgd), sgd.learning_rate) == (LearningRateSGD, "invscaling")
    nesterov = BaseLearningRate.select("Nesterov", momentum=0.5)
    assert (type(nesterov), nesterov.momentum) == (LearningRateSGDNesterov, 0.5)
    given = LearningRateSGD(0.3)
    assert BaseLearningRate.select(given) is given
    with pytest.raises(OrtBenchError, match="unknown learning rate"):
        BaseLearningRate.select("Adam")


def test_optimal_schedule_is_scikit_learns():
    """SGDRegressor's rate for sample t+1, read from its intercept updates on a zero
    feature, is the rate ortbench uses after t samples."""
    alpha = 0.01
    sgd = SGDRegressor(learning_rate="optimal", alpha=alpha, penalty=None, shuffle=False)
    X, y = np.zeros((1, 1)), np.array([1.0])
    rates, previous = [], 0.0
    for _ in range(5):
        sgd.partial_fit(X, y)
        rates.append((sgd.intercept_[0] - previous) / (1 - previous))
        previous = sgd.intercept_[0]
    ours = list(LearningRateSGD(learning_rate="optimal", alpha=alpha).loop(5))
    np.testing.assert_allclose(ours, rates, rtol=1e-10)


def test_loop_yields_the_rates_of_successive_epochs():
    rate = LearningRateSGD(0.1, learning_rate="invscaling", power_t=0.5)
    values = list(rate.loop(3, samples_per_epoch=10))
    np.testing.assert_allclose(values, [0.1, 0.1 / 11**0.5, 0.1 / 21**0.5])
    assert list(LearningRateSGD(0.2).loop(2)) == [0.2, 0.2]


# -- losses and penalties ------------------------------------------------------------------


def test_select_losses_and_penalties_by_the_seeds_names():
    assert type(BaseLearningLoss.select("square_error")) is SquareLearningLoss
    assert type(BaseLearningLoss.select("absolute_error")) is AbsoluteLearningLoss
    elastic = BaseLearningLoss.select("elastic", l1_weight=0.1)
    assert (type(elastic), elastic.l1_weight) == (ElasticLearningLoss, 0.1)
    assert type(BaseLearningPenalty.select(None)) is NoLearningPenalty
    assert BaseLearningPenalty.select("l1l2", l1=0.2).l1 == 0.2
    with pytest.raises(OrtBenchError, match="unknown loss"):
        BaseLearningLoss.select("hinge")
    with pytest.raises(OrtBenchError, match="takes no parameter"):
        BaseLearningLoss.select("l1", l1_weight=1.0)
    with pytest.raises(OrtBenchError, match="unknown penalty"):
        BaseLearningPenalty.select("l3")


@pytest.mark.parametrize("convention, factor", [("sklearn", 0.5), ("seed", 1.0)])
def test_square_loss_conventions(convention, factor):
    loss = SquareLearningLoss(convention=convention).build_onnx_function()
    session = onnxruntime.InferenceSession(loss.SerializeToString())
    rng = np.random.default_rng(1)
    expected, predicted = rng.normal(size=(2, 6, 2)).astype(np.float32)
    scale = np.full((6, 1), 1 / 6, dtype=np.float32)
    value, grad = session.run(
        None,
        {"expected": expected, "predicted": predicted, "loss_scale": scale, "grad_scale": scale},
    )
    d = predicted - expected
    np.testing.assert_allclose(value, factor * (d**2).sum() / 6, rtol=1e-5)
    np.testing.assert_allclose(grad, 2 * factor * d / 6, rtol=1e-5)


def test_unknown_convention_is_refused():
    with pytest.raises(OrtBenchError, match="convention"):
        SquareLearningLoss(convention="torch").build_onnx_function()
    with pytest.raises(OrtBenchError, match="convention"):
        add_loss_output(MODELS["fct_onnx"](), convention="torch")


def test_per_sample_losses(linear, regression, mlp_onnx):
    onx, X, y = linear
    model = _fwbw(onx, X, max_iter=1).fit(X, y)
    predicted = _predict(X, weights_of(model)["coef"], weights_of(model)["intercept"])
    np.testing.assert_allclose(model.losses(X, y), (predicted - y) ** 2, rtol=1e-4)
    Xr, yr = regression
    trainer = ForwardBackwardTrainer(mlp_onnx, max_iter=1).fit(Xr, yr)
    expected = 0.5 * (trainer.predict(Xr) - yr) ** 2
    np.testing.assert_allclose(trainer.losses(Xr, yr), expected, rtol=1e-4, atol=1e-7)


# -- add_loss_output ------------------------------------------------------------------------


def _loss_of(model, X, y, **extra):
    session = onnxruntime.InferenceSession(model.SerializeToString())
    return session.run(["loss"], {"X": X, "label": y.reshape(-1, 1), **extra})[0]


@pytest.mark.parametrize(
    "score_name, term",
    [("l2", lambda d: 0.5 * d**2), ("l1", np.abs), ("square_error", lambda d: 0.5 * d**2)],
)
def test_add_loss_output_seed_score_names(linear, score_name, term):
    onx, X, y = linear
    d = _predict(X, COEF, INTERCEPT) - y
    value = _loss_of(add_loss_output(onx, score_name=score_name), X, y)
    np.testing.assert_allclose(value, term(d).mean(), rtol=1e-5)


def test_add_loss_output_seed_convention_sums_to_a_1x1_loss(linear):
    onx, X, y = linear
    w = np.linspace(0.5, 2, len(X)).astype(np.float32)
    model = add_loss_output(onx, weight_name="weight", convention="seed")
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [1, 1]
    value = _loss_of(model, X, y, weight=w)
    d = _predict(X, COEF, INTERCEPT) - y
    assert value.shape == (1, 1)
    np.testing.assert_allclose(value[0, 0], (w * d**2).sum(), rtol=1e-5)


def test_add_loss_output_penalty_shorthand_is_an_l2_weight(linear):
    onx, X, y = linear
    short = _loss_of(add_loss_output(onx, penalty={"coef": 0.5}), X, y)
    long = _loss_of(add_loss_output(onx, penalty={"coef": {"l2": 0.5}}), X, y)
    plain = _loss_of(add_loss_output(onx), X, y)
    np.testing.assert_allclose(short, long)
    np.testing.assert_allclose(short - plain, 0.5 * (COEF**2).sum(), rtol=1e-5)
    with pytest.raises(OrtBenchError, match="unknown key"):
        add_loss_output(onx, penalty={"coef": {"l3": 1.0}})


def test_add_loss_output_output_index(linear):
    onx, X, y = linear
    two = helper.make_model(
        helper.make_graph(
            [*onx.graph.node, helper.make_node("Neg", ["variable"], ["negated"])],
            "two_outputs",
            list(onx.graph.input),
            [*onx.graph.output, helper.make_tensor_value_info("negated", TensorProto.FLOAT, None)],
            list(onx.graph.initializer),
        ),
        opset_imports=list(onx.opset_import),
        ir_version=onx.ir_version,
    )
    d = -_predict(X, COEF, INTERCEPT) - y
    for index in (1, "negated", -1):
        value = _loss_of(add_loss_output(two, output_index=index), X, y)
        np.testing.assert_allclose(value, 0.5 * (d**2).mean(), rtol=1e-5)
    with pytest.raises(OrtBenchError, match="out of range"):
        add_loss_output(two, output_index=2)
    with pytest.raises(OrtBenchError, match="unknown output"):
        add_loss_output(two, output_index="nothing")


# -- onnx_derivative -------------------------------------------------------------------------


@pytest.mark.training_build
def test_the_tutorials_gradient_values():
    """The values the tutorial prints for its loss's gradient (FillGrad | KeepOutputs)."""
    onx = MODELS["fct_onnx"]()
    session = onnxruntime.InferenceSession(onx.SerializeToString())
    x = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [2, 2]], dtype=np.float32)
    y = session.run(None, {"x": x})[0]
    loss = select_outputs(add_loss_output(onx, convention="seed"), ["loss"])
    loss = onnx_derivative(loss, options=DerivativeOptions.FillGrad | DerivativeOptions.KeepOutputs)
    names = [o.name for o in loss.graph.output]
    assert names == ["x_grad", "label_grad", "init_grad", "init_1_grad", "init_b10_grad", "loss"]
    feeds = {
        "x": x,
        "label": y,
        "init": np.array([[2, 3]], dtype=np.float32),
        "init_1": np.array([[0.5, 0.33333]], dtype=np.float32),
        "init_b10": np.array([1], dtype=np.float32),
    }
    result = dict(
        zip(names, onnxruntime.InferenceSession(loss.SerializeToString()).run(None, feeds))
    )
    np.testing.assert_allclose(result["loss"], [[532.5546]], rtol=1e-5)
    np.testing.assert_allclose(result["init_grad"], [[193.33316, 186.66649]], rtol=1e-5)
    np.testing.assert_allclose(result["init_1_grad"], [[109.333244, 102.666565]], rtol=1e-5)
    np.testing.assert_allclose(result["init_b10_grad"], [76.6666], rtol=1e-5)
    np.testing.assert_allclose(
        result["label_grad"].ravel(), [-4.0, -12.0, -5.33332, -13.333321, -41.99996], rtol=1e-5
    )
    np.testing.assert_allclose(
        result["x_grad"],
        [
            [2.0, 1.33332],
            [54.0, 3.99996],
            [2.66666, 33.777676],
            [59.999943, 84.44432],
            [356.99966, 517.9994],
        ],
        rtol=1e-5,
    )


def _square_plus_x():
    """No initializer: y = x * x + x."""
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Add", ["sq", "x"], ["y"])],
        "square_plus_x",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def test_derivative_of_a_model_without_initializers():
    x = np.array([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], dtype=np.float32)
    filled = onnx_derivative(
        _square_plus_x(), options=DerivativeOptions.KeepOutputs | DerivativeOptions.FillGrad
    )
    assert [o.name for o in filled.graph.output] == ["x_grad", "y"]
    x_grad, y = onnxruntime.InferenceSession(filled.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(x_grad, 2 * x + 1)
    np.testing.assert_allclose(y, x * x + x)
    upstream = np.full_like(x, 3.0)
    kept = onnx_derivative(_square_plus_x(), options=DerivativeOptions.KeepOutputs)
    assert [i.name for i in kept.graph.input] == ["x", "y_grad"]
    x_grad, _ = onnxruntime.InferenceSession(kept.SerializeToString()).run(
        None, {"x": x, "y_grad": upstream}
    )
    np.testing.assert_allclose(x_grad, 3 * (2 * x + 1))


@pytest.mark.parametrize(
    "options, match",
    [
        (DerivativeOptions.FillGrad, "needs KeepOutputs"),
        (DerivativeOptions.KeepYieldOp | DerivativeOptions.KeepOutputs, "cannot be combined"),
        (8, "must be a DerivativeOptions"),
        ("FillGrad", "must be a DerivativeOptions"),
        (True, "must be a DerivativeOptions"),
    ],
)
def test_derivative_options_are_validated_as_the_seed_did(options, match):
    with pytest.raises(OrtBenchError, match=match):
        onnx_derivative(MODELS["fct_onnx"](), options=options)


@pytest.mark.training_build
def test_keep_yield_op_gives_the_forward_backward_graph():
    grad = onnx_derivative(MODELS["fct_onnx"](), options=DerivativeOptions.KeepYieldOp)
    assert "YieldOp" in {n.op_type for n in grad.graph.node}
    with pytest.raises(OrtBenchError, match="ort-training"):
        onnx_derivative(
            MODELS["fct_onnx"](), options=DerivativeOptions.KeepYieldOp, backend="portable"
        )


# -- OrtGradientForwardBackwardOptimizer ----------------------------------------------------


def test_the_tutorials_forward_backward_repr():
    onx = MODELS["fct_onnx"]()
    model = OrtGradientForwardBackwardOptimizer(
        onx, ["init", "init_1", "init_b10"], learning_rate=1e-1, batch_size=2, max_iter=100
    )
    assert repr(model) == (
        "OrtGradientForwardBackwardOptimizer(model_onnx='ir_version...', "
        "weights_to_train=['init', 'init_1', 'init_b10'], loss_output_name='loss', "
        "max_iter=100, training_optimizer_name='SGDOptimizer', batch_size=2, "
        "learning_rate=LearningRateSGD(eta0=0.1, alpha=0.0001, power_t=0.25, "
        "learning_rate='invscaling'), device='cpu', warm_start=False, verbose=0, "
        "validation_every=10, learning_loss=SquareLearningLoss(convention='seed'), "
        "enable_logging=False, weight_name=None, learning_penalty=NoLearningPenalty(), "
        "exc=True)"
    )
    long_names = [f"I{k}_coefficient" for k in range(6)]
    assert 'weights_to_train="[\'I0_coeff..."' in repr(
        OrtGradientForwardBackwardOptimizer(onx, long_names)
    )


def test_float_rate_is_the_seeds_schedule_and_square_error_its_loss(linear):
    """A float learning rate decays by epoch as the seed's invscaling; 'square_error' is
    (p - y)^2 with gradient 2 (p - y): the trajectory of numpy's gradient descent."""
    onx, X, y = linear
    model = _fwbw(onx, X, learning_rate=0.05, max_iter=4).fit(X, y)
    coef, intercept = _gd(X, y, _seed_rates(0.05, 4), lambda d: 2 * d)
    np.testing.assert_allclose(weights_of(model)["coef"], coef, rtol=1e-4)
    np.testing.assert_allclose(weights_of(model)["intercept"], intercept, rtol=1e-4)
    assert f"value={0.05 / 4**0.25!r}" in repr(model)


def test_nesterov_by_name(linear):
    onx, X, y = linear
    model = _fwbw(onx, X, learning_rate="Nesterov", max_iter=3).fit(X, y)
    assert model.learning_rate.learning_rate == "invscaling"
    coef, intercept = _gd(X, y, _seed_rates(0.01, 3), lambda d: 2 * d, momentum=0.9)
    np.testing.assert_allclose(weights_of(model)["coef"], coef, rtol=1e-4)
    np.testing.assert_allclose(weights_of(model)["intercept"], intercept, rtol=1e-4)


@pytest.mark.parametrize(
    "loss, derivative",
    [
        ("absolute_error", np.sign),
        ("elastic", lambda d: 0.5 * np.sign(d) + d),
        (SquareLearningLoss(), lambda d: d),
    ],
)
def test_learning_loss_by_name_or_object(linear, loss, derivative):
    onx, X, y = linear
    rate = LearningRateSGD(0.05)
    model = _fwbw(onx, X, learning_rate=rate, learning_loss=loss, max_iter=2).fit(X, y)
    coef, intercept = _gd(X, y, [0.05, 0.05], derivative)
    np.testing.assert_allclose(weights_of(model)["coef"], coef, rtol=1e-4)
    np.testing.assert_allclose(weights_of(model)["intercept"], intercept, rtol=1e-4)


def test_learning_penalty_by_name(linear):
    onx, X, y = linear
    model = _fwbw(
        onx, X, learning_rate=LearningRateSGD(0.05), learning_penalty="elastic", max_iter=2
    ).fit(X, y)
    assert isinstance(model.learning_penalty, ElasticLearningPenalty)
    coef, intercept = _gd(
        X, y, [0.05, 0.05], lambda d: 2 * d, penalty=lambda w: 0.5 * np.sign(w) + w
    )
    np.testing.assert_allclose(weights_of(model)["coef"], coef, rtol=1e-4)
    np.testing.assert_allclose(weights_of(model)["intercept"], intercept, rtol=1e-4)


def test_a_fit_without_warm_start_draws_the_weights(linear):
    onx, X, y = linear
    np.random.seed(3)
    model = _fwbw(onx, X, warm_start=False, max_iter=1, learning_rate=LearningRateSGD(1e-9))
    model.fit(X, y)
    np.random.seed(3)
    drawn = np.random.randn(3, 1).astype(np.float32)
    np.testing.assert_allclose(weights_of(model)["coef"], drawn, rtol=1e-5)


@pytest.mark.parametrize("every, expected", [(0.25, [2, 4, 6, 8]), (3, [3, 6, 8])])
def test_validation_every_is_epochs_or_a_fraction(linear, every, expected):
    onx, X, y = linear
    model = _fwbw(onx, X, max_iter=8, validation_every=every)
    assert model.validation_every == expected[0]
    model.fit(X, y, X_val=X[:10], y_val=y[:10])
    assert len(model.validation_losses_) == len(expected)
    state = weights_of(model)
    d = _predict(X[:10], state["coef"], state["intercept"]) - y[:10]
    np.testing.assert_allclose(model.validation_losses_[-1], (d**2).mean(), rtol=1e-4)
    with pytest.raises(OrtBenchError, match="validation_every"):
        _fwbw(onx, X, validation_every=0)


def test_enable_logging_writes_one_line_per_epoch(linear, caplog):
    onx, X, y = linear
    with caplog.at_level(logging.INFO, logger="ortbench.seed"):
        model = _fwbw(onx, X, enable_logging=True).fit(X, y)
    lines = [r.getMessage() for r in caplog.records if r.name == "ortbench.seed"]
    assert len(lines) == 3
    for k, (line, loss) in enumerate(zip(lines, model.train_losses_), 1):
        assert f"epoch {k}/3 loss={loss:g}" in line
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ortbench.seed"):
        _fwbw(onx, X).fit(X, y)
    assert not [r for r in caplog.records if r.name == "ortbench.seed"]


def test_verbose_prints_progress(linear, capsys):
    onx, X, y = linear
    _fwbw(onx, X, verbose=1).fit(X, y)
    assert "epoch 3/3" in capsys.readouterr().err


def test_exc_raises_or_warns_on_divergence(linear):
    onx, X, y = linear
    settings = dict(learning_rate=LearningRateSGD(1e4), max_iter=5)
    with pytest.raises(ConvergenceError, match="diverged"):
        _fwbw(onx, X * 100, **settings).fit(X * 100, y)
    model = _fwbw(onx, X * 100, exc=False, **settings)
    with pytest.warns(ConvergenceWarning, match="diverged"):
        model.fit(X * 100, y)
    assert model.n_iter_ < 5
    assert all(np.isfinite(v).all() for v in weights_of(model).values())


def test_state_and_trained_onnx(linear):
    onx, X, y = linear
    model = _fwbw(onx, X, max_iter=2).fit(X, y)
    # the seed's form: OrtValues in weights_to_train order, each a copy
    values = model.get_state()
    assert [type(v) for v in values] == [onnxruntime.OrtValue] * 2
    state = weights_of(model)
    assert list(state) == ["coef", "intercept"]
    values[0].update_inplace(np.zeros_like(state["coef"]))
    np.testing.assert_array_equal(weights_of(model)["coef"], state["coef"])
    with pytest.raises(OrtBenchError, match="kind='weight' only"):
        model.get_state(kind="grad")
    full = model.get_full_state()
    assert full[0] is None and len(full) == 3
    np.testing.assert_array_equal(full[1], state["coef"])
    coef = {k: v.numpy() for k, v in model.trained_coef_.items()}
    np.testing.assert_array_equal(coef["intercept"], state["intercept"])
    model.set_state([None, COEF, INTERCEPT])
    np.testing.assert_array_equal(weights_of(model)["coef"], COEF)
    model.set_state(values)  # OrtValues, as get_state gives them
    np.testing.assert_array_equal(weights_of(model)["coef"], np.zeros_like(COEF))
    model.set_state([None, COEF, INTERCEPT])
    session = onnxruntime.InferenceSession(model.get_trained_onnx().SerializeToString())
    predicted = session.run(None, {"X": X})[0].ravel()
    np.testing.assert_allclose(predicted, _predict(X, COEF, INTERCEPT), rtol=1e-5)
    with pytest.raises(OrtBenchError, match="holds 2 weights"):
        model.set_state([COEF])
    with pytest.raises(OrtBenchError, match="kind='weight'"):
        model.get_full_state(kind="grad")


def test_training_optimizer_name_must_be_sgd(linear):
    onx, X, y = linear
    with pytest.raises(OrtBenchError, match="SGDOptimizer"):
        _fwbw(onx, X, training_optimizer_name="AdamOptimizer").fit(X, y)


# -- the examples --------------------------------------------------------------------------


def _run_example(name, monkeypatch, max_iter):
    monkeypatch.setenv("SEED_MAX_ITER", str(max_iter))
    monkeypatch.syspath_prepend(EXAMPLES)
    np.random.seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return runpy.run_path(os.path.join(EXAMPLES, name))


def test_partial_training_example_trains(monkeypatch):
    """The page's Nesterov + elastic loss + elastic penalty session: losses go down and
    the penalty shrinks the coefficients below scikit-learn's."""
    done = _run_example("partial_training.py", monkeypatch, 30)
    losses = done["losses"]
    assert len(losses) == 30 and np.mean(losses[-5:]) < losses[0]
    coef = done["state_tensors"][0].numpy()  # the seed's list of OrtValues, coef first
    assert np.abs(coef).sum() < np.abs(done["lr"].coef_).sum()


def test_forward_backward_chooses_the_weights_when_created(mlp_onnx):
    model = OrtGradientForwardBackwardOptimizer(mlp_onnx)
    assert model.weights_to_train == trainable_initializers(mlp_onnx)
    assert 'weights_to_train="[\'coeffici..."' in repr(model)


def test_the_seed_class_trains_as_the_trainer_when_told_to(linear):
    """docs/seed_api.md: scikit-learn's loss, a constant rate and warm_start make the
    seed's class follow ForwardBackwardTrainer's defaults."""
    onx, X, y = linear
    seed = _fwbw(onx, X, learning_rate=LearningRateSGD(), learning_loss=SquareLearningLoss()).fit(
        X, y
    )
    trainer = ForwardBackwardTrainer(onx, ["coef", "intercept"], batch_size=len(X), max_iter=3)
    trainer.fit(X, y)
    np.testing.assert_allclose(seed.train_losses_, trainer.train_losses_, rtol=1e-5)
    for name, value in weights_of(trainer).items():
        np.testing.assert_allclose(weights_of(seed)[name], value, rtol=1e-5)


# -- OrtGradientOptimizer ------------------------------------------------------------------


def _full(onx, X, **kwargs):
    params = dict(batch_size=len(X), max_iter=3, warm_start=True)
    params.update(kwargs)
    return OrtGradientOptimizer(onx, ["coef", "intercept"], **params)


def test_the_tutorials_full_training_repr():
    onx = add_loss_output(MODELS["fct_onnx"]())
    model = OrtGradientOptimizer(
        onx, ["init", "init_1", "init_b10"], learning_rate=1e-1, batch_size=5, max_iter=100
    )
    assert repr(model) == (
        "OrtGradientOptimizer(model_onnx='ir_version...', "
        "weights_to_train=['init', 'init_1', 'init_b10'], loss_output_name='loss', "
        "max_iter=100, training_optimizer_name='SGDOptimizer', batch_size=5, "
        "learning_rate=LearningRateSGD(eta0=0.1, alpha=0.0001, power_t=0.25, "
        "learning_rate='invscaling'), device='cpu', warm_start=False, verbose=0, "
        "validation_every=10, saved_gradient=None, sample_weight_name='weight')"
    )


def test_full_class_steps_with_the_rate_divided_by_the_batch_size(linear):
    """The seed fed the optimizer learning_rate / batch_size (its loss was a sum): with a
    mean loss in the model the step is that much smaller."""
    onx, X, y = linear
    model = _full(add_loss_output(onx), X, learning_rate=0.5, max_iter=4).fit(X, y)
    rates = [r / len(X) for r in _seed_rates(0.5, 4)]
    coef, intercept = _gd(X, y, rates, lambda d: d)
    np.testing.assert_allclose(weights_of(model)["coef"], coef, rtol=1e-4)
    np.testing.assert_allclose(weights_of(model)["intercept"], intercept, rtol=1e-4)


def test_saved_gradient_writes_the_gradient_and_training_graphs(linear, tmp_path):
    onx, X, y = linear
    path = str(tmp_path / "gradient.onnx")
    _full(add_loss_output(onx), X, saved_gradient=path, max_iter=1).fit(X, y)
    session = onnxruntime.InferenceSession(path)
    feeds = {"X": X, "label": y.reshape(-1, 1), "coef": COEF, "intercept": INTERCEPT}
    outputs = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    d = _predict(X, COEF, INTERCEPT) - y
    np.testing.assert_allclose(outputs["coef_grad"].ravel(), X.T @ d / len(X), rtol=1e-4)
    np.testing.assert_allclose(outputs["intercept_grad"], [d.mean()], rtol=1e-4)
    np.testing.assert_allclose(outputs["loss"], 0.5 * (d**2).mean(), rtol=1e-5)
    training = onnx.load(path + ".training.onnx")
    assert {"coef", "intercept"} <= {i.name for i in training.graph.input} | {
        i.name for i in training.graph.initializer
    }


def test_sample_weight_name_feeds_the_models_weight_input(linear):
    onx, X, y = linear
    half = len(X) // 2
    with pytest.raises(OrtBenchError, match="sample_weight_name"):
        _full(add_loss_output(onx), X).fit(X, y, np.ones(len(X)))
    weighted = add_loss_output(onx, weight_name="w")
    with pytest.raises(OrtBenchError, match="'weight'"):
        _full(weighted, X).fit(X, y, np.ones(len(X)))
    w = np.r_[np.ones(half), np.zeros(len(X) - half)].astype(np.float32)
    both = _full(weighted, X, sample_weight_name="w").fit(X, y, w)
    first = _full(weighted, X, sample_weight_name="w").fit(X[:half], y[:half])
    for name, value in weights_of(first).items():
        np.testing.assert_allclose(weights_of(both)[name], value, rtol=1e-5)


def test_full_class_needs_a_loss_in_the_model(linear):
    onx, X, y = linear
    with pytest.raises(OrtBenchError, match="add_loss_output"):
        _full(onx, X).fit(X, y)
    with pytest.raises(OrtBenchError, match="SGDOptimizer"):
        _full(add_loss_output(onx), X, training_optimizer_name="Adam").fit(X, y)


def test_warm_start_continues_the_seeds_schedule(linear):
    onx, X, y = linear
    once = _fwbw(onx, X, learning_rate=0.05, max_iter=4).fit(X, y)
    twice = _fwbw(onx, X, learning_rate=0.05, max_iter=2).fit(X, y).fit(X, y)
    np.testing.assert_allclose(twice.train_losses_, once.train_losses_, rtol=1e-5)
    for name, value in weights_of(once).items():
        np.testing.assert_allclose(weights_of(twice)[name], value, rtol=1e-5)


def test_seed_classes_clone(linear):
    onx, X, y = linear
    model = _fwbw(onx, X, learning_rate=0.05, validation_every=0.5, max_iter=10)
    copy = clone(model)
    assert repr(copy) == repr(model) and copy.validation_every == 5
    np.testing.assert_allclose(
        weights_of(copy.fit(X, y))["coef"], weights_of(model.fit(X, y))["coef"], rtol=1e-6
    )


@pytest.mark.training_build
def test_tutorial_example_shows_what_the_tutorial_shows(monkeypatch, tmp_path):
    """The tutorial's gradient values, its repr after 100 epochs' worth of schedule
    (value = eta0 / epochs ** 0.25), its losses going down and its "It works" predictions."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv("SEED_OUT", str(tmp_path))
    done = _run_example("onnxruntime_training_nb.py", monkeypatch, 16)
    np.testing.assert_allclose(done["result"]["loss"], [[532.5546]], rtol=1e-5)
    np.testing.assert_allclose(done["result"]["init_grad"], [[193.33316, 186.66649]], rtol=1e-5)
    for losses in (done["full_losses"]["loss"], done["fwbw_losses"]["loss"]):
        assert losses.iloc[-1] < losses.iloc[0] / 2
    assert f"value={5e-05 / 16**0.25!r}" in repr(done["train_session"])
    grid = np.random.default_rng(0).uniform(-0.2, 0.2, size=(20, 2)).astype(np.float32)
    session = onnxruntime.InferenceSession(done["trained_onx"].SerializeToString())
    error = np.abs(session.run(None, {"x": grid})[0] - done["fct"](grid)).mean()
    assert error < 0.1, error
    curves = done["mlp_losses"]
    assert (curves.iloc[-1] < curves.iloc[0]).all()
    assert sorted(p.name for p in (tmp_path / "mlp_onnx_ort").iterdir()) == sorted(
        f"{name}.onnx" for name in done["train_session2"]._graphs()
    )
    assert not any((tmp_path / "cwd").iterdir())  # nothing written where it was run


def test_full_training_example_is_close_to_scikit_learn(monkeypatch):
    """The page's linear regression, from random weights: coefficients close to
    LinearRegression's (an elastic loss and a small L2 penalty move them a little)."""
    done = _run_example("full_training.py", monkeypatch, 100)
    state = done["state_tensors"]
    np.testing.assert_allclose(state["coef"].ravel(), done["lr"].coef_, rtol=0.05)
    np.testing.assert_allclose(state["intercept"], [done["lr"].intercept_], atol=0.5)
    assert done["losses"][-1] < done["losses"][0] / 10


def test_both_seed_classes_train_the_seeds_loss_alike(linear):
    """The full class on the seed's summed loss with the rate divided by the batch size,
    the forward/backward class on the seed's squared error: one trajectory, numpy's."""
    onx, X, y = linear
    full = _full(seed_add_loss_output(onx), X, learning_rate=0.05, max_iter=3).fit(X, y)
    fwbw = _fwbw(onx, X, learning_rate=0.05, max_iter=3).fit(X, y)
    coef, intercept = _gd(X, y, _seed_rates(0.05, 3), lambda d: 2 * d)
    for model in (full, fwbw):
        np.testing.assert_allclose(weights_of(model)["coef"], coef, rtol=1e-4)
        np.testing.assert_allclose(weights_of(model)["intercept"], intercept, rtol=1e-4)
    np.testing.assert_allclose(full.train_losses_, fwbw.train_losses_, rtol=1e-4)


@pytest.mark.parametrize("kind", ["full", "fwbw"])
def test_seed_classes_pickle(linear, kind):
    onx, X, y = linear
    model = (
        _full(seed_add_loss_output(onx), X, learning_rate=0.05)
        if kind == "full"
        else _fwbw(onx, X, learning_rate="Nesterov")
    )
    model.fit(X, y)
    copy = pickle.loads(pickle.dumps(model))
    assert repr(copy) == repr(model)
    np.testing.assert_array_equal(copy.predict(X), model.predict(X))
    np.testing.assert_allclose(
        copy.fit(X, y).train_losses_, model.fit(X, y).train_losses_, rtol=1e-6
    )


def test_add_loss_output_eps_clips_the_log_loss():
    """A model passing its input through as probabilities: with p = 0 for the true class
    the loss is -log(eps)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["proba"])],
        "identity",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("proba", TensorProto.FLOAT, [None, 2])],
    )
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    X = np.array([[0.0, 1.0]], dtype=np.float32)
    label = np.array([[1.0, 0.0]], dtype=np.float32)
    model = add_loss_output(onx, score_name="log", eps=0.1)
    value = onnxruntime.InferenceSession(model.SerializeToString()).run(
        ["loss"], {"X": X, "label": label}
    )[0]
    np.testing.assert_allclose(value, -np.log(0.1), rtol=1e-5)
    with pytest.raises(OrtBenchError, match="eps applies"):
        add_loss_output(onx, eps=0.1)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(learning_rate="Adam"), "unknown learning rate"),
        (dict(learning_loss="hinge"), "unknown loss"),
        (dict(learning_penalty="l3"), "unknown penalty"),
        (dict(validation_every="often"), "validation_every"),
        (dict(weights_to_train=["nothing"]), "unknown weight"),
    ],
)
def test_bad_seed_arguments_are_one_line_errors(linear, kwargs, match):
    onx, X, y = linear
    with pytest.raises(OrtBenchError, match=match) as error:
        params = dict(weights_to_train=["coef", "intercept"], max_iter=1)
        params.update(kwargs)
        OrtGradientForwardBackwardOptimizer(onx, **params).fit(X, y)
    assert "\n" not in str(error.value)


def test_add_loss_output_on_the_tutorials_opset_14_model():
    """The tutorial's graph is opset 14: the mean's nodes must exist at that opset."""
    onx = MODELS["fct_onnx"]()
    x = np.array([[0, 0], [1, 0], [0, 1]], dtype=np.float32)
    label = np.zeros((3, 1), dtype=np.float32)
    session = onnxruntime.InferenceSession(add_loss_output(onx).SerializeToString())
    loss, y = session.run(None, {"x": x, "label": label})
    np.testing.assert_allclose(loss, 0.5 * (y**2).mean(), rtol=1e-6)


def test_loss_output_name_names_the_trained_loss(linear):
    onx, X, y = linear
    with_cost = seed_add_loss_output(onx, loss_name="cost")
    with pytest.raises(OrtBenchError, match="no output 'loss'"):
        _full(with_cost, X).fit(X, y)
    model = _full(with_cost, X, loss_output_name="cost", learning_rate=0.05).fit(X, y)
    coef, _ = _gd(X, y, _seed_rates(0.05, 3), lambda d: 2 * d)
    np.testing.assert_allclose(weights_of(model)["coef"], coef, rtol=1e-4)


@cpu_build_only
def test_device_cuda_needs_the_cuda_build(linear):
    onx, X, y = linear
    with pytest.raises(OrtBenchError, match="cuda"):
        _fwbw(onx, X, device="cuda").fit(X, y)


@pytest.mark.parametrize("zipmap", [False, True])
def test_full_trainer_trains_a_classifier_that_outputs_its_loss(zipmap):
    """A binary MLPClassifier graph with add_loss_output(score_name='log') trains as the
    same graph without it does (the log loss on its raw scores): same losses, weights."""
    X, y = make_classification(120, n_features=5, random_state=0)
    X = X.astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier((4,), max_iter=1, random_state=0).fit(X, y)
    onx = to_onnx(mlp, X[:1], options={"zipmap": zipmap})
    settings = dict(learning_rate=LearningRateSGD(0.05), max_iter=3, shuffle=False)
    own = FullTrainer(add_loss_output(onx, score_name="log"), **settings).fit(X, y)
    added = FullTrainer(onx, **settings).fit(X, y)
    np.testing.assert_allclose(own.train_losses_, added.train_losses_, rtol=1e-4)
    for name, value in weights_of(added).items():
        np.testing.assert_allclose(weights_of(own)[name], value, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(own.predict(X), added.predict(X))


def test_the_docs_count_the_named_graphs():
    from ortbench.training.seed import get_supported_functions

    docs = os.path.join(os.path.dirname(EXAMPLES), "..", "docs", "seed_api.md")
    with open(docs, encoding="utf-8") as f:
        assert f"the seed's {len(get_supported_functions())} named graphs" in f.read()
