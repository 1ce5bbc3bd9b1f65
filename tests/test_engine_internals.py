"""White-box tests: they read private attributes of the trainers, so they change with the
engine's internals (everything else tests public behaviour).

Moved here from test_portable.py (the default backend, the flat buffers' alignment) and
test_trainers.py (the automatic thread count).
"""

from __future__ import annotations

import gc
import json
import pickle
import time

import numpy as np
import onnx
import onnxruntime
import pytest
from helpers import fitted_mlp
from skl2onnx import to_onnx
from sklearn.datasets import make_regression
from sklearn.neural_network import MLPRegressor

from ortbench.training import (
    ElasticLearningPenalty,
    ForwardBackwardTrainer,
    FullTrainer,
    LearningRateSGD,
    LearningRateSGDNesterov,
    NegLogLearningLoss,
    SquareLearningLoss,
    add_loss_output,
)
from ortbench.training.gradients.derivative import choose_backend
from ortbench.training.gradients.kernel_forms import (
    masked_gradient,
    relu_side_gradient,
    with_training_kernels,
)
from ortbench.training.gradients.portable_rules.registry import RuleContext
from ortbench.training.graphs.builder import GraphBuilder
from ortbench.training.graphs.loss_graph import LossHead
from ortbench.training.graphs.outputs import select_outputs
from ortbench.training.losses import BaseLearningLoss
from ortbench.training.runtime.build import runtime_problem
from ortbench.training.runtime.sessions import profiled_sessions, session_options
from ortbench.training.steps.batches import BatchLoader, RowOrder
from ortbench.training.steps.fused import step_graph


def test_default_backend_follows_the_installed_runtime(regression, mlp_onnx):
    X, y = regression
    expected = "portable" if runtime_problem() else "ort-training"
    assert choose_backend(None) == expected
    model = FullTrainer(mlp_onnx, learning_rate=LearningRateSGD(0.01), max_iter=5)
    assert model.fit(X, y).train_losses_[-1] < model.train_losses_[0]
    assert model._backend == expected


@pytest.mark.parametrize(
    ("trainer", "settings"),
    [
        (ForwardBackwardTrainer, dict(learning_rate=LearningRateSGDNesterov(0.01))),
        (ForwardBackwardTrainer, dict(learning_penalty=ElasticLearningPenalty(0.01, 0.01))),
        (FullTrainer, dict(learning_rate=LearningRateSGDNesterov(0.01))),
    ],
    ids=["fwbw-stacked-momentum", "fwbw-penalty", "fused-momentum"],
)
def test_flat_buffers_start_on_cache_lines_and_their_padding_stays_zero(
    trainer, settings, regression, mlp_onnx
):
    X, y = regression
    model = trainer(mlp_onnx, backend="portable", batch_size=16, max_iter=2, **settings)
    state = model.fit(X, y).get_state()
    buffers = model._steps._buffers
    size = sum(v.size for v in state.values())
    assert size % 16, "the model should leave some padding to check"
    for host in buffers._hosts:  # the flat weights, steps and states
        assert host.ctypes.data % 64 == 0
        assert host.shape[-1] % 16 == 0
        np.testing.assert_array_equal(host[..., size:], 0)
    assert all(np.isfinite(v).all() for v in state.values())


