"""The matrix run and its outputs: schema, unavailable cells, interruption, the CLI."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import shown_in_summary, timed

from ortbench.bench import matrix
from ortbench.bench.contenders import Contender
from ortbench.bench.matrix import BenchConfig, run_matrix
from ortbench.bench.problems import make_problem
from ortbench.bench.store import (
    COLUMNS,
    LOSS_CURVES_CSV,
    RESULTS_CSV,
    ResultsWriter,
    read_plan,
    read_records,
    read_results,
)
from ortbench.bench.timing import TIMED_AGAIN
from ortbench.cli import main
from ortbench.report.plots import write_plots
from ortbench.report.summary import write_summary

SMALL = BenchConfig(
    contenders=("sklearn-mlp-sgd", "ort-full", "sklearn-sgd", "torch-sgd"),
    problems=("mlp",),
    datasets=("diabetes",),
    batch_sizes=(8, 16),
    devices=("cpu", "cuda"),
    epochs=4,
    repeat=3,
    n_samples=120,
)
TORCH = importlib.util.find_spec("torch") is not None


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    seen = []
    count = run_matrix(SMALL, ResultsWriter(folder), "test-run", lambda *a: seen.append(a[:2]))
    assert count == 16
    assert seen == [(k, 16) for k in range(1, 17)]
    return folder


@pytest.mark.training_build
def test_results_schema(run_folder):
    results = pd.read_csv(run_folder / RESULTS_CSV)
    assert list(results.columns) == COLUMNS
    assert len(results) == 16
    assert (results.run_id == "test-run").all()
    # measured cells: a loaded machine may time one as unstable, which is beside the point
    measured = results.status.map(timed)
    ok = results[measured]
    expected = ["ort-full", "sklearn-mlp-sgd", *(["torch-sgd"] if TORCH else [])]
    assert sorted(ok.contender) == expected
    assert set(ok.device) == {"cpu"} and set(ok.batch_size) == {8}
    others = results[~measured]
    assert others.status.str.startswith("unavailable: ").all()
    assert set(others[(others.contender == "sklearn-sgd") & (others.batch_size == 8)].status) == {
        "unavailable: SGDRegressor trains linear regressions only"
    }
    # 96 training rows hold 12 batches of 8 but only 6 of 16: no cell times padding
    assert set(results[(results.batch_size == 16) & (results.device == "cpu")].status) == {
        "unavailable: batch size 16 is more than an eighth of the 96 training rows of "
        "diabetes: an epoch would not hold 8 full batches; batch sizes up to 12 run on them, "
        "and batch size 16 needs data of 160 rows (20% are held out)"
    }
    for column in (
        "seconds_per_step",
        "seconds_per_fit_overhead",
        "peak_memory_mb",
        "final_train_loss",
        "validation_loss",
    ):
        assert np.isfinite(ok[column]).all(), column
        assert others[column].isna().all(), column
    assert (ok.seconds_per_step_min <= ok.seconds_per_step).all()
    assert (ok.seconds_per_step <= ok.seconds_per_step_max).all()
    # each long fit runs 4 epochs more than the short one, more where 4 last under 50 ms
    # (then what a loaded machine made of the rounds: a quiet wait given up, rounds timed again)
    lengths = ok.timing.str.extract(r"^slope between 1- and (\d+)-epoch fits(?:; .*)?$")[0]
    lengths = lengths.astype(int)
    assert (lengths >= 5).all()
    assert others.timing.isna().all()  # never timed: nothing to say how
    problem = make_problem("mlp", "diabetes", n_samples=120)
    assert len(problem.data.X_train) == 96
    assert (results.steps == 4 * results.batch_size.rdiv(96).apply(math.ceil)).all()
    assert (ok.final_train_loss < ok.initial_loss).all()
    assert ok.set_index("contender").runs_per_step.to_dict() == {
        "ort-full": 2.0,
        "sklearn-mlp-sgd": pytest.approx(np.nan, nan_ok=True),
        **({"torch-sgd": pytest.approx(np.nan, nan_ok=True)} if TORCH else {}),
    }
    assert ok.set_index("contender").intra_op_threads.to_dict() == {
        "ort-full": 1.0,  # 8 x 1,071 multiply-adds a step: below ONE_THREAD_WORK
        "sklearn-mlp-sgd": pytest.approx(np.nan, nan_ok=True),
        **({"torch-sgd": pytest.approx(np.nan, nan_ok=True)} if TORCH else {}),
    }
    assert (results.trained_values == 10 * 50 + 50 + 50 * 10 + 10 + 10 + 1).all()
    assert (results.onnxruntime_version == "1.19.2").all()
    assert (results.cpu_threads >= 1).all()

    records = read_records(run_folder)
    assert [r["contender"] for r in records] == list(results.contender)
    for record in records:
        measured = timed(record["status"])
        assert len(record["seconds_per_step_samples"]) == (3 if measured else 0)
        assert record["validation_loss"] is None or measured

    curves = pd.read_csv(run_folder / LOSS_CURVES_CSV)
    assert len(curves) == 4 * len(ok)
    assert list(curves.epoch) == [1, 2, 3, 4] * len(ok)


@pytest.mark.training_build
def test_results_from_before_the_learning_rate_column_still_read(run_folder, tmp_path):
    """A results.csv written before the learning_rate column reads with it blank, and its
    summary's titles leave the rate out (they named it)."""
    old = pd.read_csv(run_folder / RESULTS_CSV).drop(columns=["learning_rate"])
    old.to_csv(tmp_path / RESULTS_CSV, index=False)
    again = read_results(tmp_path)
    assert again.learning_rate.isna().all() and len(again) == len(old)
    titles = [t for t in write_summary(tmp_path).splitlines() if t.startswith("## mlp")]
    assert titles and all("learning rate" not in t for t in titles)
    named = [t for t in write_summary(run_folder).splitlines() if t.startswith("## mlp")]
    assert named and all(", learning rate 0.001)" in t for t in named)


