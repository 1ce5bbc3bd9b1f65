"""How the matrix times a step: fixed costs left out, signals obeyed even when swallowed."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest

from ortbench.bench import matrix
from ortbench.bench.contenders.base import (
    MIN_EXTRA_SECONDS,
    QUIET_LIMIT,
    Contender,
    extra_epochs,
    slope,
    wait_until_quiet,
)
from ortbench.bench.matrix import BenchConfig, run_matrix
from ortbench.bench.problems import make_problem
from ortbench.bench.store import RESULTS_CSV, ResultsWriter, read_records

#: A step of the sleeping contender, and what each of its fits pays once.
STEP = 0.002
SET_UP = 0.1


class Sleeper(Contender):
    """A contender whose steps sleep STEP seconds and whose fits sleep SET_UP first."""

    name = "sleeper"

    def _fit(self, epochs: int) -> list[float]:
        self._continue(epochs)
        return [1.0] * epochs

    def _continue(self, epochs: int) -> None:
        time.sleep(SET_UP)
        for _ in range(epochs * self.problem.steps_per_epoch(self.batch_size)):
            time.sleep(STEP)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.zeros(len(X))


def test_slope_recovers_a_line():
    # 3 ms per fit and 0.5 ms per step, fits of 10 and 40 steps
    assert slope(3e-3 + 10 * 5e-4, 3e-3 + 40 * 5e-4, 10, 40) == pytest.approx((5e-4, 3e-3))


def test_a_large_fixed_cost_per_fit_leaves_the_time_per_step_alone(tmp_path, monkeypatch):
    monkeypatch.setitem(matrix.CONTENDERS, "sleeper", Sleeper)
    config = BenchConfig(
        contenders=("sleeper",), problems=("linear",), datasets=("diabetes",),
        batch_sizes=(32,), devices=("cpu",), epochs=3, repeat=5,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "sleepy")
    (row,) = read_records(tmp_path)
    assert row["status"] == "ok"
    steps = make_problem("linear", "diabetes").steps_per_epoch(32)
    assert steps == 12 and row["steps"] == 36
    # a sleep lasts at least what it asks for, more on a loaded machine
    assert 0.75 * STEP < row["seconds_per_step"] < 1.5 * STEP
    assert 0.75 * SET_UP < row["seconds_per_fit_overhead"] < 1.5 * SET_UP
    # what dividing the long fit's time by its 48 steps would give: twice as much
    assert (SET_UP + 4 * steps * STEP) / (4 * steps) > 2 * STEP


class Ticker(Sleeper):
    """A contender with quick steps and no set-up: its epochs last a few milliseconds."""

    name = "ticker"

    def _continue(self, epochs: int) -> None:
        for _ in range(epochs * self.problem.steps_per_epoch(self.batch_size)):
            time.sleep(STEP / 4)


def test_extra_epochs_last_at_least_min_extra_seconds():
    assert extra_epochs(short_seconds=1.0, epochs=3) == 3
    assert extra_epochs(short_seconds=MIN_EXTRA_SECONDS / 40, epochs=3) == 40


def test_quick_epochs_are_timed_over_long_enough_fits(tmp_path, monkeypatch):
    """A fit's fixed part jumps by milliseconds now and then: the long fit outlasts the
    short one by about MIN_EXTRA_SECONDS, not by an epoch of a few milliseconds."""
    monkeypatch.setitem(matrix.CONTENDERS, "ticker", Ticker)
    config = BenchConfig(
        contenders=("ticker",), problems=("linear",), datasets=("diabetes",),
        batch_sizes=(32,), devices=("cpu",), epochs=1, repeat=3,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "quick")
    (row,) = read_records(tmp_path)
    assert row["status"] == "ok"
    long = int(row["timing"].removeprefix("slope between 1- and ").removesuffix("-epoch fits"))
    epoch = row["steps"] * row["seconds_per_step"]  # one epoch: steps is 1 epoch's steps
    assert epoch < MIN_EXTRA_SECONDS / 4
    assert 0.6 * MIN_EXTRA_SECONDS < (long - 1) * epoch < MIN_EXTRA_SECONDS + epoch


class Hoarder(Ticker):
    """A contender whose set-up leaves many objects with reference cycles behind, and
    which notes how many objects garbage collection leaves alone during each timed fit."""

    name = "hoarder"
    frozen: ClassVar[list[int]] = []

    def _fit(self, epochs: int) -> list[float]:
        self.cycles = [[] for _ in range(50_000)]
        for cycle in self.cycles:
            cycle.append(cycle)
        return super()._fit(epochs)

    def time_fit(self, epochs: int) -> float:
        self.frozen.append(gc.get_freeze_count())
        return super().time_fit(epochs)


def test_timed_fits_never_collect_what_building_left_behind(tmp_path, monkeypatch):
    monkeypatch.setitem(matrix.CONTENDERS, "hoarder", Hoarder)
    config = BenchConfig(
        contenders=("hoarder",), problems=("linear",), datasets=("diabetes",),
        batch_sizes=(32,), devices=("cpu",), epochs=1, repeat=2,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "hoarded")
    assert len(Hoarder.frozen) == 4 and min(Hoarder.frozen) > 50_000
    assert gc.get_freeze_count() == 0  # released after the group


def spin(seconds: float, busy: threading.Event) -> None:
    """Keep a core busy for ``seconds``, as a BLAS thread does after a call."""
    busy.set()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    busy.clear()


def test_wait_until_quiet_outlasts_a_spinning_thread():
    busy = threading.Event()
    spinner = threading.Thread(target=spin, args=(0.2, busy))
    spinner.start()
    assert busy.wait(1)
    waited = wait_until_quiet()
    assert not busy.is_set() and 0.15 < waited < QUIET_LIMIT
    spinner.join()
    assert wait_until_quiet() < 0.1  # nothing runs: one window or two


class Spinner(Ticker):
    """A contender whose fits leave a thread spinning 50 ms after they return, and which
    notes whether the other contender's thread was spinning when its own fits started."""

    name = "spinner"
    busy = threading.Event()
    disturbed: ClassVar[list[bool]] = []

    def _continue(self, epochs: int) -> None:
        self.disturbed.append(self.busy.is_set())
        super()._continue(epochs)
        threading.Thread(target=spin, args=(0.05, self.busy)).start()
        self.busy.wait(1)