@pytest.mark.parametrize(
    ("trainer", "backend", "pools"),
    [
        (FullTrainer, "portable", 1),
        (ForwardBackwardTrainer, "portable", 2),
        pytest.param(FullTrainer, "ort-training", 1, marks=pytest.mark.training_build),
        pytest.param(ForwardBackwardTrainer, "ort-training", 1, marks=pytest.mark.training_build),
    ],
)
def test_auto_threads_follow_the_work_of_a_step(trainer, backend, pools, mlp_onnx):
    """One intra-op thread below ONE_THREAD_WORK multiply-adds per step; both one thread
    and the pool, to be timed, up to TIMED_THREADS_WORK on the CPU; the pool above. Where
    the build cannot be timed (AdamW), the pool above ONE_THREAD_WORK (or
    TWO_POOLS_ONE_THREAD_WORK where two large sessions run in turn)."""
    from ortbench.training import LearningRateAdamW
    from ortbench.training.estimators.params import (
        ONE_THREAD_WORK,
        TIMED_THREADS_WORK,
        TWO_POOLS_ONE_THREAD_WORK,
    )

    values = sum(w.size for w in trainer(mlp_onnx).initial_state().values())
    limit = ONE_THREAD_WORK if pools == 1 else TWO_POOLS_ONE_THREAD_WORK

    def candidates(batch_size, intra_op_threads="auto", **settings):
        model = trainer(
            mlp_onnx,
            batch_size=batch_size,
            intra_op_threads=intra_op_threads,
            backend=backend,
            **settings,
        )
        model._check_params()
        model._batch_rows = batch_size  # what fit sets, the rows of the data permitting
        model._prepare_model()
        model.learning_rate_ = model._new_learning_rate()  # what fit sets before a build
        assert model._steps_class().large_sessions == pools
        return model._thread_candidates()

    low, high = ONE_THREAD_WORK // values, TIMED_THREADS_WORK // values
    assert candidates(16) == (1,)
    assert candidates(low) == (1,)
    assert candidates(low + 1) == (1, None)
    assert candidates(high) == (1, None)
    assert candidates(high + 1) == (None,)
    adamw = dict(learning_rate=LearningRateAdamW(0.001))
    assert candidates(low + 1, **adamw) == ((1,) if low + 1 <= limit // values else (None,))
    assert candidates(limit // values + 1, **adamw) == (None,)
    assert candidates(1024, intra_op_threads=2) == (2,)
    assert candidates(1, intra_op_threads=None) == (None,)


@pytest.mark.parametrize("slow", [1, None], ids=["one-thread-slow", "pool-slow"])
def test_auto_threads_keep_the_build_whose_epochs_ran_faster(
    slow, monkeypatch, regression, mlp_onnx
):
    """Between the limits, fit keeps the thread choice whose timed epochs were faster."""
    from ortbench.training.estimators import params
    from ortbench.training.estimators.fit_loop import FitLoop

    X, y = regression
    monkeypatch.setattr(params, "ONE_THREAD_WORK", 1)
    build_on = FitLoop._build_on

    def slowed_build_on(self, threads):
        build_on(self, threads)
        if threads == slow:
            run_epoch = self._steps.run_epoch

            def slow_run_epoch():
                time.sleep(0.02)
                return run_epoch()

            self._steps.run_epoch = slow_run_epoch

    monkeypatch.setattr(FitLoop, "_build_on", slowed_build_on)
    model = FullTrainer(mlp_onnx, backend="portable", batch_size=16, max_iter=1).fit(X, y)
    assert model.intra_op_threads_ == (None if slow == 1 else 1)
    assert session_settings(model._steps._session)[0] == (0 if slow == 1 else 1)
    unpickled = pickle.loads(pickle.dumps(model))  # rebuilt on the threads the fit chose
    np.testing.assert_array_equal(unpickled.predict(X), model.predict(X))
    assert session_settings(unpickled._steps._session)[0] == (0 if slow == 1 else 1)


def test_an_interrupted_timing_keeps_the_weights_and_the_momentum(
    monkeypatch, regression, mlp_onnx
):
    """Ctrl-C while a warm start's new build is timed: the trainer keeps the weights and
    optimizer state of before, and the next fit goes on from them."""
    from ortbench.training.estimators import params
    from ortbench.training.estimators.fit_loop import FitLoop

    X, y = regression
    monkeypatch.setattr(params, "ONE_THREAD_WORK", 1)
    rate = LearningRateSGDNesterov(0.05)
    model = FullTrainer(mlp_onnx, backend="portable", batch_size=16, max_iter=2, learning_rate=rate)
    weights, velocity = model.fit(X, y).get_state(), model._steps.get_optimizer_state()
    build_on = FitLoop._build_on

    def interrupted_build_on(self, threads):
        build_on(self, threads)
        if threads is None:  # the second build, timed after the first

            def interrupted():
                raise KeyboardInterrupt

            self._steps.run_epoch = interrupted

    monkeypatch.setattr(FitLoop, "_build_on", interrupted_build_on)
    model.set_params(warm_start=True, batch_size=8)  # a rebuild, timed
    with pytest.raises(KeyboardInterrupt):
        model.fit(X, y)
    for name, value in model.get_state().items():
        np.testing.assert_array_equal(value, weights[name])
    for kept, before in zip(model._steps.get_optimizer_state(), velocity):
        np.testing.assert_array_equal(kept, before)
    monkeypatch.setattr(FitLoop, "_build_on", build_on)
    assert len(model.fit(X, y).train_losses_) == 4


@pytest.mark.parametrize(
    ("trainer", "settings"),
    [
        (FullTrainer, dict(backend="portable")),
        (FullTrainer, dict(backend="portable", epoch_loop=True)),
        (ForwardBackwardTrainer, dict(backend="portable")),
        pytest.param(FullTrainer, dict(backend="ort-training"), marks=pytest.mark.training_build),
        pytest.param(
            ForwardBackwardTrainer, dict(backend="ort-training"), marks=pytest.mark.training_build
        ),
    ],
    ids=["fused", "loop", "split", "on-device", "agent"],
)
@pytest.mark.parametrize("momentum", [False, True], ids=["sgd", "nesterov"])
def test_timing_the_threads_leaves_the_fit_of_the_threads_it_chose(
    trainer, settings, momentum, monkeypatch, regression, mlp_onnx
):
    """The epochs that time both thread choices change nothing: the fit is the one the
    chosen threads give when asked for, weights, momentum and shuffled batches alike."""
    from ortbench.training.estimators import params

    if momentum and settings["backend"] == "ort-training" and trainer is FullTrainer:
        pytest.skip("on-device training has no momentum")
    X, y = regression
    monkeypatch.setattr(params, "ONE_THREAD_WORK", 1)
    monkeypatch.setattr(params, "TIMED_THREADS_WORK", 2**40)
    rate = (LearningRateSGDNesterov if momentum else LearningRateSGD)(0.05)
    kwargs = dict(batch_size=16, max_iter=4, shuffle=True, random_state=0, learning_rate=rate)
    timed = trainer(mlp_onnx, **kwargs, **settings).fit(X, y)
    assert timed.intra_op_threads_ in (1, None)
    asked = trainer(mlp_onnx, intra_op_threads=timed.intra_op_threads_, **kwargs, **settings)
    asked.fit(X, y)
    assert timed.train_losses_ == asked.train_losses_
    for name, value in asked.get_state().items():
        np.testing.assert_array_equal(timed.get_state()[name], value)


def session_settings(session) -> tuple[int, str]:
    """A session's intra-op threads (0: onnxruntime's pool) and spinning entry."""
    options = session.session_options
    try:
        spinning = options.get_session_config_entry("session.intra_op.allow_spinning")
    except RuntimeError:  # not set: onnxruntime's default, spinning
        spinning = "1"
    return options.intra_op_num_threads, spinning


@pytest.mark.parametrize(
    ("backend", "large", "spinning"),
    [
        ("portable", ("_forward", "_backward"), "0"),
        pytest.param("ort-training", ("_agent_session",), "1", marks=pytest.mark.training_build),
    ],
)
def test_pools_spin_unless_two_large_sessions_take_turns(backend, large, spinning):
    """The model's sessions on the pool, spinning when a step runs one of them; the loss
    session on one thread whatever the step's size."""
    X, y = make_regression(2048, 100, random_state=0)
    X, y = X.astype(np.float32), y.astype(np.float32)
    mlp = MLPRegressor(hidden_layer_sizes=(256, 128), max_iter=1, random_state=0).fit(X, y)
    model = ForwardBackwardTrainer(
        to_onnx(mlp, X[:1]), batch_size=1024, max_iter=1, backend=backend
    ).fit(X, y)
    for name in large:
        assert session_settings(getattr(model._steps, name)) == (0, spinning)
    assert session_settings(model._steps._loss_session)[0] == 1


def test_the_l2_cache_size_is_what_getconf_reads():
    import shutil
    import subprocess

    from ortbench.training.runtime.sessions import l2_cache_bytes

    if shutil.which("getconf") is None:
        pytest.skip("no getconf")
    out = subprocess.run(["getconf", "LEVEL2_CACHE_SIZE"], capture_output=True, text=True)
    if out.returncode or not out.stdout.strip().isdigit() or int(out.stdout) <= 0:
        pytest.skip("getconf does not know the L2 cache size here")
    assert l2_cache_bytes() == int(out.stdout)


@pytest.mark.parametrize(
    ("trainer", "backend"),
    [
        (FullTrainer, "portable"),
        (ForwardBackwardTrainer, "portable"),
        pytest.param(ForwardBackwardTrainer, "ort-training", marks=pytest.mark.training_build),
    ],
)
def test_the_stacked_update_takes_the_pool_where_its_rows_outgrow_one_cache(
    trainer, backend, monkeypatch, regression, mlp_onnx
):
    """With 'auto', a step on one thread and the update's five rows of floats larger than
    one core's L2 cache: the update on the pool. Else, or with threads given: one thread."""
    from ortbench.training.estimators import params

    X, y = regression
    values = sum(w.size for w in trainer(mlp_onnx).initial_state().values())
    rows = params.STACKED_ROWS * 4 * values

    def update_threads(l2, **settings):
        monkeypatch.setattr(params, "l2_cache_bytes", lambda: l2)
        settings = dict(dict(batch_size=1, intra_op_threads="auto"), **settings)
        rate = LearningRateSGDNesterov(0.01)
        model = trainer(mlp_onnx, learning_rate=rate, backend=backend, max_iter=1, **settings)
        return session_settings(model.fit(X, y)._steps._update_session)[0]

    assert update_threads(rows - 1) == 0  # the pool
    assert update_threads(rows) == 1
    assert update_threads(None) == 1  # the cache size is unknown
    assert update_threads(rows - 1, intra_op_threads=1) == 1
    assert update_threads(rows - 1, intra_op_threads=None) == 1
    monkeypatch.setattr(params, "ONE_THREAD_WORK", 1)
    monkeypatch.setattr(params, "TWO_POOLS_ONE_THREAD_WORK", 1)
    monkeypatch.setattr(params, "TIMED_THREADS_WORK", 1)
    assert update_threads(rows - 1) == 1  # the step itself on the pool


@pytest.mark.training_build
@pytest.mark.parametrize(
    ("trainer", "graph_name"),
    [(FullTrainer, "training_model"), (ForwardBackwardTrainer, "training")],
)
def test_only_large_gradient_kernels_take_the_fast_forms(trainer, graph_name, regression):
    """Hidden layers of 300 and 4 at batch 16: the Relu of 4,800 values takes the mask
    product and its bias's 16 x 300 gradient the product by ones; the Relu and bias of 64
    values keep onnxruntime's ReluGrad and ReduceSum (MASK_FROM is 2,048, COLUMN_SUM_FROM
    4,096)."""
    X, y = regression
    onx = to_onnx(fitted_mlp(X, y, hidden=(300, 4)), X[:1])
    model = trainer(onx, learning_rate=LearningRateSGD(0.01), batch_size=16, max_iter=1)
    graph = onnx.load_model_from_string(model.fit(X, y)._steps.graphs[graph_name]).graph
    ops = [node.op_type for node in graph.node]
    assert ops.count("ReluGrad") == 1
    assert ops.count("HardSigmoid") == 1
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    by_ones = [
        n.input[1]
        for n in graph.node
        if n.op_type in ("MatMul", "Gemm") and np.all(constants.get(n.input[0], 0) == 1)
    ]
    assert len(by_ones) == 1
    summed = [n.input[0] for n in graph.node if n.op_type == "ReduceSum"]
    assert by_ones[0] not in summed


#: Values a Relu's input or output can hold, from -inf to inf, zeros and the smallest
#: normal float among them.
EDGE_VALUES = [
    -np.inf,
    -3.4e38,
    -1.0,
    -(2.0**-126),
    -0.0,
    0.0,
    2.0**-126,
    1e-30,
    0.5,
    1.0,
    3.4e38,
    np.inf,
]


@pytest.mark.parametrize("opset", [10, 17])
def test_the_relu_mask_product_is_the_gradient_where_the_side_is_positive(opset):
    """``masked_gradient`` against numpy's ``grad * (side > 0)`` on edge values, at an old
    and a recent opset."""

    rng = np.random.default_rng(0)
    side = np.array(EDGE_VALUES + list(rng.standard_normal(500)), np.float32)
    grad = rng.standard_normal(side.shape).astype(np.float32)
    b = GraphBuilder("mask", opset)
    out = masked_gradient(b, b.input("side", [side.size]), b.input("grad", [side.size]))
    b.output(out, [side.size])
    session = onnxruntime.InferenceSession(
        b.to_model().SerializeToString(), session_options(1), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {"side": side, "grad": grad})[0]
    np.testing.assert_array_equal(got, grad * (side > 0))


def relu_gradient_model(elem_type: int = onnx.TensorProto.FLOAT) -> onnx.ModelProto:
    """``grad * Sign(Relu(x))`` as the portable rule writes it for a small Relu."""
    b = GraphBuilder("relu_gradient", 17)
    x, grad = b.input("x", [None], elem_type), b.input("grad", [None], elem_type)
    b.output(relu_side_gradient(b, b.op("Relu", x), grad), [None], elem_type)
    return b.to_model()


@pytest.mark.parametrize(
    "kernels", ["standard", pytest.param("training", marks=pytest.mark.training_build)]
)
def test_the_small_relu_gradient_is_the_gradient_where_the_relu_is_positive(kernels):
    """``relu_side_gradient`` against numpy's ``grad * (x > 0)`` on edge values: as the
    portable graphs write it (``Mul``, ``Sign``) and as the training build's CPU sessions
    run it (one ``ReluGrad``)."""
    rng = np.random.default_rng(0)
    x = np.array(EDGE_VALUES + list(rng.standard_normal(500)), np.float32)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    model = relu_gradient_model()
    if kernels == "training":
        assert with_training_kernels(model) == 1
    ops = [n.op_type for n in model.graph.node]
    assert ops == (["Relu", "Sign", "Mul"] if kernels == "standard" else ["Relu", "ReluGrad"])
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), session_options(1), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {"x": x, "grad": grad})[0]
    np.testing.assert_array_equal(got, grad * (x > 0))


