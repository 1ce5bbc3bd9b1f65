"""One matrix over several machines: ``--shard I/N`` splits, ``ortbench merge`` joins.

The split is checked against the matrix's own list of cells; the merge against the
unsharded run it replaces: an A/B run (fake sides, the real coordinator) and a bench run
(real contenders) whose rows are split into shard folders and merged back must give the
same reports and exit status, and the CLI's sharded A/B run the same verdicts.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from test_ab import CONFIG, FakeSide

from ortbench.bench import matrix
from ortbench.bench.ab import AB_REPEAT, run_ab, side_label, write_sides
from ortbench.bench.checkouts import Checkout
from ortbench.bench.matrix import BenchConfig, Cell, cells, run_matrix
from ortbench.bench.merge import MERGE_JSON, merge_runs
from ortbench.bench.shard import (
    SHARD_JSON,
    Shard,
    expected_seconds,
    groups,
    parse_shard,
    shard_cells,
    split,
    write_shard,
)
from ortbench.bench.store import (
    KEYS,
    LOSS_CURVES_CSV,
    RESULTS_CSV,
    RESULTS_JSONL,
    ResultsWriter,
    read_records,
)
from ortbench.bench.timing import AGAIN_GROWTH, SHORT_EPOCHS, timing_column
from ortbench.cli import main
from ortbench.commands import ab as ab_command
from ortbench.commands import bench as bench_command
from ortbench.report.html import write_reports
from ortbench.report.paired import AB_MD, ab_comparison, ab_markdown
from ortbench.schema import BASE, HEAD, SIDE, SIDES

ROOT = Path(__file__).resolve().parent.parent
FULL = BenchConfig(devices=("cpu", "cuda"))  # 11 contenders x 3 problems x 5 sizes x 2
AB_CONFIG = replace(CONFIG, problems=("mlp", "linear"), batch_sizes=(15, 64))  # 4 groups
SETTINGS = {"threshold": 0.10, "warn": 0.05}
CHECKOUTS = {
    BASE: Checkout("origin/main", ROOT, sys.executable, "this interpreter", "a" * 40),
    HEAD: Checkout("HEAD", ROOT, sys.executable, "this interpreter", "b" * 40),
}
LABELS = tuple(side_label(vars(CHECKOUTS[name])) for name in SIDES)


def group_key(cell: Cell) -> tuple:
    return cell.problem, cell.dataset, cell.device, cell.batch_size


@pytest.mark.parametrize("count", [1, 2, 3, 7, 29, 30, 31, 64])
def test_shards_cover_every_cell_once_and_keep_groups_whole(count):
    every = cells(FULL)
    n_groups = len(groups(every))
    assert n_groups == 30
    parts = split(every, count)
    assert len(parts) == count
    flat = [cell for part in parts for cell in part]
    assert sorted(flat, key=every.index) == every  # each cell exactly once
    owner = {group_key(cell): k for k, part in enumerate(parts) for cell in part}
    assert len(owner) == n_groups
    for k, part in enumerate(parts):
        assert all(owner[group_key(cell)] == k for cell in part)  # groups whole
        assert part == [cell for cell in every if cell in part]  # the matrix's order
    sizes = sorted(len(part) for part in parts)
    # equal groups: the parts differ by one group at most, empty ones only past 30
    assert sizes[-1] - sizes[0] <= len(every) // n_groups  # one group: one cell per contender
    assert sizes.count(0) == max(count - n_groups, 0)
    # every shard computes the same split on its own
    assert [shard_cells(FULL, Shard(k + 1, count)) for k in range(count)] == parts


def test_timings_balance_the_shards(tmp_path):
    """One group five times as slow as the others: it gets a shard of its own."""
    config = replace(CONFIG, batch_sizes=(1, 15, 64, 256))
    every = cells(config)
    slow = {cell: 5.0 if cell.batch_size == 1 else 1.0 for cell in every}
    parts = split(every, 2, slow)
    assert {c.batch_size for c in parts[0]} == {1}
    assert {c.batch_size for c in parts[1]} == {15, 64, 256}
    assert [len(p) for p in split(every, 2)] == [4, 4]  # by counts: two groups each
    # the times of a finished run: its cells' rounds of a short and a long fit
    fake_run_ab(tmp_path, config, factor=1.0)
    seconds = expected_seconds(tmp_path)
    assert set(seconds) == set(every)
    records = [r for r in read_records(tmp_path) if r["batch_size"] == 1]
    by_hand = {}
    for record in records:  # both sides of each cell
        steps = record["steps"] / record["epochs"]
        long = int(record["timing"].split()[4].split("-")[0])
        fits = record["epochs"] + record["repeat"] * (1 + long)
        time = record["seconds_per_step"] * steps * fits
        time += record["seconds_per_fit_overhead"] * (1 + 2 * record["repeat"])
        cell = Cell(*(record[k] for k in KEYS))
        by_hand[cell] = by_hand.get(cell, 0.0) + time
    assert {c: seconds[c] for c in by_hand} == pytest.approx(by_hand)


def test_timings_count_the_rounds_timed_again(tmp_path):
    """A row whose rounds were timed again took both sets of rounds (the first with
    1/AGAIN_GROWTH of the extra epochs); a quiet wait that gave up changes no length."""
    fake_run_ab(tmp_path, CONFIG, factor=1.0)
    before = expected_seconds(tmp_path)
    path = tmp_path / RESULTS_JSONL
    records = [json.loads(line) for line in path.read_text().splitlines()]
    cell_of = {id(r): Cell(*(r[k] for k in KEYS)) for r in records}
    again = records[0]
    quiet = next(r for r in records if cell_of[id(r)] != cell_of[id(again)])
    long = int(again["timing"].split()[4].split("-")[0])
    grown = SHORT_EPOCHS + AGAIN_GROWTH * (long - SHORT_EPOCHS)
    again["timing"] = timing_column(grown, again=True)
    quiet["timing"] = timing_column(int(quiet["timing"].split()[4].split("-")[0]), quiet_gave_up=2)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    after = expected_seconds(tmp_path)
    steps, repeat = again["steps"] / again["epochs"], again["repeat"]
    per_epoch, per_fit = again["seconds_per_step"] * steps, again["seconds_per_fit_overhead"]
    more = per_epoch * repeat * (SHORT_EPOCHS + grown) + per_fit * 2 * repeat
    assert after[cell_of[id(again)]] == pytest.approx(before[cell_of[id(again)]] + more)
    assert after[cell_of[id(quiet)]] == before[cell_of[id(quiet)]]


@pytest.mark.parametrize("text", ["2", "0/3", "4/3", "a/b", "1/0", "-1/2"])
def test_a_bad_shard_is_one_line(text, tmp_path, capsys):
    assert main(["bench", "--quick", "--shard", text, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--shard" in err[0]
    assert list(tmp_path.iterdir()) == []
    assert parse_shard(" 2 / 3 ") == Shard(2, 3)


def test_shard_timings_need_a_shard_and_a_run(tmp_path, capsys):
    argv = ["bench", "--quick", "--out", str(tmp_path / "out"), "--shard-timings"]
    assert "give --shard I/N too" in refused([*argv, str(tmp_path)], capsys)
    line = refused([*argv, str(tmp_path), "--shard", "1/2"], capsys)
    assert "holds no results.jsonl" in line
    assert not (tmp_path / "out").exists()


def fake_run_ab(folder: Path, config: BenchConfig, factor: float) -> None:
    log: list = []
    sides = {BASE: FakeSide(BASE, log, 1.0), HEAD: FakeSide(HEAD, log, factor)}
    run_ab(config, sides, ResultsWriter(folder, keys=[*KEYS, SIDE]), folder.name)


def split_run(
    run: Path, out: Path, command: str, config: BenchConfig, count: int, changes=None
) -> list[Path]:
    """The rows of an unsharded run folder, written into the folders of ``count`` shards
    as each shard would have written them (``changes`` alter a shard's description)."""
    keys = [*KEYS, SIDE] if command == "ab" else KEYS
    records = read_records(run)
    curves = pd.read_csv(run / LOSS_CURVES_CSV)
    folders = []
    for k, part in enumerate(split(cells(config), count)):
        folder = out / f"shard{k + 1}"
        folder.mkdir(parents=True)
        write_shard(folder, command, config, Shard(k + 1, count), part, SETTINGS)
        if command == "ab":
            write_sides(folder, CHECKOUTS)
        if changes and changes.get(k + 1):
            info = json.loads((folder / SHARD_JSON).read_text())
            (folder / SHARD_JSON).write_text(json.dumps(info | changes[k + 1]))
        writer = ResultsWriter(folder, keys=keys)
        for record in records:
            if Cell(*(record[c] for c in KEYS)) not in part:
                continue
            match = (curves[keys].astype(str) == [str(record[c]) for c in keys]).all(axis=1)
            row = {c: float("nan") if record[c] is None else record[c] for c in writer.columns}
            details = {c: v for c, v in record.items() if c not in row}
            samples = details.pop("seconds_per_step_samples")
            writer.append(row, samples, curves[match].loss.tolist(), **details)
        folders.append(folder)
    return folders


@pytest.mark.parametrize("factor, status", [(1.0, 0), (2.0, 1)])
def test_merged_ab_shards_report_as_the_unsharded_run(tmp_path, factor, status, capsys):
    run = tmp_path / "run"
    fake_run_ab(run, AB_CONFIG, factor)
    expected = ab_markdown(ab_comparison(run, LABELS, **SETTINGS))
    shards = split_run(run, tmp_path / "shards", "ab", AB_CONFIG, 3)
    assert main(["merge", *map(str, shards[::-1]), "--out", str(tmp_path / "out")]) == status
    (merged,) = (tmp_path / "out").iterdir()
    assert (merged / AB_MD).read_text() == expected
    assert expected in capsys.readouterr().out
    ours = read_records(merged)
    theirs = read_records(run)
    assert {r["run_id"] for r in ours} == {merged.name}
    for mine, original in zip(ours, theirs, strict=True):  # the unsharded order
        assert mine | {"run_id": run.name} == original
    assert pd.read_csv(merged / LOSS_CURVES_CSV).equals(pd.read_csv(run / LOSS_CURVES_CSV))
    info = json.loads((merged / MERGE_JSON).read_text())
    assert [s["shard"] for s in info["shards"]] == ["1/3", "2/3", "3/3"]
    assert not info["machines_differ"]


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """A real bench run of three groups (portable contenders: any onnxruntime build)."""
    config = BenchConfig(
        contenders=("sklearn-mlp-sgd", "ort-portable-fwbw"),
        problems=("linear",),
        datasets=("diabetes",),
        batch_sizes=(8, 16, 32),
        devices=("cpu",),
        epochs=1,
        repeat=2,
    )
    folder = tmp_path_factory.mktemp("bench") / "20250101-000000"
    run_matrix(config, ResultsWriter(folder), folder.name)
    write_reports(folder)  # as bench writes them
    return config, folder


def test_merged_bench_shards_report_as_the_unsharded_run(bench_run, tmp_path, capsys):
    config, run = bench_run
    shards = split_run(run, tmp_path / "shards", "bench", config, 2)
    merged = tmp_path / "merged" / run.name  # the unsharded run's id: its very pages
    merged.mkdir(parents=True)
    merge_runs(shards, merged)
    write_reports(merged)
    for name in ("summary.md", "index.html", RESULTS_CSV, LOSS_CURVES_CSV):
        assert (merged / name).read_text() == (run / name).read_text(), name
    # the command: same summary (but the run id), same exit status (a loaded machine can
    # leave a cell unstable: bench's rule then exits 1)
    status = int(any(r["status"] != "ok" for r in read_records(run)))
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "out")]) == status
    (folder,) = (tmp_path / "out").iterdir()
    summary = (folder / "summary.md").read_text()
    assert summary == (run / "summary.md").read_text().replace(run.name, folder.name)
    assert summary in capsys.readouterr().out
    assert (folder / "seconds_per_step.png").exists()
    assert main(["report", str(folder)]) == 0  # renders again without running anything


