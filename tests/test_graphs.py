"""Graph tools, gradient graphs and loss graphs against numpy and finite differences."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import fitted_mlp
from onnx import helper, numpy_helper
from skl2onnx import to_onnx
from sklearn.linear_model import LinearRegression, LogisticRegression, SGDRegressor
from sklearn.neural_network import MLPClassifier

from ortbench.training import (
    AbsoluteLearningLoss,
    DerivativeOptions,
    ElasticLearningLoss,
    ElasticLearningPenalty,
    LearningRateSGD,
    LearningRateSGDNesterov,
    NegLogLearningLoss,
    SquareLearningLoss,
    add_loss_output,
    onnx_derivative,
    onnx_rename_weights,
    rewrite_linear_nodes,
    trainable_initializers,
)
from ortbench.training.graphs.loading import load_model
from ortbench.training.graphs.shapes import drop_noop_copies
from ortbench.training.graphs.weights import check_weight_names, get_initializers
from ortbench.training.steps.buffers import WeightBuffers


def run(model: onnx.ModelProto, feeds: dict) -> list:
    return onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)


def initializers(model) -> dict:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def test_trainable_initializers_skip_constants(regression):
    X, y = regression
    onx = to_onnx(MLPClassifier(hidden_layer_sizes=(3,), max_iter=2).fit(X, y > 0), X[:1])
    assert "unity" in initializers(onx)
    assert trainable_initializers(onx) == [
        "coefficient",
        "intercepts",
        "coefficient1",
        "intercepts1",
    ]
    renamed = onnx_rename_weights(onx)
    assert [i.name for i in renamed.graph.initializer][:2] == ["I0_coefficient", "I1_intercepts"]
    np.testing.assert_array_equal(run(renamed, {"X": X})[1], run(onx, {"X": X})[1])


def _static_rows(model: onnx.ModelProto, rows: int) -> onnx.ModelProto:
    for value in [*model.graph.input, *model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_value = rows
    return model


def test_drop_noop_copies_keeps_outputs(mlp_onnx, regression):
    """skl2onnx starts an MLP with a Cast of its float input to float and ends it with
    Reshape(y, [-1, 1]) on a (n, 1) tensor: the Cast goes, and once n is static the Reshape
    too; the output keeps its name and its values."""
    X, _ = regression
    X = X[:7]
    static = _static_rows(load_model(mlp_onnx), len(X))
    assert {"Cast", "Reshape"} <= {n.op_type for n in static.graph.node}
    dropped = drop_noop_copies(static)
    assert not {"Cast", "Reshape"} & {n.op_type for n in dropped.graph.node}
    assert [o.name for o in dropped.graph.output] == [o.name for o in static.graph.output]
    onnx.checker.check_model(dropped, full_check=True)
    np.testing.assert_array_equal(run(dropped, {"X": X})[0], run(static, {"X": X})[0])
    # with a dynamic batch the shape is unknown: nothing is dropped
    assert "Reshape" in [n.op_type for n in drop_noop_copies(mlp_onnx).graph.node]


def test_drop_noop_copies_keeps_real_reshapes_and_casts():
    """A Reshape that changes the shape stays, and a Cast that changes the type; a no-op
    one feeding another node goes and that node reads its input; a no-op Reshape from a
    graph input to a graph output stays."""
    f = onnx.TensorProto.FLOAT
    shapes = {"same": [2, 3], "flat": [6], "zero": [0, -1]}
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "same"], ["y"]),
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Reshape", ["r", "zero"], ["r2"]),
            helper.make_node("Cast", ["r2"], ["c"], to=f),
            helper.make_node("Neg", ["c"], ["n"]),
            helper.make_node("Reshape", ["n", "flat"], ["z"]),
            helper.make_node("Cast", ["n"], ["d"], to=onnx.TensorProto.DOUBLE),
        ],
        "g",
        [helper.make_tensor_value_info("x", f, [2, 3])],
        [
            helper.make_tensor_value_info("y", f, [2, 3]),
            helper.make_tensor_value_info("z", f, [6]),
            helper.make_tensor_value_info("d", onnx.TensorProto.DOUBLE, [2, 3]),
        ],
        [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in shapes.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    dropped = drop_noop_copies(model)
    assert [(n.op_type, list(n.input)) for n in dropped.graph.node] == [
        ("Reshape", ["x", "same"]),
        ("Relu", ["x"]),
        ("Neg", ["r"]),
        ("Reshape", ["n", "flat"]),
        ("Cast", ["n"]),
    ]
    assert "zero" not in initializers(dropped)
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    for a, b in zip(run(dropped, {"x": x}), run(model, {"x": x})):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "estimator",
    [LinearRegression(), SGDRegressor(max_iter=5, tol=None)],
    ids=["LinearRegression", "SGDRegressor"],
)
def test_linear_regressor_rewritten_into_trainable_nodes(estimator, regression):
    X, y = regression
    onx = to_onnx(estimator.fit(X, y), X[:1])
    assert [n.op_type for n in onx.graph.node] == ["LinearRegressor"]
    rewritten = rewrite_linear_nodes(onx)
    assert {n.op_type for n in rewritten.graph.node} == {"MatMul", "Add"}
    assert len(trainable_initializers(rewritten)) == 2
    np.testing.assert_allclose(
        run(rewritten, {"X": X})[0].ravel(), estimator.predict(X), rtol=1e-4, atol=1e-4
    )


def binary_linear_classifier(post_transform: str, rows: int = 1) -> onnx.ModelProto:
    """One LinearClassifier node with a single row of coefficients, as a binary model has
    (or two rows that are not each other's negation)."""
    node = helper.make_node(
        "LinearClassifier",
        ["X"],
        ["label", "scores"],
        domain="ai.onnx.ml",
        coefficients=[0.5, -1.0, 0.25, 2.0, -0.5, 1.0, 0.5, -2.0, 0.0, 0.75][: 5 * rows],
        intercepts=[0.1, -0.3][:rows],
        classlabels_ints=[3, 7],
        post_transform=post_transform,
    )
    graph = helper.make_graph(
        [node],
        "binary",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 5])],
        [
            helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [None]),
            helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [None, 2]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