def test_training_kernels_replace_only_the_sign_of_a_float_relu():
    """A ``Sign`` of something else than a Relu's output, a double Relu (``ReluGrad`` is
    float only) and a ``Sign`` that another node also reads keep the standard nodes."""
    b = GraphBuilder("signs", 17)
    x, grad = b.input("x", [3]), b.input("grad", [3])
    b.output(b.op("Mul", grad, b.op("Sign", x)), [3])
    shared = b.op("Sign", b.op("Relu", x))
    b.output(b.op("Mul", grad, shared), [3])
    b.output(b.op("Add", shared, grad), [3])
    for model in (b.to_model(), relu_gradient_model(onnx.TensorProto.DOUBLE)):
        before = model.SerializeToString()
        assert with_training_kernels(model) == 0
        assert model.SerializeToString() == before


def copied(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


@pytest.mark.training_build
def test_training_kernels_reach_the_epoch_loop_body(regression):
    """The epoch loop's two small Relus (MLP 6-4) take ``ReluGrad`` inside the ``Scan``
    body, and the model declares the kernels' domain."""
    X, y = regression
    onx = to_onnx(fitted_mlp(X, y), X[:1])
    model = FullTrainer(onx, epoch_loop=True, backend="portable", batch_size=4, max_iter=1)
    loop = copied(model.fit(X, y)._steps.graphs["epoch_loop"])
    assert with_training_kernels(loop) == 2
    (scan,) = [n for n in loop.graph.node if n.op_type == "Scan"]
    body = [n.op_type for n in scan.attribute[0].g.node]
    assert body.count("ReluGrad") == 2 and "Sign" not in body
    assert "com.microsoft" in [o.domain for o in loop.opset_import]
    onnx.checker.check_model(loop)


@pytest.mark.training_build
def test_training_kernels_reach_a_backward_graph_through_the_stashed_relus(regression):
    """The portable backward graph reads the Relus' outputs from the forward graph: named as
    Relu outputs, its two ``Sign`` take ``ReluGrad``; unnamed, none does."""
    X, y = regression
    onx = to_onnx(fitted_mlp(X, y), X[:1])
    model = ForwardBackwardTrainer(onx, backend="portable", batch_size=4, max_iter=1)
    graphs = model.fit(X, y)._steps.graphs
    relus = [n.output[0] for n in graphs["forward"].graph.node if n.op_type == "Relu"]
    assert with_training_kernels(copied(graphs["backward"])) == 0
    backward = copied(graphs["backward"])
    assert with_training_kernels(backward, relus) == 2
    ops = [n.op_type for n in backward.graph.node]
    assert ops.count("ReluGrad") == 2 and "Sign" not in ops


@pytest.mark.training_build
@pytest.mark.parametrize(
    ("trainer", "settings", "label"),
    [
        (FullTrainer, dict(epoch_loop=True), "epoch_loop"),
        (FullTrainer, {}, "fused_step"),
        (ForwardBackwardTrainer, {}, "backward"),
    ],
    ids=["epoch-loop", "fused-step", "backward"],
)
def test_the_cpu_sessions_run_relu_grad(trainer, settings, label, regression, tmp_path):
    """What the sessions ran, from onnxruntime's own profile: ``ReluGrad`` in the step's
    session, no ``Sign`` in any session of a portable fit on the CPU."""
    X, y = regression
    onx = to_onnx(fitted_mlp(X, y), X[:1])
    with profiled_sessions(tmp_path):
        model = trainer(onx, backend="portable", batch_size=4, max_iter=1, **settings)
        model.fit(X, y)
        del model
        gc.collect()  # a session writes its profile when it is destroyed
    ran = {}
    for path in tmp_path.glob("*.json"):
        events = json.loads(path.read_text())
        ran[path.name] = {e["args"]["op_name"] for e in events if "op_name" in e.get("args", {})}
    (step,) = [ops for name, ops in ran.items() if name.startswith(f"{trainer.__name__}_{label}_")]
    assert "ReluGrad" in step
    assert not any("Sign" in ops for ops in ran.values())


@pytest.mark.parametrize(
    ("like", "rows", "op_type"),
    [([12], 512, "MatMul"), ([1, 12], 512, "Gemm"), ([1, 12], 16, "Gemm"), ([12], 16, "ReduceSum")],
)
def test_column_sums_are_a_product_by_ones(like, rows, op_type):
    """The gradient of a bias broadcast over the rows: one product by ones, a Gemm for a
    (1, n) bias at any size (an update's Sum folds into it), a MatMul for a large (n,) one,
    a ReduceSum for a small (n,) one; the sum numpy gives, shaped like the bias."""

    grad = np.random.default_rng(0).standard_normal((rows, 12)).astype(np.float32)
    b = GraphBuilder("sum", 17)
    shapes = {"bias": like, "out": [rows, 12]}
    total = RuleContext(b, shapes, set()).unbroadcast(b.input("grad", [rows, 12]), "bias", "out")
    b.output(total, like)
    assert [n.op_type for n in b.nodes] == [op_type]
    session = onnxruntime.InferenceSession(
        b.to_model().SerializeToString(), providers=["CPUExecutionProvider"]
    )
    got = session.run(None, {"grad": grad})[0]
    np.testing.assert_allclose(got, grad.sum(axis=0).reshape(like), rtol=1e-5, atol=1e-5)


def _two_layers(columns: int, rng) -> onnx.ModelProto:
    """Y = Gemm(Relu(Gemm(X, W1, b1)), W2, b2), X of shape (16, 5), Y of (16, columns)."""
    weights = {
        "W1": rng.standard_normal((5, 8)),
        "b1": rng.standard_normal(8),
        "W2": rng.standard_normal((8, columns)),
        "b2": rng.standard_normal(columns),
    }
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Gemm", ["X", "W1", "b1"], ["h"]),
            onnx.helper.make_node("Relu", ["h"], ["r"]),
            onnx.helper.make_node("Gemm", ["r", "W2", "b2"], ["Y"]),
        ],
        "two_layers",
        [onnx.helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [16, 5])],
        [onnx.helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [16, columns])],
        [onnx.numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    ("loss", "columns"),
    [
        ("squared_error", 1),
        ("squared_error", 3),
        (SquareLearningLoss(convention="seed"), 1),
        ("absolute_error", 2),
        ("elastic", 2),
    ],
)
def test_the_hand_written_loss_gradient_is_the_differentiated_one(loss, columns, tmp_path):
    """The portable step with the loss's gradient written by hand (``LossHead``) gives the
    steps and the loss of the step differentiated node by node, on weighted rows and
    several outputs, with fewer nodes once onnxruntime has optimized both."""
    rng = np.random.default_rng(0)
    model = _two_layers(columns, rng)
    loss = BaseLearningLoss.select(loss)
    with_loss = add_loss_output(model, loss, label_name="label", scale_name="shares")
    with_loss = select_outputs(with_loss, ["loss"])
    grad_scale = onnx.helper.make_tensor_value_info("grad_scale", onnx.TensorProto.FLOAT, [16, 1])
    weights = ["W1", "b1", "W2", "b2"]
    shares = rng.uniform(0.2, 2.0, (16, 1)).astype(np.float32) / 16
    feeds = {
        "X": rng.standard_normal((16, 5)).astype(np.float32),
        "label": rng.standard_normal((16, columns)).astype(np.float32),
        "shares": shares,
        **{i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer},
    }
    by_hand = onnx.ModelProto()
    by_hand.CopyFrom(with_loss)
    by_hand.graph.input.append(grad_scale)  # what the trainer adds for a head
    cases = {
        "by hand": (
            by_hand,
            LossHead(loss, "Y", "label", "grad_scale", "shares"),
            "grad_scale",
            shares,
        ),
        "rules": (with_loss, None, "step_scale", np.array(1, dtype=np.float32)),
    }
    found, nodes = {}, {}
    for key, (graph, head, scale, factor) in cases.items():
        graph = step_graph(graph, weights, "loss", head).SerializeToString()
        options = onnxruntime.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / f"{key}.onnx")
        session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        step = np.asarray(factor * np.float32(-0.1), dtype=np.float32)
        found[key] = session.run(None, {**feeds, scale: step})
        nodes[key] = len(onnx.load(options.optimized_model_filepath).graph.node)
    # the head's loss stays the (1, 1) its weighting Gemm gives: no node reduces it
    assert found["by hand"][-1].shape == (1, 1) and found["rules"][-1].shape == ()
    found["by hand"][-1] = found["by hand"][-1].reshape(())
    for by_hand, differentiated in zip(found["by hand"], found["rules"]):
        np.testing.assert_allclose(by_hand, differentiated, rtol=1e-5, atol=1e-7)
    assert np.abs(found["by hand"][0]).max() > 1e-3  # a real step
    assert nodes["by hand"] < nodes["rules"], nodes