def test_merged_bench_shards_with_a_failed_cell_exit_as_bench_does(bench_run, tmp_path, capsys):
    """A failed cell in one shard: the merge exits 1 as the unsharded bench would, and 0
    with --keep-going."""
    config, run = bench_run
    copy = tmp_path / "run" / run.name
    shutil.copytree(run, copy)
    records = read_records(copy)
    records[-1]["status"] = "failed: RuntimeError: boom"
    (copy / RESULTS_JSONL).write_text("".join(json.dumps(r) + "\n" for r in records))
    shards = split_run(copy, tmp_path / "shards", "bench", config, 2)
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "out")]) == 1
    assert "ortbench merge: 1 cell failed or unstable" in capsys.readouterr().err
    argv = ["merge", *map(str, shards), "--out", str(tmp_path / "kept"), "--keep-going"]
    assert main(argv) == 0


@pytest.mark.parametrize(
    "name, text, message",
    [
        (LOSS_CURVES_CSV, "a,b\n1,2\n", "is not ortbench's loss curves (no column 'contender')"),
        (LOSS_CURVES_CSV, "garbage\n", "is not ortbench's loss curves (no column 'contender')"),
        ("calibration.json", "[1", "is not a calibration file"),
    ],
)
def test_a_shard_with_a_damaged_file_is_refused_leaving_nothing(
    bench_run, tmp_path, capsys, name, text, message
):
    """A shard whose loss curves or calibration cannot be read: one line naming the file,
    found after the rows were merged, and the merged folder removed."""
    config, run = bench_run
    shards = split_run(run, tmp_path / "shards", "bench", config, 2)
    (shards[1] / name).write_text(text)
    line = refused(["merge", *map(str, shards), "--out", str(tmp_path / "o")], capsys)
    assert message in line and str(shards[1] / name) in line
    assert list((tmp_path / "o").iterdir()) == []