@pytest.mark.parametrize(
    ("make_model", "columns"),
    [
        pytest.param(lambda X, y: binary_linear_classifier("NONE"), 1, id="binary-none"),
        pytest.param(
            lambda X, y: binary_linear_classifier("LOGISTIC"),
            1,
            marks=pytest.mark.xfail(
                onnxruntime.__version__ != "1.19.2",
                reason="later onnxruntime releases apply LOGISTIC to a one-row LinearClassifier "
                "(1.19.2 returns the raw scores), and the rewrite follows 1.19.2",
                strict=True,
            ),
            id="binary-logistic",
        ),
        pytest.param(
            lambda X, y: binary_linear_classifier("LOGISTIC", rows=2), 2, id="two-rows-logistic"
        ),
        pytest.param(
            lambda X, y: to_onnx(
                LogisticRegression(max_iter=200).fit(X, np.digitize(y, [-0.5, 0.5])),
                X[:1],
                options={"zipmap": False},
            ),
            3,
            id="multiclass-softmax",
        ),
        # skl2onnx writes a binary LogisticRegression as two rows (-w, w): one is trained
        pytest.param(
            lambda X, y: to_onnx(
                LogisticRegression(max_iter=200).fit(X, y > 0), X[:1], options={"zipmap": False}
            ),
            1,
            id="binary-logistic-regression",
        ),
        # fitted on class names: the labels are strings (classlabels_strings)
        pytest.param(
            lambda X, y: to_onnx(
                LogisticRegression(max_iter=200).fit(
                    X, np.array(["b", "a", "c"])[np.digitize(y, [-0.5, 0.5])]
                ),
                X[:1],
                options={"zipmap": False},
            ),
            3,
            id="multiclass-names",
        ),
        pytest.param(
            lambda X, y: to_onnx(
                LogisticRegression(max_iter=200).fit(X, np.where(y > 0, "yes", "no")),
                X[:1],
                options={"zipmap": False},
            ),
            1,
            id="binary-names",
        ),
    ],
)
def test_linear_classifier_rewritten_with_same_outputs(make_model, columns, regression):
    X, y = regression
    onx = make_model(X, y)
    assert any(n.op_type == "LinearClassifier" for n in onx.graph.node)
    rewritten = rewrite_linear_nodes(onx)
    assert not any(n.op_type == "LinearClassifier" for n in rewritten.graph.node)
    trained = get_initializers(rewritten, trainable_initializers(rewritten))
    assert sorted(v.shape[1:] for v in trained.values()) == [(), (columns,)]
    expected, got = run(load_model(onx), {"X": X}), run(rewritten, {"X": X})
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-4, atol=1e-5)


