"""The built-in network problems: cnn and transformer on the digit images."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np
import onnxruntime
import pandas as pd
import pytest
from helpers import timed
from sklearn.datasets import load_digits

from ortbench.bench.contenders import make_contender
from ortbench.bench.datasets import _LOADERS
from ortbench.bench.networks import cnn
from ortbench.bench.problems import check_problems, make_problem
from ortbench.bench.store import RESULTS_CSV
from ortbench.cli import main
from ortbench.training import OrtBenchError
from ortbench.training.graphs.weights import get_initializers
from ortbench.training.runtime.build import runtime_problem

TORCH = importlib.util.find_spec("torch") is not None
JAX = importlib.util.find_spec("jax") is not None


@pytest.mark.skipif(not TORCH, reason="torch is not installed")
def test_the_cnn_is_the_torch_network_it_describes():
    """Its graph computes what torch.nn's layers compute with the same weights."""
    import torch
    from torch.nn import functional as F

    model = cnn(10, seed=3)
    w = {k: torch.from_numpy(np.array(v)) for k, v in get_initializers(model).items()}
    x = np.random.RandomState(0).randn(7, 64).astype(np.float32)
    h = torch.from_numpy(x).reshape(-1, 1, 8, 8)
    for k in (1, 2):
        h = F.max_pool2d(
            torch.relu(F.conv2d(h, w[f"conv{k}.weight"], w[f"conv{k}.bias"], padding=1)), 2
        )
    expected = torch.softmax(h.flatten(1) @ w["out.weight"] + w["out.bias"], 1).numpy()
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    labels, probabilities = session.run(None, {"X": x})
    np.testing.assert_allclose(probabilities, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(labels, expected.argmax(1))


@functools.cache
def torch_curve(problem_name: str) -> list[float]:
    problem = make_problem(problem_name, "digits", n_samples=400)
    return make_contender("torch-sgd", problem, 16, shuffle=False).fit(2).loss_curve_


TRAINING_BUILD = pytest.mark.training_build


@pytest.mark.skipif(not TORCH, reason="torch is not installed")
@pytest.mark.parametrize("problem_name", ["cnn", "transformer"])
@pytest.mark.parametrize(
    "engine",
    [
        "ort-portable-full",
        "ort-portable-fwbw",
        pytest.param("ort-fwbw", marks=TRAINING_BUILD),
        pytest.param("ort-full", marks=TRAINING_BUILD),
    ],
)
def test_torch_and_the_engine_train_the_network_alike(problem_name, engine):
    problem = make_problem(problem_name, "digits", n_samples=400)
    found = make_contender(engine, problem, 16, shuffle=False).fit(2).loss_curve_
    np.testing.assert_allclose(found, torch_curve(problem_name), rtol=1e-5)
    assert found[1] < found[0]


def test_network_problems_read_the_digit_images():
    with pytest.raises(OrtBenchError, match="reads 8x8 digit images: run it on --dataset digits_"):
        check_problems(("cnn",), ("make_regression",))
    check_problems(("cnn", "transformer"), ("digits", "digits_shifted"))


def test_the_shifted_digits_are_the_images_moved_one_pixel():
    images, labels = load_digits(return_X_y=True)
    images = images.reshape(-1, 8, 8)
    X, y = _LOADERS["digits_shifted"](None, None, 0)
    copies = X.reshape(5, len(images), 8, 8)
    np.testing.assert_array_equal(y, np.tile(labels, 5))
    np.testing.assert_array_equal(copies[0], images)
    moves = set()
    for copy in copies[1:]:
        for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            expected = np.zeros_like(images)  # moved by (dr, dc), the edge left blank
            expected[:, max(dr, 0) : 8 + min(dr, 0), max(dc, 0) : 8 + min(dc, 0)] = images[
                :, max(-dr, 0) : 8 + min(-dr, 0), max(-dc, 0) : 8 + min(-dc, 0)
            ]
            if np.array_equal(copy, expected):
                moves.add((dr, dc))
    assert moves == {(-1, 0), (1, 0), (0, -1), (0, 1)}


def test_profile_runs_the_network_problems_on_the_digits(tmp_path, monkeypatch, capsys):
    """Without --dataset, profile reads the data set bench would: the digit images for a
    network problem. The profile itself is stopped once its request is made."""
    from ortbench.commands import profile as command

    requests = []

    def stopped(request, folder, **options):
        requests.append(request)
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "profile", stopped)
    for problem in ("cnn", "mlp"):
        argv = ["profile", "ort-portable-full", "--problem", problem, "--out", str(tmp_path)]
        assert main(argv) == 130
    assert [r.dataset for r in requests] == ["digits_shifted", "make_regression"]
    capsys.readouterr()
    assert main(["profile", "ort-portable-full", "--problem", "cnn", "--hidden", "8"]) == 2
    assert capsys.readouterr().err == (
        "ortbench: error: --hidden sizes the MLP problems, and cnn is not one\n"
    )


def test_bench_runs_the_network_problems_on_the_digits(tmp_path):
    argv = ["bench", "--problem", "cnn", "transformer", "--batch-sizes", "16", "--epochs", "1"]
    contenders = ["sklearn-mlp-sgd", "ort-fwbw", "ort-portable-full", "torch-sgd", "jax-sgd"]
    argv += ["--repeat", "1", "--n-samples", "300", "--devices", "cpu", "--contenders", *contenders]
    argv.append("--keep-going")  # an unstable time on a loaded machine is beside the point
    assert main([*argv, "--out", str(tmp_path)]) == 0
    (folder,) = tmp_path.iterdir()
    results = pd.read_csv(folder / RESULTS_CSV)
    assert set(results.dataset) == {"digits_shifted"}
    assert len(results) == 2 * len(contenders)
    status = results.set_index(["problem", "contender"]).status
    for problem in ("cnn", "transformer"):
        assert status[problem, "sklearn-mlp-sgd"].startswith("unavailable: the model is not an MLP")
        assert timed(status[problem, "torch-sgd"]) == TORCH, status[problem, "torch-sgd"]
        if not TORCH:
            assert status[problem, "torch-sgd"] == "unavailable: needs torch: pip install torch"
        assert timed(status[problem, "jax-sgd"]) == JAX, status[problem, "jax-sgd"]
        assert timed(status[problem, "ort-portable-full"])
        if runtime_problem() is None:
            assert timed(status[problem, "ort-fwbw"])
        else:
            assert status[problem, "ort-fwbw"].startswith("unavailable: needs onnxruntime-training")