def refused(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "changes, message",
    [
        ({2: {"ortbench_version": "0.0.9"}}, "different ortbench versions"),
        ({3: {"settings": {"threshold": 0.2, "warn": 0.05}}}, "different report settings"),
        ({1: {"command": "bench"}}, "different commands"),
        ({2: {"shard": "2/4"}}, "shard 2/4: merge the shards of one split"),
    ],
)
def test_merge_refuses_shards_of_different_runs(tmp_path, capsys, changes, message):
    fake_run_ab(tmp_path / "run", AB_CONFIG, 1.0)
    shards = split_run(tmp_path / "run", tmp_path / "shards", "ab", AB_CONFIG, 3, changes)
    assert message in refused(["merge", *map(str, shards), "--out", str(tmp_path / "o")], capsys)
    assert list((tmp_path / "o").iterdir()) == []  # refused before writing anything


def test_merge_refuses_another_matrix_other_sides_overlap_and_gaps(tmp_path, capsys):
    fake_run_ab(tmp_path / "run", AB_CONFIG, 1.0)
    shards = split_run(tmp_path / "run", tmp_path / "shards", "ab", AB_CONFIG, 3)
    out = ["--out", str(tmp_path / "o")]
    # another matrix
    other = replace(AB_CONFIG, repeat=12)
    info = json.loads((shards[1] / SHARD_JSON).read_text())
    changed = tmp_path / "other"
    shutil.copytree(shards[1], changed)
    write_shard(changed, "ab", other, Shard(2, 3), [Cell(*c) for c in info["cells"]], SETTINGS)
    line = refused(["merge", str(shards[0]), str(changed), str(shards[2]), *out], capsys)
    assert f"ran different matrices (repeat {AB_REPEAT} against 12)" in line
    # another HEAD
    write_sides(changed, CHECKOUTS | {HEAD: replace(CHECKOUTS[HEAD], commit="c" * 40)})
    write_shard(changed, "ab", AB_CONFIG, Shard(2, 3), [Cell(*c) for c in info["cells"]], SETTINGS)
    line = refused(["merge", str(shards[0]), str(changed), str(shards[2]), *out], capsys)
    assert "timed different HEAD sides" in line and "cccccccc" in line
    # a shard twice
    line = refused(["merge", *map(str, shards), str(shards[0]), *out], capsys)
    assert "shard 1/3 given twice" in line
    # a shard missing
    line = refused(["merge", str(shards[0]), str(shards[2]), *out], capsys)
    assert "shards 2 of 3 missing" in line
    # one cell in two shards: shard 3 also claims, and holds, a cell of shard 1
    info3 = json.loads((shards[2] / SHARD_JSON).read_text())
    stolen = json.loads((shards[0] / SHARD_JSON).read_text())["cells"][0]
    (shards[2] / SHARD_JSON).write_text(json.dumps(info3 | {"cells": [*info3["cells"], stolen]}))
    line = refused(["merge", *map(str, shards), *out], capsys)
    assert "is in" in line and "the shards overlap" in line
    # a row twice in one shard
    (shards[2] / SHARD_JSON).write_text(json.dumps(info3))
    lines = (shards[2] / RESULTS_JSONL).read_text().splitlines(keepends=True)
    (shards[2] / RESULTS_JSONL).write_text("".join([*lines, lines[0]]))
    line = refused(["merge", *map(str, shards), *out], capsys)
    assert "2 bad row(s)" in line and "the same cell as line" in line
    # a row whose time is not a positive number
    row = json.loads(lines[0])
    row["seconds_per_step"] = -1.0
    (shards[2] / RESULTS_JSONL).write_text("".join([json.dumps(row) + "\n", *lines[1:]]))
    line = refused(["merge", *map(str, shards), *out], capsys)
    assert "1 bad row(s), first line 1:" in line
    # a row of a cell outside its shard
    foreign = (shards[0] / RESULTS_JSONL).read_text().splitlines(keepends=True)[0]
    (shards[2] / RESULTS_JSONL).write_text("".join([*lines, foreign]))
    assert "not a cell of its shard 3/3" in refused(["merge", *map(str, shards), *out], capsys)
    assert list((tmp_path / "o").iterdir()) == []