def test_newer_opset_lowered_when_the_operators_are_unchanged(regression, mlp_onnx):
    model = onnx.ModelProto()
    model.CopyFrom(mlp_onnx)
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("", 22), helper.make_opsetid("", 22)])
    grad = onnx_derivative(model)
    assert [o.version for o in grad.opset_import if o.domain == ""] == [21]


def numeric_gradient(f, value: np.ndarray, eps=1e-3) -> np.ndarray:
    grad = np.zeros(value.shape, dtype=np.float64)
    for index in np.ndindex(value.shape):
        plus, minus = value.astype(np.float64), value.astype(np.float64)
        plus[index] += eps
        minus[index] -= eps
        grad[index] = (f(plus.astype(np.float32)) - f(minus.astype(np.float32))) / (2 * eps)
    return grad


@pytest.mark.parametrize("hidden", [(), (4, 3)], ids=["linear", "mlp"])
def test_onnx_derivative_matches_finite_differences(hidden, regression):

    X, y = regression
    X = X[:7].astype(np.float64).astype(np.float32)
    onx = to_onnx(fitted_mlp(X, y[:7], hidden=hidden, activation="tanh"), X[:1])
    weights = initializers(onx)
    names = trainable_initializers(onx)
    upstream = np.random.default_rng(0).standard_normal((len(X), 1)).astype(np.float32)
    grad = onnx_derivative(onx)
    assert [i.name for i in grad.graph.input] == ["X", *names, "variable_grad"]
    assert [o.name for o in grad.graph.output] == ["X_grad"] + [f"{n}_grad" for n in names]
    feeds = {"X": X, "variable_grad": upstream, **{n: weights[n] for n in names}}
    got = dict(zip([o.name for o in grad.graph.output], run(grad, feeds)))

    def vjp(model, feeds):
        return float((run(model, feeds)[0].astype(np.float64) * upstream).sum())

    expected_x = numeric_gradient(lambda x: vjp(onx, {"X": x}), X)
    np.testing.assert_allclose(got["X_grad"], expected_x, rtol=1e-2, atol=1e-3)
    for name in names:

        def with_weight(w, name=name):
            model = onnx.ModelProto()
            model.CopyFrom(onx)
            for init in model.graph.initializer:
                if init.name == name:
                    init.CopyFrom(numpy_helper.from_array(w, name))
            return vjp(model, {"X": X})

        expected = numeric_gradient(with_weight, weights[name])
        np.testing.assert_allclose(got[f"{name}_grad"], expected, rtol=1e-2, atol=1e-3)


def test_onnx_derivative_options(mlp_onnx, regression):
    X, _ = regression
    filled = onnx_derivative(
        mlp_onnx,
        weights=["coefficient"],
        options=DerivativeOptions.FillGrad | DerivativeOptions.KeepOutputs,
    )
    assert [i.name for i in filled.graph.input] == ["X", "coefficient"]
    assert [o.name for o in filled.graph.output] == ["X_grad", "coefficient_grad", "variable"]
    x_grad, _, outputs = run(
        filled, {"X": X[:3], "coefficient": initializers(mlp_onnx)["coefficient"]}
    )
    np.testing.assert_allclose(outputs, run(mlp_onnx, {"X": X[:3]})[0], rtol=1e-6)
    assert x_grad.shape == (3, X.shape[1])
    only_inputs = onnx_derivative(mlp_onnx, weights=[], inputs=["X"], fill_grad=True)
    assert [o.name for o in only_inputs.graph.output] == ["X_grad"]


