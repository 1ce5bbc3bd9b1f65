"""Portable gradients (standard ONNX operators only) against finite differences and
onnxruntime-training's own gradient graphs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import fitted_mlp, ortbench_names, sklearn_epoch
from onnx import TensorProto, helper
from skl2onnx import to_onnx
from sklearn.neural_network import MLPClassifier

from ortbench.training import (
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
    OrtBenchError,
    onnx_derivative,
)
from ortbench.training.gradients.portable import RULES, split_forward_backward, vjp_graph
from ortbench.training.graphs.builder import GraphBuilder

RNG = np.random.default_rng(0)


def run(model: onnx.ModelProto, feeds: dict) -> dict:
    session = onnxruntime.InferenceSession(model.SerializeToString())
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


def with_output_y(b: GraphBuilder) -> onnx.ModelProto:
    """The builder's graph with output ``y`` of unknown shape (shape inference fills it)."""
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(b.nodes, b.name, b.inputs, [output], b.initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def one_op(op: str, shapes: list, attrs=None, extra=None) -> onnx.ModelProto:
    """A graph of one operator over float inputs x0, x1... (and constant ``extra`` inputs)."""
    b = GraphBuilder(op)
    names = [b.input(f"x{k}", list(s)) for k, s in enumerate(shapes)]
    names += [b.const(v, dtype=v.dtype) for v in (extra or [])]
    b.op(op, *names, name="y", **(attrs or {}))
    return with_output_y(b)


# op, float input shapes, attributes, constant inputs, how to draw x (positive for Log...)
CASES = [
    ("Add", [(3, 4), (1, 4)], None, None),
    ("Sub", [(3, 4), (4,)], None, None),
    ("Mul", [(3, 4), (3, 1)], None, None),
    ("Div", [(3, 4), (1, 4)], None, None),
    ("Neg", [(3, 4)], None, None),
    ("MatMul", [(3, 4), (4, 2)], None, None),
    ("Gemm", [(3, 4), (4, 2), (1, 2)], {"alpha": 0.5, "beta": 2.0}, None),
    ("Gemm", [(4, 3), (2, 4), (2,)], {"transA": 1, "transB": 1}, None),
    ("Relu", [(3, 4)], None, None),
    ("Relu", [(64, 32)], None, None),  # from MASK_FROM values on: the mask product
    ("LeakyRelu", [(3, 4)], {"alpha": 0.1}, None),
    ("Sigmoid", [(3, 4)], None, None),
    ("Tanh", [(3, 4)], None, None),
    ("Softmax", [(3, 4)], {"axis": 1}, None),
    ("LogSoftmax", [(3, 4)], {"axis": -1}, None),
    ("Exp", [(3, 4)], None, None),
    ("Log", [(3, 4)], None, None),
    ("Reciprocal", [(3, 4)], None, None),
    ("Abs", [(3, 4)], None, None),
    ("Sign", [(3, 4)], None, None),
    ("Floor", [(3, 4)], None, None),
    ("Ceil", [(3, 4)], None, None),
    ("Round", [(3, 4)], None, None),
    ("Sqrt", [(3, 4)], None, None),
    ("Pow", [(3, 4), (1,)], None, None),
    ("Clip", [(3, 4)], None, [np.array(-0.5, np.float32), np.array(0.5, np.float32)]),
    ("Where", [(3, 4), (3, 4)], None, None),
    ("Identity", [(3, 4)], None, None),
    ("Cast", [(3, 4)], {"to": TensorProto.FLOAT}, None),
    ("Reshape", [(3, 4)], None, [np.array([2, 6], np.int64)]),
    ("Flatten", [(3, 2, 2)], {"axis": 1}, None),
    ("Squeeze", [(3, 1, 4)], None, [np.array([1], np.int64)]),
    ("Unsqueeze", [(3, 4)], None, [np.array([0], np.int64)]),
    ("Transpose", [(2, 3, 4)], {"perm": [2, 0, 1]}, None),
    ("Concat", [(3, 2), (3, 4)], {"axis": 1}, None),
    (
        "Slice",
        [(4, 5)],
        None,
        [np.array([1, -4]), np.array([3, 5]), np.array([0, 1]), np.array([1, 2])],
    ),
    ("Gather", [(4, 3)], {"axis": 0}, [np.array([[2, 0], [2, 3]], np.int64)]),
    ("ReduceSum", [(3, 4)], {"keepdims": 0}, [np.array([1], np.int64)]),
    ("ReduceMean", [(3, 4)], {"keepdims": 1}, [np.array([0], np.int64)]),
    ("MatMul", [(2, 3, 4), (4, 5)], None, None),
    ("MatMul", [(2, 1, 3, 4), (3, 4, 2)], None, None),
    ("Conv", [(2, 4, 7), (4, 2, 3), (4,)], {"strides": [2], "pads": [1, 1], "group": 2}, None),
    (
        "Conv",
        [(1, 2, 5, 5), (3, 2, 2, 2)],
        {"strides": [2, 1], "pads": [1, 0, 0, 1], "dilations": [2, 1]},
        None,
    ),
    ("MaxPool", [(2, 2, 4, 4)], {"kernel_shape": [2, 2], "strides": [2, 2]}, None),
    (
        "MaxPool",
        [(1, 2, 5, 5)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        None,
    ),
    (
        "AveragePool",
        [(1, 2, 5, 5)],
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        None,
    ),
    (
        "AveragePool",
        [(2, 1, 7)],
        {"kernel_shape": [2], "strides": [2], "pads": [1, 0], "count_include_pad": 1},
        None,
    ),
    ("GlobalAveragePool", [(2, 3, 2, 2)], None, None),
    ("BatchNormalization", [(3, 2, 2), (2,), (2,), (2,), (2,)], {"epsilon": 1e-3}, None),
    ("LayerNormalization", [(2, 3, 4), (4,), (4,)], None, None),
    ("LayerNormalization", [(2, 3, 4), (3, 4)], {"axis": 1}, None),
    ("InstanceNormalization", [(2, 3, 4), (3,), (3,)], None, None),
    ("InstanceNormalization", [(2, 2, 3, 2), (2,), (2,)], {"epsilon": 1e-3}, None),
    ("Erf", [(3, 4)], None, None),
    ("Gelu", [(3, 4)], None, None),
    ("Softplus", [(3, 4)], None, None),
    ("Elu", [(3, 4)], {"alpha": 0.5}, None),
    ("Selu", [(3, 4)], None, None),
    ("Selu", [(3, 4)], {"alpha": 1.5, "gamma": 0.5}, None),
    ("Celu", [(3, 4)], {"alpha": 0.5}, None),
    ("HardSigmoid", [(3, 4)], {"alpha": 1 / 6}, None),
    ("HardSigmoid", [(3, 4)], {"alpha": 0.4, "beta": 0.2}, None),
    ("HardSwish", [(3, 4)], None, None),
    ("Mish", [(3, 4)], None, None),
    ("PRelu", [(3, 4), (1,)], None, None),
    ("PRelu", [(2, 3, 4), (3, 1)], None, None),
    ("PRelu", [(3, 4), (4,)], None, None),
    ("CastLike", [(3, 4)], None, [np.zeros(1, np.float32)]),
    ("Gelu", [(3, 4)], {"approximate": "tanh"}, None),
    ("Dropout", [(3, 4)], None, [np.array(0.5, np.float32)]),
    ("Expand", [(3, 1)], None, [np.array([2, 3, 4], np.int64)]),
    ("Split", [(3, 6)], {"axis": 1}, [np.array([2, 4], np.int64)]),
]


#: Where an activation's slope jumps away from 0 (HardSigmoid's as the cases set it):
#: values drawn on both sides, none near.
KINKS = {"HardSigmoid": (-3.0, 3.0, -0.5, 2.0), "HardSwish": (-3.0, 3.0)}


def draw(op: str, shape) -> np.ndarray:
    if op in ("Log", "Sqrt", "Pow", "Div", "Reciprocal", "BatchNormalization"):
        return RNG.uniform(0.5, 2.0, shape).astype(np.float32)
    if op in KINKS:
        values = RNG.uniform(-4.5, 4.5, shape)
        for kink in KINKS[op]:
            values = np.where(np.abs(values - kink) < 0.1, kink + 0.3, values)
        return np.where(np.abs(values) < 0.05, 0.3, values).astype(np.float32)
    if op in ("Floor", "Ceil", "Round"):  # between integers and half-integers: steps of eps
        whole = RNG.integers(-3, 3, shape)  # change nothing there
        return (whole + RNG.uniform(0.1, 0.4, shape)).astype(np.float32)
    if op == "MaxPool":  # distinct values 0.05 apart: a step of eps never changes a maximum
        size = int(np.prod(shape))
        return ((RNG.permutation(size) - size / 2) * 0.05).reshape(shape).astype(np.float32)
    values = RNG.standard_normal(shape).astype(np.float32)
    # keep away from kinks (Relu, Abs, Clip) where finite differences are meaningless
    return np.where(np.abs(values) < 0.05, 0.3, values).astype(np.float32)


@pytest.mark.parametrize(("op", "shapes", "attrs", "extra"), CASES, ids=[c[0] for c in CASES])
def test_rule_matches_central_finite_differences(op, shapes, attrs, extra):
    model = one_op(op, shapes, attrs, extra)
    if op == "Where":  # condition first, then the two float branches
        b = GraphBuilder("where")
        x0, x1 = b.input("x0", [3, 4]), b.input("x1", [3, 4])
        b.op("Where", b.op("Greater", x0, b.const(0.0)), x0, x1, name="y")
        model = with_output_y(b)
    if op == "Split":  # the first part unused: its gradient is zeros
        b = GraphBuilder("split")
        x0 = b.input("x0", [3, 6])
        b.op("Split", x0, b.const([2, 4], np.int64), axis=1, outputs=2)
        b.nodes[-1].output[1] = "y"
        model = with_output_y(b)
    xs = {f"x{k}": draw(op, s) for k, s in enumerate(shapes)}
    y = run(model, xs)["y"]
    upstream = RNG.standard_normal(y.shape).astype(np.float32)
    grad = vjp_graph(model, list(xs))
    assert {n.domain for n in grad.graph.node} <= {""}
    got = run(grad, {**xs, "y_grad": upstream})

    def objective(feeds):
        return float((run(model, feeds)["y"].astype(np.float64) * upstream).sum())

    eps = 1e-2
    for name, value in xs.items():
        expected = np.zeros(value.shape)
        for index in np.ndindex(value.shape):
            plus, minus = dict(xs), dict(xs)
            plus[name], minus[name] = value.copy(), value.copy()
            plus[name][index] += eps
            minus[name][index] -= eps
            expected[index] = (objective(plus) - objective(minus)) / (2 * eps)
        np.testing.assert_allclose(
            got[f"{name}_grad"], expected, rtol=2e-2, atol=2e-3, err_msg=name
        )


def test_every_rule_is_tested():
    assert {c[0] for c in CASES} == set(RULES)


def test_the_readme_counts_the_rules():
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert f"{len(RULES)} operators with their reverse-mode rules" in readme


@pytest.mark.training_build
@pytest.mark.parametrize("activation", ["relu", "tanh", "logistic"])
def test_mlp_regressor_gradients_equal_onnxruntime_training(activation, regression):
    X, y = regression
    onx = to_onnx(fitted_mlp(X, y, hidden=(6, 4), activation=activation), X[:1])
    assert_backends_agree(onx, {"X": X[:10]}, {"variable_grad": RNG.standard_normal((10, 1))})


@pytest.mark.training_build
@pytest.mark.parametrize("n_classes", [2, 3])
def test_mlp_classifier_gradients_equal_onnxruntime_training(n_classes, regression):
    X, y = regression
    labels = np.digitize(y, np.quantile(y, np.linspace(0, 1, n_classes + 1)[1:-1]))
    model = MLPClassifier(hidden_layer_sizes=(5,), max_iter=5, random_state=0).fit(X, labels)
    onx = to_onnx(model, X[:1], options={"zipmap": False})
    assert_backends_agree(
        onx, {"X": X[:10]}, {"probabilities_grad": RNG.standard_normal((10, n_classes))}
    )


def assert_backends_agree(onx, inputs: dict, upstream: dict) -> None:
    portable = onnx_derivative(onx, backend="portable")
    reference = onnx_derivative(onx, backend="ort-training")
    assert [o.name for o in portable.graph.output] == [o.name for o in reference.graph.output]
    # the model's own nodes are copied (ai.onnx.ml for labels); no training-only kernel
    assert {n.domain for n in portable.graph.node} <= {"", "ai.onnx.ml"}
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in onx.graph.initializer}
    names = [i.name for i in portable.graph.input]
    feeds = {n: v.astype(np.float32) for n, v in {**inputs, **upstream}.items()}
    feeds.update({n: weights[n] for n in names if n in weights})
    got, expected = run(portable, feeds), run(reference, feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("activation", ["relu", "tanh", "logistic"])
def test_split_forward_backward_computes_nothing_twice(activation, regression):
    from ortbench.training.graphs.weights import weights_as_inputs

    X, y = regression
    onx = to_onnx(fitted_mlp(X, y, hidden=(6, 4), activation=activation), X[:1])
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in onx.graph.initializer}
    trained = [n for n in weights if n.startswith(("coefficient", "intercepts"))]
    model = weights_as_inputs(onx, trained)
    forward, backward, stash = split_forward_backward(model, trained)
    # the backward graph holds no node of the model: the stash carries what it reads
    assert len(forward.graph.node) == len(model.graph.node)
    model_outputs = {o for n in model.graph.node for o in n.output}
    assert not model_outputs.intersection(o for n in backward.graph.node for o in n.output)
    feeds = {"X": X[:10], **{n: weights[n] for n in trained}}
    upstream = {"variable_grad": RNG.standard_normal((10, 1)).astype(np.float32)}
    passed = run(forward, feeds)
    backward_feeds = {**feeds, **upstream, **{n: passed[n] for n in stash}}
    names = {i.name for i in backward.graph.input}
    got = run(backward, {n: v for n, v in backward_feeds.items() if n in names})
    expected = run(vjp_graph(model, trained), {**feeds, **upstream})
    for name in trained:
        np.testing.assert_allclose(got[f"{name}_grad"], expected[f"{name}_grad"], rtol=1e-6)


def test_operator_without_rule_is_named():
    b = GraphBuilder("sin")
    b.op("Sin", b.input("x", [2]), name="y")
    with pytest.raises(
        OrtBenchError, match="no portable gradient for operator 'Sin' \\(node 'Sin_"
    ):
        vjp_graph(with_output_y(b), ["x"])


def test_unknown_backend():
    with pytest.raises(OrtBenchError, match="backend must be one of"):
        onnx_derivative(helper.make_model(helper.make_graph([], "g", [], [])), backend="jax")


@pytest.mark.parametrize(
    ("learning_rate", "momentum"),
    [
        (LearningRateSGD(0.01, learning_rate="constant"), 0.0),
        (LearningRateSGDNesterov(0.01, learning_rate="constant", momentum=0.9), 0.9),
    ],
    ids=["sgd", "nesterov"],
)
def test_portable_full_trainer_follows_scikit_learn(learning_rate, momentum, regression, tmp_path):
    X, y = regression
    onx, start, end = sklearn_epoch(X, y, momentum)
    model = FullTrainer(
        onx,
        learning_rate=learning_rate,
        batch_size=16,
        max_iter=1,
        shuffle=False,
        backend="portable",
    )
    state = model.fit(X, y).get_state()
    graphs = saved_graphs(model, tmp_path)
    assert {n.domain for graph in graphs.values() for n in graph.graph.node} <= {""}
    for name, w0, w1 in zip(ortbench_names(len(start) // 2), start, end):
        expected = w1 - w0
        got = state[name] - w0.reshape(state[name].shape)
        np.testing.assert_allclose(
            got.ravel(), expected.ravel(), rtol=1e-5, atol=1e-5 * np.abs(expected).max()
        )


def test_portable_momentum_on_cpu_is_a_step_run_then_the_stacked_update(regression, mlp_onnx):
    """The steps go to the stacked buffers' step row, and the update reads the weight,
    state and step rows in two matrix products: no flat copy of the steps, two runs a
    step and one an epoch (the losses), no new OrtValue."""
    from ortbench.bench.counters import count_runtime

    X, y = regression
    rate = LearningRateSGDNesterov(0.01, learning_rate="constant")
    trainer = FullTrainer(mlp_onnx, backend="portable", learning_rate=rate, batch_size=16)
    trainer.set_params(max_iter=1).fit(X, y)
    graphs = trainer._steps.graphs
    assert [n.op_type for n in graphs["update"].graph.node] == ["Gemm", "Gemm"]
    assert "Concat" not in {n.op_type for n in graphs["train_step"].graph.node}
    with count_runtime(trainer) as counts:
        trainer.set_params(warm_start=True, max_iter=2).fit(X, y)
    assert counts.runs - 2 == 2 * counts.steps == 2 * 2 * 8  # 120 rows, batches of 16
    assert counts.ortvalues == 0


@pytest.mark.training_build
def test_portable_full_trainer_classifies_and_matches_ort_training(regression):
    X, y = regression
    labels = (y > np.median(y)).astype(int)
    reference = MLPClassifier(hidden_layer_sizes=(5,), max_iter=2, random_state=0)
    onx = to_onnx(reference.fit(X, labels), X[:1])  # with ZipMap
    settings = dict(loss="log", learning_rate=LearningRateSGD(0.05, learning_rate="constant"))
    settings.update(batch_size=16, max_iter=10, shuffle=False)
    portable = FullTrainer(onx, backend="portable", **settings).fit(X, labels)
    runtime = FullTrainer(onx, backend="ort-training", **settings).fit(X, labels)
    np.testing.assert_allclose(portable.train_losses_, runtime.train_losses_, rtol=1e-4)
    assert portable.train_losses_[-1] < portable.train_losses_[0]
    assert portable.score(X, labels) == runtime.score(X, labels)


@pytest.mark.parametrize(
    ("learning_rate", "momentum"),
    [
        (LearningRateSGD(0.01, learning_rate="constant"), 0.0),
        (LearningRateSGDNesterov(0.01, learning_rate="constant", momentum=0.9), 0.9),
    ],
    ids=["sgd", "nesterov"],
)
def test_portable_forward_backward_trainer_follows_scikit_learn(
    learning_rate, momentum, regression, tmp_path
):
    X, y = regression
    onx, start, end = sklearn_epoch(X, y, momentum)
    model = ForwardBackwardTrainer(
        onx,
        learning_rate=learning_rate,
        batch_size=16,
        max_iter=1,
        shuffle=False,
        backend="portable",
    )
    state = model.fit(X, y).get_state()
    graphs = saved_graphs(model, tmp_path)
    assert {n.domain for g in graphs.values() for n in g.graph.node} <= {""}
    for name, w0, w1 in zip(ortbench_names(len(start) // 2), start, end):
        expected = w1 - w0
        got = state[name] - w0.reshape(state[name].shape)
        np.testing.assert_allclose(
            got.ravel(), expected.ravel(), rtol=1e-5, atol=1e-5 * np.abs(expected).max()
        )


def saved_graphs(model, folder) -> dict[str, onnx.ModelProto]:
    """The graphs a fitted trainer runs, as ``save_onnx_graph`` writes them."""
    return {name: onnx.load(path) for name, path in model.save_onnx_graph(folder).items()}
