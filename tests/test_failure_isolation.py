"""A contender that cannot train a model gets its own row; the others still run."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from ortbench.bench.store import RESULTS_CSV
from ortbench.cli import main
from ortbench.training import ForwardBackwardTrainer, FullTrainer, NoGradientError
from ortbench.training.runtime.build import runtime_problem

TORCH = importlib.util.find_spec("torch") is not None
RNG = np.random.RandomState(0)


def wrapped_network() -> onnx.ModelProto:
    """Gemm, a float Mod (no gradient backend has a rule for it; torch differentiates it),
    Gemm."""
    weights = {
        "W1": RNG.randn(4, 5).astype(np.float32),
        "b1": np.full(5, 0.1, np.float32),
        "three": np.array(3.0, np.float32),
        "W2": RNG.randn(5, 1).astype(np.float32) * 0.3,
        "b2": np.zeros(1, np.float32),
    }
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["X", "W1", "b1"], ["h"], name="first"),
            helper.make_node("Mod", ["h", "three"], ["m"], name="wrap", fmod=1),
            helper.make_node("Gemm", ["m", "W2", "b2"], ["Y"], name="second"),
        ],
        "wrapped",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["ort-training", "portable"])
@pytest.mark.parametrize("trainer", [ForwardBackwardTrainer, FullTrainer])
def test_the_node_without_gradient_is_named(trainer, backend):
    X = RNG.randn(40, 4).astype(np.float32)
    with pytest.raises(NoGradientError) as error:
        trainer(wrapped_network(), backend=backend, max_iter=1).fit(X, X[:, 0])
    assert error.value.reason == "no gradient for Mod (node 'wrap')"
    assert "/" not in str(error.value) and ".h:" not in str(error.value)


def test_bench_gives_the_contender_without_gradient_its_own_row(tmp_path):
    onnx.save(wrapped_network(), tmp_path / "wrapped.onnx")
    X = RNG.randn(300, 4).astype(np.float32)
    np.savez(tmp_path / "d.npz", X=X, y=np.sin(X[:, 0]))
    contenders = ["ort-portable-full", "ort-fwbw", "torch-sgd"]
    out = tmp_path / "out"
    argv = ["bench", "--batch-sizes", "16", "--devices", "cpu", "--epochs", "2", "--repeat", "1"]
    argv.append("--keep-going")  # an unstable time on a loaded machine is beside the point
    # without torch no cell can run: exit 2
    assert main([
        *argv, "--model", str(tmp_path / "wrapped.onnx"), "--data", str(tmp_path / "d.npz"),
        "--contenders", *contenders, "--out", str(out),
    ]) == (0 if TORCH else 2)  # fmt: skip
    (folder,) = out.iterdir()
    status = pd.read_csv(folder / RESULTS_CSV).set_index("contender").status
    no_gradient = "unavailable: no gradient for Mod (node 'wrap')"
    assert status["ort-portable-full"] == no_gradient
    if runtime_problem() is None:
        assert status["ort-fwbw"] == no_gradient
    else:
        assert status["ort-fwbw"].startswith("unavailable: needs onnxruntime-training")
    assert status["torch-sgd"] == ("ok" if TORCH else "unavailable: needs torch: pip install torch")
