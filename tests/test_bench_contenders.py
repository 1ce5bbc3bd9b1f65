"""Contenders against independent references: numpy for the starting point, each other for
the trajectory, the engine's documented step structure for the runtime counters."""

from __future__ import annotations

import importlib.util
import json
import math
import mmap
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper

from ortbench.bench.contenders import CONTENDERS, Unavailable, make_contender
from ortbench.bench.counters import count_runtime
from ortbench.bench.memory import MemoryGrowth, memory_growth
from ortbench.bench.problems import make_problem
from ortbench.training.runtime import capi

TORCH = importlib.util.find_spec("torch") is not None
JAX = importlib.util.find_spec("jax") is not None
#: (problem, data set, batch size): batch 1 on the linear problem lets sklearn-sgd run
CASES = [
    ("linear", "diabetes", 1),
    ("mlp", "diabetes", 16),
    ("mlp-binary", "breast_cancer", 16),
    ("mlp-multiclass", "digits", 16),
]


def problem_of(name: str, dataset: str):
    return make_problem(name, dataset, n_samples=200)


def numpy_output(problem, X) -> np.ndarray:
    """The reference model written in numpy, float64: relu layers, identity, logistic or
    softmax out."""
    a = X.astype(np.float64)
    coefs, intercepts = problem.reference.coefs_, problem.reference.intercepts_
    for k, (coef, intercept) in enumerate(zip(coefs, intercepts)):
        a = a @ coef + intercept
        if k < len(coefs) - 1:
            a = np.maximum(a, 0)
    if problem.task == "multiclass":
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    return 1 / (1 + np.exp(-a.ravel())) if problem.task == "binary" else a.ravel()


def expected_unavailable(name: str, problem, batch_size: int) -> str | None:
    if name.startswith("torch") and not TORCH:
        return "needs torch: pip install torch"
    if name.startswith("jax") and not JAX:
        return "needs jax: pip install 'ortbench[jax]'"
    if name == "sklearn-sgd" and not problem.is_linear:
        return "linear"
    return None


@pytest.mark.training_build
@pytest.mark.parametrize(("problem_name", "dataset", "batch_size"), CASES)
def test_every_contender_starts_from_the_same_loss_and_learns(problem_name, dataset, batch_size):
    problem = problem_of(problem_name, dataset)
    X, y = problem.data.X_train, problem.data.y_train
    initial = problem.loss(y, numpy_output(problem, X))
    ran = []
    for name in CONTENDERS:
        reason = expected_unavailable(name, problem, batch_size)
        if reason:
            with pytest.raises(Unavailable, match=reason):
                make_contender(name, problem, batch_size)
            continue
        contender = make_contender(name, problem, batch_size)
        start = problem.loss(y, contender.predict(X))
        assert start == pytest.approx(initial, rel=1e-5), name
        contender.fit(3)
        assert len(contender.loss_curve_) == 3, name
        assert contender.loss_curve_[-1] < contender.loss_curve_[0], (name, contender.loss_curve_)
        assert problem.loss(y, contender.predict(X)) < initial, name
        assert contender.n_steps_ == 3 * problem.steps_per_epoch(batch_size), name
        ran.append(name)
    assert {"sklearn-mlp-sgd", "ort-full", "ort-fwbw", "ort-fwbw-nesterov"} <= set(ran)
    assert ("sklearn-sgd" in ran) == problem.is_linear


def curves(names, problem, batch_size, epochs=3, shuffle=False):
    return {
        name: make_contender(name, problem, batch_size, shuffle=shuffle).fit(epochs).loss_curve_
        for name in names
    }


@pytest.mark.training_build
@pytest.mark.parametrize(
    ("problem_name", "dataset", "batch_size", "same"),
    [
        ("mlp", "diabetes", 16, ["sklearn-mlp-sgd", "ort-full", "ort-fwbw", "ort-portable-full"]),
        (
            "mlp",
            "diabetes",
            16,
            ["sklearn-mlp-nesterov", "ort-fwbw-nesterov", "ort-portable-nesterov"],
        ),
        ("mlp-256-128", "make_regression", 64, ["sklearn-mlp-sgd", "ort-fwbw", "torch-sgd"]),
        ("mlp", "diabetes", 16, ["sklearn-mlp-nesterov", "torch-nesterov"]),
        ("mlp-binary", "breast_cancer", 16, ["sklearn-mlp-sgd", "torch-sgd"]),
        ("mlp-multiclass", "digits", 16, ["sklearn-mlp-sgd", "ort-full", "ort-fwbw", "torch-sgd"]),
        (
            "mlp-binary",
            "breast_cancer",
            16,
            ["sklearn-mlp-sgd", "ort-full", "ort-fwbw", "ort-portable-full"],
        ),
        ("linear", "diabetes", 1, ["sklearn-sgd", "sklearn-mlp-sgd", "ort-fwbw"]),
    ],
)
def test_same_batches_give_the_same_trajectory(problem_name, dataset, batch_size, same):
    """The fairness claim: one problem, one optimisation, whatever trains it."""
    if any(name.startswith("torch") for name in same) and not TORCH:
        pytest.skip("torch is not installed")
    found = curves(same, problem_of(problem_name, dataset), batch_size)
    reference = found[same[0]]
    for name in same[1:]:
        # sklearn-sgd prints its losses with 6 decimals
        np.testing.assert_allclose(found[name], reference, rtol=1e-4, atol=2e-6, err_msg=name)