def test_a_penalty_or_a_classification_loss_keeps_the_differentiated_gradient():
    names = dict(predicted="p", label="y", grad_scale="g", loss_scale="s")
    assert LossHead.of(SquareLearningLoss(), None, **names)
    assert LossHead.of(SquareLearningLoss(), {"w": 1e-4}, **names) is None
    log = NegLogLearningLoss(probability_function="softmax")
    assert LossHead.of(log, None, **names) is None

    class Shifted(SquareLearningLoss):
        """A regression loss whose differentiated term is not the one of its derivative."""

        def element_loss_nodes(self, b, expected, predicted):
            return super().element_loss_nodes(b, expected, b.op("Add", predicted, b.const(1.0)))

    assert LossHead.of(Shifted(), None, **names) is None


def test_a_shuffled_epoch_stages_the_rows_in_scikit_learns_order():
    """Each epoch refills the staged batches with the rows in the order scikit-learn's MLP
    gives them from the same seed (its ``shuffle`` of the previous epoch's order), sample
    weights and loss scales along, and keeps the padded rows of the last batch at zero
    weight."""
    from sklearn.utils import shuffle

    rng = np.random.default_rng(0)
    X = rng.standard_normal((37, 4)).astype(np.float32)
    y = rng.standard_normal((37, 1)).astype(np.float32)
    w = rng.uniform(0.5, 2.0, 37).astype(np.float32)
    loader = BatchLoader([X, y, w], 8, "cpu", shuffle=True, rows=RowOrder(3))
    reference, order = np.random.RandomState(3), np.arange(37)
    for _ in range(3):
        order = shuffle(order, random_state=reference)  # as MLPRegressor's epochs do
        batches = loader.epoch()
        staged = [np.concatenate([b.values[k].numpy() for b in batches]) for k in range(3)]
        for source, got in zip([X, y, w], staged):
            np.testing.assert_array_equal(got[:37], source[order])
            assert not got[37:].any()
        last = batches[-1]
        assert last.length == 5
        scale = last.loss_scale.numpy().ravel()
        np.testing.assert_allclose(scale[:5], w[order][32:] / w[order][32:].sum(), rtol=1e-6)
        assert not scale[5:].any()
