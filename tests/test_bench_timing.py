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
from helpers import shown_in_summary, timed

from ortbench.bench import matrix, timing
from ortbench.bench.contenders.base import Contender
from ortbench.bench.matrix import BenchConfig, run_matrix
from ortbench.bench.problems import make_problem
from ortbench.bench.store import RESULTS_CSV, ResultsWriter, read_records
from ortbench.bench.timing import (
    MIN_EXTRA_SECONDS,
    QUIET_LIMIT,
    QUIET_WINDOW,
    SHORT_EPOCHS,
    SPREAD_BOUND,
    long_fit_epochs,
    slope,
    unstable,
    wait_until_quiet,
)

#: A step of the sleeping contender, and what each of its fits pays once.
STEP = 0.002
SET_UP = 0.1


class Sleeper(Contender):
    """A contender whose steps sleep STEP seconds and whose fits sleep SET_UP first; it
    notes how long each sleep really lasted (longer on a loaded machine)."""

    name = "sleeper"
    slept: ClassVar[dict[str, list[float]]] = {"set_up": [], "step": []}

    def _fit(self, epochs: int) -> list[float]:
        self._continue(epochs)
        return [1.0] * epochs

    def _sleep(self, kind: str, seconds: float) -> None:
        start = time.perf_counter()
        time.sleep(seconds)
        self.slept[kind].append(time.perf_counter() - start)

    def _continue(self, epochs: int) -> None:
        self._sleep("set_up", SET_UP)
        for _ in range(epochs * self.problem.steps_per_epoch(self.batch_size)):
            self._sleep("step", STEP)

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
    Sleeper.slept = {"set_up": [], "step": []}
    run_matrix(config, ResultsWriter(tmp_path), "sleepy")
    (row,) = read_records(tmp_path)
    assert row["status"] == "ok"
    steps = make_problem("linear", "diabetes").steps_per_epoch(32)
    assert steps == 12 and row["steps"] == 36
    # against what the sleeps really lasted, so that a loaded machine changes nothing
    step = float(np.mean(Sleeper.slept["step"]))
    set_up = float(np.mean(Sleeper.slept["set_up"]))
    assert 0.8 * step < row["seconds_per_step"] < 1.25 * step
    assert 0.8 * set_up < row["seconds_per_fit_overhead"] < 1.25 * set_up
    # the fixed part is no small matter here: dividing a fit by its steps would not do
    assert set_up > steps * step  # more than an epoch


class Ticker(Sleeper):
    """A contender with quick steps and no set-up: its epochs last a few milliseconds."""

    name = "ticker"

    def _continue(self, epochs: int) -> None:
        for _ in range(epochs * self.problem.steps_per_epoch(self.batch_size)):
            time.sleep(STEP / 4)


@pytest.mark.parametrize("fixed", [0.0, 0.04, 0.2])
def test_long_fits_outlast_short_ones_by_min_extra_seconds(fixed):
    """Fits of a simulated clock that pay ``fixed`` seconds once and 1 ms per epoch: the
    long fit ends up at least MIN_EXTRA_SECONDS longer than the short one, however large
    the fixed part, and not far more."""
    fits = []

    def time_fits(epochs: int) -> dict:
        fits.append(epochs)
        return {"only": fixed + 1e-3 * epochs}

    long = long_fit_epochs(time_fits, epochs=3)
    assert fits[0] == SHORT_EPOCHS and long in fits
    assert 1e-3 * (long - SHORT_EPOCHS) >= MIN_EXTRA_SECONDS
    assert 1e-3 * (long - SHORT_EPOCHS) <= 1.5 * MIN_EXTRA_SECONDS
    # epochs long enough already: no growth
    assert long_fit_epochs(lambda epochs: {"only": fixed + 0.1 * epochs}, epochs=3) == 4