@pytest.mark.parametrize(
    "same",
    [
        ["sklearn-mlp-sgd", "ort-portable-full", "ort-portable-loop", "ort-portable-fwbw"],
        ["sklearn-mlp-nesterov", "ort-portable-nesterov"],
    ],
)
def test_portable_contenders_follow_scikit_learn(same):
    """Any onnxruntime build: 200 rows in batches of 16 end on a batch of 8."""
    found = curves(same, problem_of("mlp", "diabetes"), 16)
    for name in same[1:]:
        np.testing.assert_allclose(found[name], found[same[0]], rtol=1e-4, atol=2e-6, err_msg=name)


def test_shuffled_epochs_give_every_contender_scikit_learns_trajectory():
    """The bench shuffles (its default): from the problem's seed every contender sees the
    rows in scikit-learn's order, epoch after epoch, not only in the first."""
    same = ["sklearn-mlp-sgd", "ort-portable-full", "ort-portable-loop", "ort-portable-fwbw"]
    same += ["torch-sgd"] * TORCH + ["jax-sgd", "jax-scan"] * JAX
    found = curves(same, problem_of("mlp", "diabetes"), 16, epochs=4, shuffle=True)
    for name in same[1:]:
        np.testing.assert_allclose(found[name], found[same[0]], rtol=1e-4, err_msg=name)


@pytest.mark.training_build
def test_cells_that_cannot_run_say_why():
    problem = problem_of("mlp", "diabetes")
    for name in CONTENDERS:
        with pytest.raises(Unavailable) as error:
            make_contender(name, problem, 16, device="cuda")
        assert str(error.value), name
    with pytest.raises(Unavailable, match="batch size 1 only"):
        make_contender("sklearn-sgd", problem_of("linear", "diabetes"), 16)
    with pytest.raises(Unavailable, match="CPU only"):
        make_contender("sklearn-mlp-sgd", problem, 16, device="cuda")
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(Unavailable, match="not available"):
            make_contender("ort-full", problem, 16, device="cuda")


class LoopWithKnownCosts:
    """A stand-in trainer whose epoch runs two graphs per batch and creates one OrtValue and
    one fresh output per batch: what the counters must find."""

    def __init__(self):
        model = helper.make_model(
            helper.make_graph(
                [helper.make_node("Identity", ["X"], ["Y"])],
                "identity",
                [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 2])],
                [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        )
        self.session = capi.make_session(
            model.SerializeToString(), onnxruntime.SessionOptions(), ["CPUExecutionProvider"]
        )
        self.device = capi.OrtDevice(capi.OrtDevice.cpu(), capi.OrtDevice.default_memory(), 0)
        self.x = np.ones((2, 2), np.float32)

    def _run_epoch(self, batches):
        for _ in batches:
            value = capi.OrtValue.ortvalue_from_numpy(self.x, self.device)
            feeds, fetches = capi.OrtValueVector(), capi.OrtValueVector()
            feeds.push_back(value)
            options = capi.RunOptions()
            self.session.run_with_ortvaluevector(
                options, ["X"], feeds, ["Y"], fetches, [self.device]
            )
            binding = capi.SessionIOBinding(self.session)
            binding.bind_ortvalue_input("X", value)
            binding.bind_ortvalue_output("Y", fetches[0])  # preallocated: not a new one
            self.session.run_with_iobinding(binding, options)

    def fit(self, n_batches):
        self._run_epoch(range(n_batches))


def test_counters_count_runs_and_new_ortvalues():
    loop = LoopWithKnownCosts()
    with count_runtime(loop) as counts:
        loop.fit(5)
    assert (counts.steps, counts.runs, counts.ortvalues) == (5, 10, 10)
    loop.fit(3)  # outside the block: not counted, and the class is restored
    assert counts.runs == 10
    assert "_run_epoch" not in vars(loop)