def test_shards_that_loaded_other_libraries_ran_on_one_machine(tmp_path, capsys):
    """The kernels a shard's process loaded (and their order) depend on what it ran."""
    fake_run_ab(tmp_path / "run", AB_CONFIG, 1.0)
    shards = split_run(tmp_path / "run", tmp_path / "shards", "ab", AB_CONFIG, 2)
    described = json.loads((shards[1] / SHARD_JSON).read_text())
    described["machine"] = described["machine"] | {"kernels": "openmp libgomp 2 threads (torch)"}
    (shards[1] / SHARD_JSON).write_text(json.dumps(described))
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "o")]) == 0
    (merged,) = (tmp_path / "o").iterdir()
    assert not json.loads((merged / MERGE_JSON).read_text())["machines_differ"]
    assert "different machines" not in capsys.readouterr().err


def test_merge_records_a_difference_of_machines(tmp_path, capsys):
    fake_run_ab(tmp_path / "run", AB_CONFIG, 1.0)
    other = {"cpu_model": "Another CPU", "cpu_cores": 4, "cpu_threads": 8, "platform": "x"}
    shards = split_run(
        tmp_path / "run", tmp_path / "shards", "ab", AB_CONFIG, 2, {2: {"machine": other}}
    )
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "o")]) == 0
    (merged,) = (tmp_path / "o").iterdir()
    assert json.loads((merged / MERGE_JSON).read_text())["machines_differ"]
    report = (merged / AB_MD).read_text()
    assert report.rstrip().endswith("Another CPU, 8 threads).")
    assert "different machines" in capsys.readouterr().err