@pytest.mark.training_build
def test_rows_from_several_machines_are_said(run_folder, tmp_path):
    """Shards merged from two machines: the machine line was the first row's alone."""
    rows = pd.read_csv(run_folder / RESULTS_CSV)
    assert write_summary(run_folder).count("Several machines") == 0
    rows.loc[rows.index[-1], "cpu_model"] = "Another CPU"
    rows.to_csv(tmp_path / RESULTS_CSV, index=False)
    (line,) = [x for x in write_summary(tmp_path).splitlines() if "Several machines" in x]
    assert "ran on 2 (" in line and "Another CPU" in line and rows.cpu_model.iloc[0] in line


@pytest.mark.training_build
def test_summary_and_plots(run_folder):
    text = write_summary(run_folder)
    assert (run_folder / "summary.md").read_text() == text
    status = pd.read_csv(run_folder / RESULTS_CSV).query("batch_size == 8 and device == 'cpu'")
    status = status.set_index("contender").status
    # a cell timed as unstable on a loaded machine is listed with its reason, not timed
    for contender in ("sklearn-mlp-sgd", "ort-full", *(["torch-sgd"] if TORCH else [])):
        assert shown_in_summary(text, status[contender], contender, "mlp", 8), contender
    if (status == "ok").any():
        assert "## mlp (1,071 trained values, learning rate 0.001) on diabetes, cpu" in text
    if status["sklearn-mlp-sgd"] == "ok":
        assert "| 1.0x |" in text
    assert "slope between a 1-epoch fit and a longer one, at least 4 epochs and 50 ms" in text
    assert "fixed cost per fit" in text
    assert "## Cells without a measurement" in text
    assert ("unavailable: needs torch: pip install torch" in text) == (not TORCH)
    paths = write_plots(run_folder)
    assert len(paths) == (3 if (status == "ok").any() else 0)
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.training_build
def test_an_interrupted_run_keeps_its_finished_rows(tmp_path, monkeypatch, capsys):
    real = matrix.run_group
    calls = []

    def interrupted_in_the_second_group(group, config, interrupted, stages):
        calls.append(group)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(group, config, interrupted, stages)

    monkeypatch.setattr(matrix, "run_group", interrupted_in_the_second_group)
    options = "--contenders ort-fwbw,sklearn-mlp-sgd --problem linear --dataset diabetes"
    options += " --batch-sizes 8 32 --devices cpu --epochs 1 --repeat 2"
    status = main(["bench", *options.split(), "--out", str(tmp_path)])
    assert status == 130
    printed = capsys.readouterr()
    assert "interrupted" in printed.err
    (folder,) = tmp_path.iterdir()
    assert printed.out.strip() == (folder / "summary.md").read_text().strip()
    results = pd.read_csv(folder / RESULTS_CSV)
    assert list(results.contender) == ["ort-fwbw", "sklearn-mlp-sgd"]
    assert results.status.map(timed).all()
    assert len(read_records(folder)) == 2
    summary = (folder / "summary.md").read_text()
    assert shown_in_summary(summary, results.iloc[0].status, "ort-fwbw", "linear", 8)
    # the plan written as the run started, marked when the signal came: the second
    # group's cells, never reached, are listed as not run, and the summary says why
    plan = read_plan(folder)
    assert plan.interrupted and [(c["contender"], c["batch_size"]) for c in plan.cells] == [
        (contender, batch) for batch in (8, 32) for contender in ("ort-fwbw", "sklearn-mlp-sgd")
    ]
    assert summary.startswith(
        f"# ortbench bench: run {folder.name} (interrupted)\n\n"
        "Interrupted: 2 of the 4 planned cells were not run"
    )
    for contender in ("ort-fwbw", "sklearn-mlp-sgd"):
        assert shown_in_summary(summary, "not run: interrupted", contender, "linear", 32)