@pytest.mark.parametrize(
    ("name", "runs"),
    [
        pytest.param("ort-full", 2, marks=pytest.mark.training_build),
        pytest.param("ort-fwbw", 4, marks=pytest.mark.training_build),
        pytest.param("ort-fwbw-nesterov", 4, marks=pytest.mark.training_build),
        ("ort-portable-full", 1 + 1 / 10),
        ("ort-portable-fwbw", 4 + 1 / 10),
        ("ort-portable-nesterov", 2 + 1 / 10),
        ("ort-portable-loop", 1 / 10),
    ],
)
def test_engine_steps_cost_what_the_engine_documents(name, runs):
    """Full training: train step + optimizer step (the portable step: one fused run, two
    with momentum); forward/backward: forward, loss, backward, update; the epoch loop: one
    run per epoch (10 steps of 16 training rows). The portable steps compute the losses
    in one more run per epoch. All preallocate every buffer a step touches."""
    problem = problem_of("mlp", "diabetes")
    counts = make_contender(name, problem, 16).fit(1).runtime_counts()
    assert counts.steps == problem.steps_per_epoch(16)
    assert counts.runs_per_step == runs
    assert counts.ortvalues_per_step == 0
    assert make_contender("sklearn-mlp-sgd", problem, 16).runtime_counts() is None


class Hoarder:
    """Fits that keep ``mb_per_epoch`` MB per epoch (touched, so resident), or free it.

    Each block is its own anonymous mapping: new pages, returned to the kernel when freed,
    whatever memory the allocator kept from earlier tests (which would serve a freed
    block again without raising the high-water mark)."""

    def __init__(self, mb_per_epoch: int, keep: bool):
        self.size = mb_per_epoch * 2**20
        self.keep = keep
        self.kept: list[mmap.mmap] = []

    def fit(self, epochs: int) -> Hoarder:
        for block in self.kept:
            block.close()
        self.kept = []
        return self.continue_fit(epochs)

    def continue_fit(self, epochs: int) -> Hoarder:
        for _ in range(epochs):
            block = mmap.mmap(-1, self.size)
            np.frombuffer(block, dtype=np.uint8)[:] = 1
            if self.keep:
                self.kept.append(block)
            else:
                block.close()  # unmapped before the next epoch's
        return self


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_memory_growth_tells_a_fit_that_keeps_memory_from_one_that_does_not():
    assert memory_growth(Hoarder(8, keep=True), epochs=10).ratio > 5
    assert memory_growth(Hoarder(8, keep=False), epochs=10).ratio < 1.5


MEASURE_GROWTH = """
import json, sys
from ortbench.bench.contenders import make_contender
from ortbench.bench.memory import memory_growth
from ortbench.bench.problems import make_problem
contender = make_contender(sys.argv[1], make_problem("mlp", "diabetes", n_samples=200), 1)
print(json.dumps(vars(memory_growth(contender, epochs=30))))
"""


@pytest.mark.training_build
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
@pytest.mark.parametrize("name", ["ort-full", "ort-fwbw", "ort-fwbw-nesterov"])
def test_engine_fits_do_not_grow_with_epochs(name):
    """In a fresh process, as asv measures it: a test process's heap has room to spare."""
    done = subprocess.run(
        [sys.executable, "-c", MEASURE_GROWTH, name], capture_output=True, text=True, check=True
    )
    growth = MemoryGrowth(**json.loads(done.stdout.splitlines()[-1]))
    assert growth.first_epoch_mb > 1, growth  # the first epoch built the sessions
    assert growth.ratio <= 1.05, growth  # measured 1.003 at most; the bound is 1.2


@pytest.mark.parametrize("threads", [1, None])
def test_engine_contenders_pass_their_thread_setting_to_the_trainer(threads):
    """The ThreadChoice asv suite compares thread settings through this attribute."""
    if (reason := CONTENDERS["ort-fwbw"].unavailable(make_problem("mlp"), 16, "cpu")) is not None:
        pytest.skip(reason)
    contender = make_contender("ort-fwbw", make_problem("mlp"), 16, "cpu")
    contender.intra_op_threads = threads
    other = make_contender("sklearn-mlp-sgd", make_problem("mlp"), 16, "cpu")
    assert math.isnan(other.fit(1).session_threads())
    contender.fit(1)
    assert contender.trainer._sessions.threads == threads
    # what results.csv records: the threads, 0 for onnxruntime's pool
    assert contender.session_threads() == (threads or 0)


@pytest.mark.parametrize(
    ("library", "names", "reason"),
    [
        ("torch", ["torch-sgd", "torch-nesterov"], "needs torch: pip install torch"),
        ("jax", ["jax-sgd", "jax-nesterov", "jax-scan"], "needs jax: pip install 'ortbench[jax]'"),
    ],
)
def test_without_its_library_a_peer_says_how_to_install_it(monkeypatch, library, names, reason):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == library else real(name, *a)
    )
    problem = make_problem("mlp", "diabetes", n_samples=200)
    assert [name for name in CONTENDERS if name.startswith(f"{library}-")] == names
    for name in names:
        with pytest.raises(Unavailable) as raised:
            make_contender(name, problem, 16)
        assert str(raised.value) == reason