LOSSES = [
    (SquareLearningLoss(), lambda d, y: 0.5 * d**2),
    (AbsoluteLearningLoss(), lambda d, y: np.abs(d)),
    (ElasticLearningLoss(0.3, 0.7), lambda d, y: 0.3 * np.abs(d) + 0.7 * d**2),
]


@pytest.mark.parametrize(("loss", "element"), LOSSES, ids=lambda v: type(v).__name__)
@pytest.mark.parametrize("weighted", [False, True])
def test_loss_graph_value_and_gradient(loss, element, weighted):
    rng = np.random.default_rng(1)
    expected = rng.standard_normal((6, 2)).astype(np.float32)
    predicted = rng.standard_normal((6, 2)).astype(np.float32)
    weight = rng.uniform(0.5, 2, 6).astype(np.float32) if weighted else np.ones(6, np.float32)
    scale = (weight / weight.sum()).reshape(-1, 1)
    feeds = {"expected": expected, "predicted": predicted, "loss_scale": scale}
    feeds["grad_scale"] = -0.1 * scale  # the gradient comes out times the step factor

    def reference(p):
        per_sample = element(p.astype(np.float64) - expected, expected).sum(axis=1)
        return float((per_sample * weight).sum() / weight.sum())

    value, grad = run(loss.build_onnx_function(), feeds)
    assert value == pytest.approx(reference(predicted), rel=1e-5)
    np.testing.assert_allclose(
        grad, -0.1 * numeric_gradient(reference, predicted), rtol=1e-2, atol=1e-4
    )


def test_neglog_loss_is_scikit_learn_log_loss():
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 10)
    proba = rng.dirichlet([1, 1, 1], 10).astype(np.float32)
    onehot = np.eye(3, dtype=np.float32)[labels]
    scale = np.full((10, 1), 0.1, np.float32)
    feeds = {"expected": onehot, "predicted": proba, "loss_scale": scale, "grad_scale": scale}
    value, grad = run(NegLogLearningLoss().build_onnx_function(), feeds)
    assert value == pytest.approx(log_loss(labels, proba), rel=1e-5)
    np.testing.assert_allclose(grad, -onehot / proba / 10, rtol=1e-5)


def test_add_loss_output_with_weight_and_penalty(mlp_onnx, regression):
    X, y = regression
    model = add_loss_output(
        mlp_onnx, weight_name="weight", penalty={"coefficient": {"l1": 0.1, "l2": 0.2}}
    )
    assert [o.name for o in model.graph.output] == ["loss", "variable"]
    w = np.linspace(0.5, 1.5, len(X)).astype(np.float32)
    label = y.reshape(-1, 1)
    loss, predicted = run(model, {"X": X, "label": label, "weight": w})
    coef = initializers(mlp_onnx)["coefficient"].astype(np.float64)
    data = (w * 0.5 * (predicted.ravel() - y) ** 2).sum() / w.sum()
    expected = data + 0.1 * np.abs(coef).sum() + 0.2 * (coef**2).sum()
    assert loss == pytest.approx(expected, rel=1e-5)


def run_updates(rate, shapes, masks, penalty, grads, weights, form):
    """Weights after one update per gradient, through the forward/backward update graph.

    ``form`` is "stacked" (products over [w, s, e] rows, in the row orders of both
    parities in turn) or the graph over the named tensors.
    """
    rate.init_learning_rate()
    factor = np.float32(rate.step_factor(rate.value))
    states = {n: np.zeros(s, np.float32) for n, s in shapes.items()}
    value = None
    if form == "stacked":
        ((name, (size,)),) = shapes.items()
        model = rate.build_stacked_function(size)
        orders = WeightBuffers.stacked_coefficients(*rate.state_coefficients())
        w, s = weights[name], states[name]
        for k, grad in enumerate(grads):
            e = factor * grad[name]
            rows = [w, s, e] if k % 2 == 0 else [e, s, w]  # parity 0, then parity 1
            feeds = {"weight_state_step": np.stack(rows), "state_coefficients": orders[k % 2]}
            feeds["state_step"] = np.stack([s, e] if k % 2 == 0 else [e, s])
            w, s = (out[0] for out in run(model, feeds))
        return {name: w}, value
    model = rate.build_onnx_function(shapes, penalty, masks)
    names = [o.name for o in model.graph.output]
    for grad in grads:
        feeds = {
            **{n: weights[n] for n in shapes},
            **{f"{n}_step": factor * grad[n] for n in shapes},
        }
        if rate.n_states:
            feeds.update({f"{n}_state": states[n] for n in shapes})
        if penalty.is_active():
            feeds["step_scale"] = np.array(factor)
        outputs = dict(zip(names, run(model, feeds)))
        weights = {n: outputs[f"{n}_new"] for n in shapes}
        states = {n: outputs.get(f"{n}_state_new") for n in shapes}
        value = outputs.get("penalty")
    return weights, value