class Follower(Spinner):
    name = "follower"
    busy = threading.Event()


def test_no_timed_fit_shares_the_cores_with_another_contenders_threads(tmp_path, monkeypatch):
    monkeypatch.setitem(matrix.CONTENDERS, "spinner", Spinner)
    monkeypatch.setitem(matrix.CONTENDERS, "follower", Follower)
    Follower.busy = Spinner.busy  # each sees whether the other's thread still spins
    config = BenchConfig(
        contenders=("spinner", "follower"), problems=("linear",), datasets=("diabetes",),
        batch_sizes=(32,), devices=("cpu",), epochs=1, repeat=3,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "spun")
    timed = Spinner.disturbed[2:]  # after the two untimed first fits
    assert len(timed) == 4 * 3 and not any(timed)


def test_generated_data_grow_to_8_full_batches():
    from ortbench.bench.matrix import Cell, _problem

    for batch, rows in ((15, 800), (256, 2048), (1024, 8192)):
        cell = Cell("ort-fwbw", "linear", "make_regression", batch, "cpu")
        problem = _problem(cell, BenchConfig())
        assert len(problem.data.X_train) == rows
        assert len(problem.data.X_train) // batch >= 8
    # the first 1,000 rows are the tutorial's data set whatever the batch size
    small = _problem(Cell("ort-fwbw", "linear", "make_regression", 1, "cpu"), BenchConfig())
    tutorial = make_problem("linear", "make_regression")
    assert np.array_equal(small.data.X_train, tutorial.data.X_train)


SCRIPT = """
import sys
from ortbench.bench.contenders.scikit_learn import SklearnMLP
from ortbench.cli import main

real = SklearnMLP._continue

def announced(self, epochs):
    if self.batch_size == 1:
        print("sklearn-fitting", file=sys.stderr, flush=True)
    real(self, epochs)

SklearnMLP._continue = announced
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_a_scikit_learn_fit_stops_the_run(tmp_path, signum):
    options = "bench --contenders sklearn-mlp-sgd --problem mlp --dataset diabetes"
    options += " --batch-sizes 32 1 --devices cpu --epochs 20 --repeat 10"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, *options.split(), "--out", str(tmp_path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines = []
    for line in process.stderr:  # the first cell finished, the batch-1 fits started
        lines.append(line)
        if line.startswith("sklearn-fitting"):
            break
    time.sleep(0.3)  # inside scikit-learn's epoch loop, which catches KeyboardInterrupt
    sent = time.perf_counter()
    process.send_signal(signum)
    lines += process.stderr.readlines()
    status = process.wait(timeout=60)
    assert status == 130, "".join(lines)
    assert time.perf_counter() - sent < 10  # within one timed fit, not 10 rounds later
    assert any("Training interrupted by user" in line for line in lines)  # it was swallowed
    (folder,) = tmp_path.iterdir()
    results = pd.read_csv(folder / RESULTS_CSV)
    assert list(results.batch_size) == [32, 1]
    assert list(results.status) == ["ok", "interrupted"]
    assert np.isfinite(results.seconds_per_step[0]) and np.isnan(results.seconds_per_step[1])
    assert len(read_records(folder)[0]["seconds_per_step_samples"]) == 10
    assert "| 32 | sklearn-mlp-sgd |" in (folder / "summary.md").read_text()


def test_ctrl_c_while_the_libraries_load_is_one_line(tmp_path):
    """SIGINT half a second after start lands while onnxruntime, scikit-learn, pandas and
    torch load, before any command handles it: one line and exit 130, no traceback."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(
        [sys.executable, "-m", "ortbench", "bench", "--quick", "--out", str(tmp_path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        # a test run in the background inherits SIGINT ignored, and so would the command
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    errors = process.stderr.read()
    assert process.wait(timeout=60) == 130, errors
    assert "Traceback" not in errors
    assert errors.strip().splitlines()[-1].startswith("ortbench:")
