"""Installs other than the training build: the one line naming the extras when no onnxruntime
is installed, and what runs with plain onnxruntime (the ``cpu`` and ``gpu`` extras)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import onnxruntime
import pandas as pd
import pytest

from ortbench.bench.contenders import Unavailable, make_contender
from ortbench.bench.problems import make_problem
from ortbench.bench.store import RESULTS_CSV
from ortbench.cli import main
from ortbench.install import EXTRAS
from ortbench.training import OrtBenchError
from ortbench.training.runtime import build, devices
from ortbench.training.runtime.build import runtime_problem

#: What the training build alone runs, and what any onnxruntime build runs.
TRAINING_ONLY = ["ort-full", "ort-fwbw", "ort-fwbw-nesterov"]
PORTABLE = ["ort-portable-full", "ort-portable-fwbw", "ort-portable-nesterov"]

plain_only = pytest.mark.skipif(
    runtime_problem() is None, reason="checks an environment without the training build"
)

WITHOUT_ONNXRUNTIME = """
import sys
sys.modules["onnxruntime"] = None  # imports of onnxruntime fail as if it were not installed
"""


def run_without_onnxruntime(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_ONNXRUNTIME + code],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_onnxruntime_the_command_prints_one_line_naming_the_extras():
    done = run_without_onnxruntime(
        "from ortbench.__main__ import main\nsys.exit(main(['bench', '--quick']))"
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("ortbench: error: no onnxruntime is installed: pip install one of")
    for extra in EXTRAS:
        assert f"'ortbench[{extra}]'" in line


def test_without_onnxruntime_importing_the_engine_raises_an_import_error():
    done = run_without_onnxruntime(
        "try:\n    import ortbench.training\nexcept ImportError as e:\n    print(e)"
    )
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith("no onnxruntime is installed") and "'ortbench[cpu]'" in line


@plain_only
@pytest.mark.parametrize("name", TRAINING_ONLY)
def test_training_build_contenders_say_what_is_installed_and_what_to_install(name):
    with pytest.raises(Unavailable) as error:
        make_contender(name, make_problem("linear", "diabetes", n_samples=60), 15)
    message = str(error.value)
    assert message.startswith("needs onnxruntime-training 1.19.2 (installed: onnxruntime")
    assert f" {onnxruntime.__version__})" in message
    assert "pip install 'ortbench[training]'" in message and "\n" not in message


@plain_only
def test_quick_bench_times_the_portable_contenders(tmp_path, capsys):
    argv = ["bench", "--quick", "--epochs", "1", "--repeat", "1", "--keep-going"]
    status = main([*argv, "--out", str(tmp_path)])
    assert status == 0
    (folder,) = tmp_path.iterdir()
    results = pd.read_csv(folder / RESULTS_CSV)
    status = results.groupby("contender").status.agg(set).to_dict()
    assert set(status) == {"sklearn-mlp-sgd", *TRAINING_ONLY, *PORTABLE}
    for name in TRAINING_ONLY:
        needs = "unavailable: needs onnxruntime-training"
        assert all(s.startswith(needs) for s in status[name]), name
    for name in ["sklearn-mlp-sgd", *PORTABLE]:  # timed (one slope: maybe unstable when loaded)
        assert all(s == "ok" or s.startswith("unstable: ") for s in status[name]), name
    assert "| ort-portable-full |" in capsys.readouterr().out


@plain_only
def test_asv_suites_skip_the_training_build_contenders():
    from benchmarks.bench_training import TimeEpoch

    suite = TimeEpoch()
    with pytest.raises(NotImplementedError, match=r"ortbench\[training\]"):
        suite.setup("ort-full", "linear", 15, "cpu")  # asv records the cell as skipped
    suite.setup("ort-portable-full", "linear", 15, "cpu")
    steps = suite.contender.n_steps_
    suite.time_epoch("ort-portable-full", "linear", 15, "cpu")
    assert suite.contender.n_steps_ > steps


def test_a_listed_cuda_provider_that_does_not_load_is_not_available(monkeypatch):
    """onnxruntime-gpu lists CUDAExecutionProvider also where CUDA's libraries are missing
    (the gpu extra on a machine without CUDA); sessions then fall back to the CPU."""
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this build lists CUDA itself: the test fakes a build that lists it")
    listed = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: listed)
    build.cuda_loads.cache_clear()
    try:
        with pytest.raises(OrtBenchError, match="lists CUDAExecutionProvider but cannot load it"):
            devices.check_device("cuda", "portable")
        with pytest.raises(Unavailable, match="cannot load it"):
            make_contender("ort-portable-full", make_problem("linear", n_samples=60), 15, "cuda")
    finally:
        build.cuda_loads.cache_clear()
    devices.check_device("cpu", "portable")


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="checks an environment with torch"
)
def test_the_engine_trains_without_importing_torch():
    """With torch installed, importing ortbench and training (onnxruntime-training's
    artifacts for the full mode included) imports neither torch nor sympy, which the
    runtime's build check and two package ``__init__`` files would import."""
    code = """
import sys
import numpy as np
from skl2onnx import to_onnx
from sklearn.neural_network import MLPRegressor
from ortbench.training import FullTrainer
X = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32)
y = X.sum(axis=1)
mlp = MLPRegressor(hidden_layer_sizes=(4,), max_iter=1).fit(X, y)
FullTrainer(to_onnx(mlp, X[:1]), max_iter=2).fit(X, y)
print(sorted(m for m in ("torch", "sympy") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