@pytest.fixture
def fake_sides(monkeypatch):
    """``ortbench ab`` on fake sides: refs resolve to CHECKOUTS, workers are FakeSides
    whose HEAD is twice as slow on ort-fwbw (a regression on half the cells)."""

    class Slower(FakeSide):
        def request(self, command: str, **fields) -> dict:
            reply = super().request(command, **fields)
            if command == "time" and fields["key"].startswith("ort-fwbw "):
                reply["seconds"] *= 2
            return reply

    @contextlib.contextmanager
    def started(folder, sides, worker=None):
        write_sides(folder, sides)
        log: list = []
        yield {BASE: FakeSide(BASE, log, 1.0), HEAD: Slower(HEAD, log, 1.0)}

    monkeypatch.setattr(ab_command, "checkout", lambda ref, cache, log: CHECKOUTS[ref])
    monkeypatch.setattr(ab_command, "started", started)


def verdicts(folder: Path) -> list[tuple[str, str, str]]:
    return sorted((v.benchmark, v.params, v.verdict) for v in ab_comparison(folder).verdicts)


def test_a_sharded_ab_command_judges_as_the_unsharded_one(tmp_path, fake_sides, capsys):
    """Five shards of four groups: one shard is empty and still merges."""
    argv = ["ab", BASE, HEAD, "--contenders", "ort-full", "ort-fwbw", "--problem", "mlp"]
    argv += ["linear", "--batch-sizes", "15", "64", "--devices", "cpu", "--epochs", "2"]
    assert main([*argv, "--out", str(tmp_path / "whole")]) == 1
    (whole,) = (tmp_path / "whole").iterdir()
    argv += ["--shard-timings", str(whole)]  # balanced on the whole run's times
    for k in range(1, 6):
        status = main([*argv, "--shard", f"{k}/5", "--out", str(tmp_path / "shards")])
        assert status == (0 if k == 5 else 1)  # a shard's own verdict on its cells
    assert "shard 5/5 holds no cell" in capsys.readouterr().err
    shards = sorted((tmp_path / "shards").iterdir())
    assert main(["merge", *map(str, shards), "--out", str(tmp_path / "merged")]) == 1
    (merged,) = (tmp_path / "merged").iterdir()
    assert verdicts(merged) == verdicts(whole)
    assert ("seconds_per_step", "regressed") in {(b, v) for b, _, v in verdicts(merged)}
    assert (merged / AB_MD).read_text().splitlines()[:6] == (
        (whole / AB_MD).read_text().splitlines()[:6]
    )