@pytest.mark.parametrize("nesterov", [True, False], ids=["nesterov", "classical"])
@pytest.mark.parametrize("form", ["stacked", "flat", "per-weight"])
@pytest.mark.parametrize("l2", [0.0, 0.5], ids=["no-penalty", "penalty"])
def test_update_graphs_follow_scikit_learn_optimizer(nesterov, form, l2):
    from sklearn.neural_network._stochastic_optimizers import SGDOptimizer

    if form == "stacked" and l2:
        pytest.skip("the trainers update through the tensors' graph when a penalty is active")
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((2, 2)), rng.standard_normal(2)
    grads = [(rng.standard_normal((2, 2)), rng.standard_normal(2)) for _ in range(3)]
    # scikit-learn's own optimizer, in float64; the penalty's gradient 2 * l2 * w is
    # added to the coefficients' gradient, never to the bias's
    params = [w.copy(), b.copy()]
    reference = SGDOptimizer(params, 0.1, "constant", momentum=0.9, nesterov=nesterov)
    for gw, gb in grads:
        last = params[0].copy()
        reference.update_params(params, [gw + 2 * l2 * params[0], gb])
    rate = LearningRateSGDNesterov(0.1, momentum=0.9, nesterov=nesterov)
    penalty = ElasticLearningPenalty(0, l2)
    f32 = [{"w": gw.astype(np.float32), "b": gb.astype(np.float32)} for gw, gb in grads]
    start = {"w": w.astype(np.float32), "b": b.astype(np.float32)}
    if form == "per-weight":
        shapes, masks = {"w": [2, 2], "b": [2]}, {"b": False}
        got, value = run_updates(rate, shapes, masks, penalty, f32, start, form)
    else:  # one flat tensor, the penalty masked off the bias part
        flat = {"flat": np.concatenate([start["w"].ravel(), start["b"]])}
        masks = {"flat": np.array([1, 1, 1, 1, 0, 0], np.float32)}
        flat_grads = [{"flat": np.concatenate([g["w"].ravel(), g["b"]])} for g in f32]
        got, value = run_updates(rate, {"flat": [6]}, masks, penalty, flat_grads, flat, form)
        got = {"w": got["flat"][:4].reshape(2, 2), "b": got["flat"][4:]}
    np.testing.assert_allclose(got["w"], params[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["b"], params[1], rtol=1e-5, atol=1e-6)
    if l2:  # the penalty of the coefficients the last update read
        assert value == pytest.approx(l2 * (last**2).sum(), rel=1e-5)
    else:
        assert value is None


def test_sgd_update_is_one_node():
    rate = LearningRateSGD(0.1)
    model = rate.build_onnx_function({"weights": [10]})
    assert [n.op_type for n in model.graph.node] == ["Add"]
    w, e = np.arange(10, dtype=np.float32), np.ones(10, np.float32)
    np.testing.assert_allclose(run(model, {"weights": w, "weights_step": e})[0], w + 1)


@pytest.mark.parametrize(
    "op, attributes",
    [
        ("Conv", {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),
        ("Conv", {"auto_pad": "SAME_LOWER", "strides": [1, 2]}),
        ("Conv", {"auto_pad": "VALID"}),
        ("MaxPool", {"auto_pad": "SAME_UPPER", "kernel_shape": [2, 3], "strides": [2, 2]}),
        ("AveragePool", {"auto_pad": "SAME_LOWER", "kernel_shape": [3, 2]}),
    ],
)
def test_auto_pad_becomes_the_pads_it_stands_for(op, attributes):
    """A loaded model's auto_pad is written as explicit pads: onnxruntime computes the
    same output from both forms (asymmetric pads on odd totals, upper or lower)."""
    inputs = [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["n", 2, 5, 6])]
    inits = []
    if op == "Conv":
        weight = np.random.default_rng(0).standard_normal((3, 2, 2, 3)).astype(np.float32)
        inits = [numpy_helper.from_array(weight, "W")]
    node = helper.make_node(op, ["X", "W"] if op == "Conv" else ["X"], ["Y"], **attributes)
    output = helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    loaded = load_model(model)
    (rewritten,) = loaded.graph.node
    assert "auto_pad" not in {a.name for a in rewritten.attribute}
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 6)).astype(np.float32)

    def run(m):
        session = onnxruntime.InferenceSession(
            m.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        return session.run(None, {"X": x})[0]

    np.testing.assert_allclose(run(loaded), run(model), rtol=1e-6)


PREPROCESSING = [
    ("Scaler", {"offset": [0.5, -1.0, 0.0, 2.0], "scale": [2.0, 0.5, 1.0, 3.0]}),
    ("Scaler", {"offset": [0.25], "scale": [4.0]}),
    ("Normalizer", {"norm": "L2"}),
    ("Normalizer", {"norm": "L1"}),
    ("Normalizer", {"norm": "MAX"}),
    ("Imputer", {"imputed_value_floats": [1.0, 2.0, 3.0, 4.0], "replaced_value_float": np.nan}),
    ("Imputer", {"imputed_value_floats": [9.0], "replaced_value_float": 0.5}),
]


@pytest.mark.parametrize("opset", [12, 17, 18])
@pytest.mark.parametrize(("op_type", "attributes"), PREPROCESSING)
def test_preprocessing_nodes_rewritten_compute_what_onnxruntime_does(op_type, attributes, opset):
    """skl2onnx's Scaler, Normalizer and Imputer (ai.onnx.ml) in standard operators, which
    shape inference reads through: the same values as onnxruntime's own kernels."""
    graph = helper.make_graph(
        [helper.make_node(op_type, ["X"], ["Y"], domain="ai.onnx.ml", **attributes)],
        "preprocessing",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, None)],
    )
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    X = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    X[1, 2], X[3, 0] = np.nan, 0.5  # what an Imputer replaces
    if op_type == "Normalizer":
        X = np.nan_to_num(X)
    rewritten = rewrite_linear_nodes(model)
    assert {n.domain for n in rewritten.graph.node} == {""}
    shapes = onnx.shape_inference.infer_shapes(rewritten).graph.output[0].type.tensor_type
    assert [d.dim_value for d in shapes.shape.dim] == [0, 4]  # the rows free, 4 columns

    def run(m):
        session = onnxruntime.InferenceSession(
            m.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        return session.run(None, {"X": X})[0]

    np.testing.assert_allclose(run(rewritten), run(model), rtol=1e-6, equal_nan=True)


def test_a_weight_copied_transposed_by_torch_s_exporter_is_said():
    """torch's default exporter folds ``w.t()`` of a tied weight into an initializer of
    its own (``t``): it trained apart from ``w`` without a word (losses off torch's by
    4e-6 after one epoch). Weights of one repeated value, and other exporters, say nothing."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)

    def model(second, producer="pytorch"):
        graph = helper.make_graph(
            [
                helper.make_node("MatMul", ["X", "w"], ["h"]),
                helper.make_node("MatMul", ["h", "t"], ["Y"]),
            ],
            "tied",
            [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 3])],
            [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [None, 3])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(second, "t")],
        )
        made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        made.producer_name = producer
        return made

    with pytest.warns(UserWarning, match=r"^'w' and 't' hold the same values transposed"):
        check_weight_names(model(w.T.copy()), None)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_weight_names(model(w.T.copy(), producer="skl2onnx"), None)
        check_weight_names(model(rng.standard_normal((4, 3)).astype(np.float32)), None)
        ones = model(np.ones((4, 3), np.float32))
        ones.graph.initializer[0].CopyFrom(
            numpy_helper.from_array(np.ones((3, 4), np.float32), "w")
        )
        check_weight_names(ones, None)