def test_long_fits_are_sized_on_the_slower_side():
    """One side gains 1 ms per epoch, the other 5 ms: the quicker one must reach the target."""
    long = long_fit_epochs(lambda e: {"a": 0.2 + 1e-3 * e, "b": 0.01 + 5e-3 * e}, epochs=3)
    assert 1e-3 * (long - SHORT_EPOCHS) >= MIN_EXTRA_SECONDS


def test_a_stalled_short_fit_does_not_grow_the_long_one():
    """The first short fit stalls for 0.3 s once (a page fault storm, the other core's
    work): the long fit is sized as if it had not, not grown fourfold per stall."""
    stalls = [0.3]

    def time_fits(epochs: int) -> dict:
        stall = stalls.pop() if stalls else 0.0
        return {"only": 0.01 + 1e-3 * epochs + stall}

    clean = long_fit_epochs(lambda epochs: {"only": 0.01 + 1e-3 * epochs}, epochs=3)
    assert long_fit_epochs(time_fits, epochs=3) == clean


def test_quick_epochs_are_timed_over_long_enough_fits(tmp_path, monkeypatch):
    """The protocol's decision, whatever the machine's speed: the long fits grow until one
    measured MIN_EXTRA_SECONDS longer than the short fit, and the rounds time that length."""
    fits: list[tuple[int, float]] = []

    class Logged(Ticker):
        def time_fit(self, epochs: int) -> float:
            seconds = super().time_fit(epochs)
            fits.append((epochs, seconds))
            return seconds

    monkeypatch.setitem(matrix.CONTENDERS, "ticker", Logged)
    config = BenchConfig(
        contenders=("ticker",), problems=("linear",), datasets=("diabetes",),
        batch_sizes=(32,), devices=("cpu",), epochs=1, repeat=3,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "quick")
    (row,) = read_records(tmp_path)
    assert row["status"] == "ok"
    long = int(row["timing"].split()[4].split("-")[0])
    # a loaded machine may leave the first rounds unstable: they are then timed again
    repeat = config.repeat * (2 if row["timing"].endswith(timing.TIMED_AGAIN) else 1)
    rounds = fits[-2 * repeat :]
    assert [epochs for epochs, _ in rounds] == [SHORT_EPOCHS, long] * repeat
    sizing = fits[: -2 * repeat]
    assert sizing[0][0] == SHORT_EPOCHS
    longs = [
        (i, epochs, seconds) for i, (epochs, seconds) in enumerate(sizing) if epochs != SHORT_EPOCHS
    ]

    def quickest_short(until: int) -> float:
        return min(seconds for epochs, seconds in sizing[:until] if epochs == SHORT_EPOCHS)

    # the last long fit outlasts the quickest short fit by the target; each one before it
    # fell short, even against the short fit timed again after it
    assert longs[-1][1] == long
    assert longs[-1][2] - quickest_short(len(sizing)) >= MIN_EXTRA_SECONDS
    assert all(seconds - quickest_short(i + 2) < MIN_EXTRA_SECONDS for i, _, seconds in longs[:-1])
    assert [epochs for _, epochs, _ in longs] == sorted({epochs for _, epochs, _ in longs})


def test_slopes_that_are_no_measurement_are_unstable():
    assert unstable([1e-3, 1.1e-3, 0.9e-3, 1.2e-3]) is None
    assert unstable([1e-3, -1e-4, 1e-3]) == "1 of 3 slopes not positive"
    assert unstable([1e-3, 0.0]) == "1 of 2 slopes not positive"
    spread = [1e-3, 1e-3, 1e-3 * SPREAD_BOUND * 1.5, 1e-3 * SPREAD_BOUND * 1.5]
    assert unstable(spread).startswith(f"slopes spread beyond {SPREAD_BOUND:g}x")