@pytest.mark.training_build
def test_a_cell_that_breaks_is_recorded(tmp_path, monkeypatch):
    def broken(self, epochs):
        raise ArithmeticError("the loss is nan\nsecond line")

    monkeypatch.setattr("ortbench.bench.contenders.ort.OrtContender._fit", broken)
    config = BenchConfig(
        contenders=("ort-fwbw",), problems=("linear",), datasets=("diabetes",),
        batch_sizes=(32,), devices=("cpu",), epochs=1, repeat=1,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "broken")
    (record,) = read_records(tmp_path)
    assert record["status"] == "failed: ArithmeticError: the loss is nan"


def test_a_run_whose_every_cell_failed_is_a_failure_not_a_usage_error(
    tmp_path, capsys, monkeypatch
):
    """Exit 1 (a failed cell), as the README says, where every cell failed once it trained;
    2 ("no cell could run") is for cells that were all unavailable."""

    def broken(self, epochs):
        raise ArithmeticError("the loss is nan")

    monkeypatch.setattr("ortbench.bench.contenders.ort.OrtContender._fit", broken)
    options = "--contenders ort-portable-full --problem linear --dataset diabetes"
    status = main(["bench", *options.split(), "--batch-sizes", "8", "--out", str(tmp_path)])
    assert status == 1
    err = capsys.readouterr().err
    assert "1 cell failed or unstable" in err and "no cell could run" not in err