def test_an_interrupted_shard_is_incomplete(tmp_path, monkeypatch, capsys):
    """SIGINT during shard 2's second group: its folder keeps what finished, merge
    refuses it as incomplete; the shard run again merges."""
    monkeypatch.setattr(
        bench_command, "write_calibration", lambda folder, repeat: None
    )  # not tested here
    argv = ["bench", "--contenders", "sklearn-mlp-sgd", "ort-portable-fwbw", "--problem"]
    argv += ["linear", "--dataset", "diabetes", "--batch-sizes", "8", "16", "24", "32"]
    # --keep-going: two rounds under load can leave a cell unstable, which is not this
    # test's subject (it would make bench exit 1)
    argv += ["--devices", "cpu", "--epochs", "1", "--repeat", "2", "--keep-going", "--out"]
    assert main([*argv, str(tmp_path / "1"), "--shard", "1/2"]) == 0
    real, calls = matrix.run_group, []

    def signalled_in_the_second_group(group, config, interrupted, stages):
        calls.append(group)
        if len(calls) == 2:
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C: the handler the run installed
        return real(group, config, interrupted, stages)

    monkeypatch.setattr(matrix, "run_group", signalled_in_the_second_group)
    assert main([*argv, str(tmp_path / "2"), "--shard", "2/2"]) == 130
    monkeypatch.setattr(matrix, "run_group", real)
    (first,), (second,) = (tmp_path / "1").iterdir(), (tmp_path / "2").iterdir()
    assert len(read_records(second)) == 2  # the first group of the shard finished
    capsys.readouterr()
    line = refused(["merge", str(first), str(second), "--out", str(tmp_path / "m")], capsys)
    assert line.endswith("(shard 2/2) is incomplete: 2 of 4 cells did not finish "
                         "(interrupted or stopped); run that shard again")  # fmt: skip
    assert main([*argv, str(tmp_path / "again"), "--shard", "2/2"]) == 0
    (again,) = (tmp_path / "again").iterdir()
    assert main(["merge", str(first), str(again), "--out", str(tmp_path / "m")]) == 0