class Jumpy(Ticker):
    """A contender whose short fits report a large fixed part every other time: some of its
    slopes come out negative.

    The jump is added to the time reported, not slept: a slept jump of fixed length came
    out smaller than the long fits' extra steps on a loaded machine, and those slopes were
    positive. :data:`JUMP` outweighs any long fit of this contender."""

    name = "jumpy"
    shorts = 0

    def time_fit(self, epochs: int) -> float:
        pays = False
        if epochs == SHORT_EPOCHS:
            Jumpy.shorts += 1
            pays = Jumpy.shorts % 2 == 0
        return super().time_fit(epochs) + (JUMP if pays else 0.0)


#: The fixed part :class:`Jumpy` reports every other short fit (seconds).
JUMP = 1000.0


def test_a_cell_with_negative_slopes_is_unstable_and_fails_bench(tmp_path, monkeypatch, capsys):
    from ortbench.cli import main

    # under real names, which the plots know
    monkeypatch.setitem(matrix.CONTENDERS, "ort-full", Jumpy)
    monkeypatch.setitem(matrix.CONTENDERS, "sklearn-mlp-sgd", Ticker)
    argv = ["bench", "--contenders", "ort-full", "sklearn-mlp-sgd", "--problem", "linear"]
    argv += ["--dataset", "diabetes", "--batch-sizes", "32", "--devices", "cpu", "--epochs"]
    argv += ["1", "--repeat", "4"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 1
    (folder,) = (tmp_path / "a").iterdir()
    statuses = {r["contender"]: r["status"] for r in read_records(folder)}
    assert statuses["sklearn-mlp-sgd"] == "ok"
    assert statuses["ort-full"].startswith("unstable: ") and "not positive" in statuses["ort-full"]
    summary = (folder / "summary.md").read_text()
    (line,) = [line for line in summary.splitlines() if "| ort-full |" in line]
    assert "unstable" in line  # listed with its reason, no speed-up
    assert "\n## Cells without a measurement\n" in summary  # ran, but has no time to show
    assert "failed or unstable" in capsys.readouterr().err
    # timed again (the whole group), unstable again
    assert {r["timing"].endswith(timing.TIMED_AGAIN) for r in read_records(folder)} == {True}
    assert main([*argv, "--keep-going", "--out", str(tmp_path / "b")]) == 0


class Simulated(Ticker):
    """A contender on a simulated clock: a fit reports 10 ms once and 1 ms per step,
    whatever the machine's load, and nothing runs."""

    fits: ClassVar[list[tuple[str, int, int]]] = []  # (class, batch size, epochs) of each

    def time_fit(self, epochs: int) -> float:
        Simulated.fits.append((type(self).__name__, self.batch_size, epochs))
        return 0.01 + 1e-3 * epochs * self.problem.steps_per_epoch(self.batch_size)


class Stalling(Simulated):
    """:class:`Simulated`, but every other short fit reports :data:`JUMP` more while
    ``stalling`` holds: a busy moment of the machine."""

    stalling = True
    shorts = 0

    def time_fit(self, epochs: int) -> float:
        seconds = super().time_fit(epochs)
        if epochs == SHORT_EPOCHS and Stalling.stalling:
            Stalling.shorts += 1
            seconds += JUMP if Stalling.shorts % 2 == 0 else 0.0
        return seconds


def test_a_group_left_unstable_by_a_busy_moment_is_timed_again(tmp_path, monkeypatch):
    """The first rounds of the batch-32 group stall (negative slopes), the machine calms
    down once they are judged: the whole group is timed again and both cells are measured;
    the batch-16 group, stable from the start, is timed once."""
    from ortbench.cli import main

    judged = []

    def calming(seconds_per_step):
        Stalling.stalling = False  # from the first judgement on
        judged.append(seconds_per_step)
        return unstable(seconds_per_step)

    monkeypatch.setattr(matrix, "unstable", calming)
    monkeypatch.setattr(Stalling, "stalling", True)
    monkeypatch.setattr(Simulated, "fits", [])
    monkeypatch.setitem(matrix.CONTENDERS, "ort-full", Stalling)
    monkeypatch.setitem(matrix.CONTENDERS, "sklearn-mlp-sgd", Simulated)
    argv = ["bench", "--contenders", "ort-full", "sklearn-mlp-sgd", "--problem", "linear"]
    argv += ["--dataset", "diabetes", "--batch-sizes", "32", "16", "--devices", "cpu"]
    argv += ["--epochs", "1", "--repeat", "4", "--out", str(tmp_path)]
    assert main(argv) == 0
    (folder,) = tmp_path.iterdir()
    rows = {(r["contender"], r["batch_size"]): r for r in read_records(folder)}
    assert {r["status"] for r in rows.values()} == {"ok"}
    assert any(t <= 0 for t in judged[0])  # the first rounds were no measurement
    for contender in ("ort-full", "sklearn-mlp-sgd"):
        assert rows[contender, 32]["timing"].endswith(timing.TIMED_AGAIN)
        assert timing.TIMED_AGAIN not in rows[contender, 16]["timing"]
        # the second rounds' slopes, exact on the simulated clock
        assert rows[contender, 32]["seconds_per_step"] == pytest.approx(1e-3, rel=1e-6)
        assert rows[contender, 32]["seconds_per_step_max"] == pytest.approx(1e-3, rel=1e-6)
    for name, contender in (("Stalling", "ort-full"), ("Simulated", "sklearn-mlp-sgd")):
        fits = [e for n, b, e in Simulated.fits if (n, b) == (name, 32)]
        # the second rounds' long fits run AGAIN_GROWTH times the first rounds' extra epochs
        again = int(rows[contender, 32]["timing"].split()[4].split("-")[0])
        first = SHORT_EPOCHS + (again - SHORT_EPOCHS) // timing.AGAIN_GROWTH
        assert again == SHORT_EPOCHS + timing.AGAIN_GROWTH * (first - SHORT_EPOCHS)
        assert fits[-8:] == [SHORT_EPOCHS, again] * 4  # interleaved: one contender's view
        assert fits[-16:-8] == [SHORT_EPOCHS, first] * 4
        assert fits.count(again) == 4 and first > SHORT_EPOCHS
        # the batch-16 group, timed once: its last fits are its 4 rounds
        fits = [e for n, b, e in Simulated.fits if (n, b) == (name, 16)]
        length = int(rows[contender, 16]["timing"].split()[4].split("-")[0])
        assert fits[-8:] == [SHORT_EPOCHS, length] * 4 and fits.count(length) <= 5


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
    # the rounds' 4 fits and at least 2 that sized the long one
    assert len(Hoarder.frozen) >= 6 and min(Hoarder.frozen) > 50_000
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


def test_wait_until_quiet_does_not_sleep_when_nothing_else_runs(monkeypatch):
    """Where the kernel tells that no other thread runs, not even one window is slept:
    the wait is paid before every timed fit."""
    slept = []
    monkeypatch.setattr(timing.time, "sleep", slept.append)
    monkeypatch.setattr(timing, "_others_running", lambda: False)
    wait_until_quiet()
    assert slept == []
    # where it does not tell, the process's CPU time over one window decides
    monkeypatch.setattr(timing, "_others_running", lambda: None)
    wait_until_quiet()
    assert slept == [QUIET_WINDOW]


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
    timed = Spinner.disturbed[2:]  # after the two untimed first fits: sizing, rounds
    assert len(timed) >= 4 * 3 + 2 * 2 and not any(timed)  # rounds, then sizing fits


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
    if self.model.n_iter_ < epochs:  # scikit-learn caught the signal and returned
        print("sklearn-cut-short", file=sys.stderr, flush=True)

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
    process.send_signal(signum)
    after = process.stderr.readlines()
    lines += after
    status = process.wait(timeout=120)
    assert status == 130, "".join(lines)
    # within the fit it came in or the next, not the 20 and more fits left of the cell
    assert sum(line.startswith("sklearn-fitting") for line in after) <= 1, "".join(lines)
    assert "sklearn-cut-short\n" in after, "".join(lines)  # it was swallowed
    # and said so in one line, not with scikit-learn's warning
    assert not any("Warning" in line for line in lines), "".join(lines)
    assert after[-1].startswith("ortbench: interrupted: finished cells are kept in"), after
    (folder,) = tmp_path.iterdir()
    results = pd.read_csv(folder / RESULTS_CSV)
    assert list(results.batch_size) == [32, 1]
    # a loaded machine may time the finished cell as unstable: measured all the same
    assert timed(results.status[0]), results.status[0]
    assert results.status[1] == "interrupted"
    assert np.isfinite(results.seconds_per_step[0]) and np.isnan(results.seconds_per_step[1])
    assert len(read_records(folder)[0]["seconds_per_step_samples"]) == 10
    summary = (folder / "summary.md").read_text()
    assert shown_in_summary(summary, results.status[0], "sklearn-mlp-sgd", "mlp", 32)


#: ``python -m ortbench``, each module's import time on stderr as it finishes.
COMMAND = [sys.executable, "-X", "importtime", "-m", "ortbench"]


def test_ctrl_c_while_the_libraries_load_is_one_line(tmp_path):
    """SIGINT once the command's own code runs and while onnxruntime, scikit-learn, pandas
    and torch load, before any command handles it: one line and exit 130, no traceback.
    The signal waits for numpy to have loaded (``-X importtime`` says when), not for a
    time that a loaded machine can outlast."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    process = subprocess.Popen(
        [*COMMAND, "bench", "--quick", "--out", str(tmp_path)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        # a test run in the background inherits SIGINT ignored, and so would the command
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for line in process.stderr:
        if line.split("|")[-1].strip() == "numpy":  # cli's imports are under way
            break
    process.send_signal(signal.SIGINT)
    errors = process.stderr.read()
    assert process.wait(timeout=60) == 130, errors
    assert "Traceback" not in errors
    assert errors.strip().splitlines()[-1] == "ortbench: interrupted"


class Restless(Ticker):
    """A contender whose first timed fit leaves a thread spinning longer than the wait
    for quiet lasts."""

    name = "restless"
    started = False

    def time_fit(self, epochs: int) -> float:
        seconds = super().time_fit(epochs)
        if not Restless.started:
            Restless.started = True
            busy = threading.Event()
            threading.Thread(target=spin, args=(QUIET_LIMIT + 0.5, busy)).start()
            busy.wait(1)
        return seconds


def test_a_wait_for_quiet_that_gave_up_is_in_the_row(tmp_path, monkeypatch):
    monkeypatch.setitem(matrix.CONTENDERS, "restless", Restless)
    config = BenchConfig(
        contenders=("restless",), problems=("linear",), datasets=("diabetes",),
        batch_sizes=(32,), devices=("cpu",), epochs=1, repeat=2,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "restless")
    (row,) = read_records(tmp_path)
    # (then "rounds timed again" where the spinning thread left the first ones unstable)
    assert f"; quiet wait gave up after 1 fits ({QUIET_LIMIT:g} s each)" in row["timing"]


class _Interrupted:
    """An import finder whose ``ortbench.cli`` fails as an extension module that Ctrl-C
    interrupts while it initialises: ImportError raised from KeyboardInterrupt."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        import importlib.util

        return (
            importlib.util.spec_from_loader(name, _Interrupted) if name == "ortbench.cli" else None
        )

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise ImportError("initialization failed") from e


def test_ctrl_c_inside_an_extension_module_s_import_is_one_line(monkeypatch, capsys):
    from ortbench.__main__ import main

    monkeypatch.delitem(sys.modules, "ortbench.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Interrupted, *sys.meta_path])
    assert main(["bench", "--quick"]) == 130
    assert capsys.readouterr().err == "ortbench: interrupted\n"