@pytest.mark.training_build
def test_cli_bench_prints_the_summary(tmp_path, capsys):
    options = "--contenders ort-full --problem linear --dataset diabetes --batch-sizes 32"
    options += (
        " --repeat 2 --keep-going"  # an unstable time on a loaded machine is beside the point
    )
    status = main(["bench", "--quick", *options.split(), "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert status == 0
    assert out.startswith("# ortbench bench: run ")
    assert "[ortbench bench] cell 1/1 ort-full" in err
    (folder,) = tmp_path.iterdir()
    (cell,) = pd.read_csv(folder / RESULTS_CSV).status
    assert timed(cell) and shown_in_summary(out, cell, "ort-full", "linear", 32)
    plots = {"speedup.png"} if cell == "ok" else set()
    assert {p.name for p in folder.iterdir()} >= {"results.csv", "summary.md", *plots}


#: One cheap cell, should a refused run start anyway.
TINY_CELL = ["--contenders", "sklearn-mlp-sgd", "--batch-sizes", "16", "--epochs", "1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "--contenders", "nope"], "unknown contenders ['nope']"),
        (["bench", "--batch-sizes", "ten"], "--batch-sizes must be integers"),
        (["bench", "--batch-sizes", "0"], "--batch-sizes must be >= 1, got 0"),
        (["bench", "--epochs", "0"], "--epochs must be >= 1, got 0"),
        (["bench", "--repeat", "0"], "--repeat must be >= 1, got 0"),
        (["bench", "--batch-sizes", "8,-2"], "--batch-sizes must be >= 1, got 8,-2"),
        # --epochs and --repeat are options of bench, not positional arguments (ab adds its
        # own: sharing their parser once turned bench's into positionals)
        (["bench", "--quick", "3", "4"], "unrecognized arguments: 3 4"),
        (["bench", "--output", "x"], "unrecognized arguments: --output x"),
        (["bench", "--dataset", "mnist"], "unknown datasets ['mnist']"),
        # checked before the run folder is made: a refused run leaves nothing behind
        (["bench", *TINY_CELL, "--n-samples", "5"], "--n-samples must be >= 10, got 5"),
        (
            ["bench", *TINY_CELL, "--dataset", "diabetes", "--n-features", "3"],
            "n_features applies to generated data sets",
        ),
        (
            ["bench", *TINY_CELL, "--problem", "cnn", "--hidden", "5"],
            "--hidden sizes the MLP problems, and none of cnn is one",
        ),
        (["compare", "no/such/base.json", "no/such/head.json"], "does not exist"),
        (["compare", "a", "b", "--threshold", "-1"], "--threshold must be > 0"),
    ],
)
def test_bad_input_is_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("ortbench: error: ") and message in err
    assert not any(tmp_path.iterdir())


def test_bench_and_ab_list_their_own_epochs_and_repeat(capsys):
    for command in ("bench", "ab"):
        assert main([command, "--help"]) == 0
        usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
        assert "[--epochs EPOCHS]" in usage and "[--repeat REPEAT]" in usage
        assert "epochs repeat" not in usage


def test_results_jsonl_tolerates_a_cut_last_line(run_folder, tmp_path):
    text = (run_folder / "results.jsonl").read_text()
    (tmp_path / "results.jsonl").write_text(text + '{"run_id": "cut')
    assert len(read_records(tmp_path)) == 16
    assert json.loads(text.splitlines()[0])["run_id"] == "test-run"


def test_seconds_never_print_in_scientific_notation():
    from ortbench.report.units import format_seconds

    assert format_seconds(0.0009995) == "1000 µs"
    assert format_seconds(2.5e-5) == "25 µs"
    assert format_seconds(1.5) == "1.5 s"
    assert format_seconds(3e-10) == "0.3 ns"


@pytest.mark.training_build
def test_timed_fits_of_a_group_are_interleaved(tmp_path, monkeypatch):
    from ortbench.bench.contenders.base import Contender

    order = []
    real = Contender.time_fit

    def recorded(self, epochs):
        order.append((self.name, epochs))
        return real(self, epochs)

    monkeypatch.setattr(Contender, "time_fit", recorded)
    config = BenchConfig(
        contenders=("ort-fwbw", "sklearn-mlp-sgd"), problems=("linear",),
        datasets=("diabetes",), batch_sizes=(32,), devices=("cpu",), epochs=2, repeat=3,
    )  # fmt: skip
    run_matrix(config, ResultsWriter(tmp_path), "interleaved")
    records = read_records(tmp_path)
    lengths = {
        r["contender"]: int(re.match(r"slope between 1- and (\d+)-epoch fits", r["timing"])[1])
        for r in records
    }
    assert min(lengths.values()) >= 3
    # a loaded machine may leave a cell of the first rounds unstable: the group's rounds
    # are then timed again, every contender's, with longer fits (the rows give those)
    (again,) = {r["timing"].endswith(TIMED_AGAIN) for r in records}
    repeat = config.repeat
    short = [("ort-fwbw", 1), ("sklearn-mlp-sgd", 1)]
    long = [("ort-fwbw", lengths["ort-fwbw"]), ("sklearn-mlp-sgd", lengths["sklearn-mlp-sgd"])]
    rounds = order[-4 * repeat :]  # after the fits that sized each long one
    assert rounds == (short + long) * repeat
    if again:  # the first rounds: the same turns, shorter long fits (those sized first)
        first = order[-8 * repeat : -4 * repeat]
        assert [name for name, _ in first] == [name for name, _ in rounds]
        assert [e for _, e in first[0::4] + first[1::4]] == [1] * 2 * repeat
        long = first[2:4]
        assert first[2::4] + first[3::4] == [long[0]] * repeat + [long[1]] * repeat
        repeat *= 2
    sizing = order[: -4 * repeat]
    for name, length in long:
        mine = [e for n, e in sizing if n == name]
        # sizing may end on a short fit timed again (a stall in the first one)
        assert mine[0] == 1 and [e for e in mine if e != 1][-1] == length


class Allocator(Contender):
    """A contender whose first fit allocates ``MB`` megabytes in 64 kB blocks (the heap's
    own memory, not a mapping of their own) and frees them; its timed fits do nothing."""

    name = "allocator"
    MB = 40

    def _fit(self, epochs: int) -> list[float]:
        blocks = [bytearray(64 * 1024) for _ in range(16 * self.MB)]
        del blocks
        return [1.0] * epochs

    def _continue(self, epochs: int) -> None:
        pass

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.zeros(len(X))


class Pinner(Allocator):
    """A contender that frees 100 MB of heap under a block it keeps: the heap holds the
    freed memory, resident, for whoever allocates next."""

    name = "pinner"

    def _fit(self, epochs: int) -> list[float]:
        blocks = [bytearray(64 * 1024) for _ in range(16 * 100)]
        self.pin = bytearray(64 * 1024)
        del blocks
        return [1.0] * epochs


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux only")
def test_peak_memory_does_not_depend_on_the_contender_before(tmp_path, monkeypatch):
    monkeypatch.setitem(matrix.CONTENDERS, "allocator", Allocator)
    monkeypatch.setitem(matrix.CONTENDERS, "pinner", Pinner)
    peaks = {}
    for order in (("allocator",), ("pinner", "allocator")):
        config = BenchConfig(
            contenders=order, problems=("linear",), datasets=("diabetes",),
            batch_sizes=(32,), devices=("cpu",), epochs=1, repeat=1,
        )  # fmt: skip
        folder = tmp_path / "-".join(order)
        run_matrix(config, ResultsWriter(folder), "memory")
        peaks[order] = {r["contender"]: r["peak_memory_mb"] for r in read_records(folder)}
    alone, after = peaks[("allocator",)]["allocator"], peaks[("pinner", "allocator")]["allocator"]
    assert alone > 0.75 * Allocator.MB
    assert after == pytest.approx(alone, rel=0.2)
