"""``ortbench compare`` on result sets built here, in asv's format and in ortbench's."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ortbench.bench.matrix import BenchConfig
from ortbench.bench.store import COLUMNS, ResultsWriter, mark_interrupted, write_plan
from ortbench.cli import main
from ortbench.report.paired import AB_MD, ab_comparison, ab_markdown
from ortbench.report.resultsets import Measurement, load_result_set
from ortbench.report.significance import (
    P_THRESHOLD,
    confidence_interval,
    is_significant,
    rank_test_can_decide,
    rank_test_min_p,
)
from ortbench.report.verdicts import IMPROVED, REGRESSED, SAME_RUN, WARNING, judge
from ortbench.schema import BASE, FITS, HEAD, KEYS, POSITIONS, SIDE

TIME = "bench_training.TimeEpoch.time_epoch"
COUNTER = "bench_training.RuntimeCounters.track_runs_per_step"
PARAMS = [["'ort-full'", "'ort-fwbw'"], ["15"]]
PARAM_NAMES = ["contender", "batch_size"]
ASV_COLUMNS = [
    "result", "params", "version", "started_at", "duration", "stats_ci_99_a",
    "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples",
]  # fmt: skip
RNG = np.random.RandomState(0)
#: ten timings of 1 ms with 1% noise
STEADY = list(1e-3 * (1 + 0.01 * RNG.randn(10)))


def asv_results(root: Path, commit: str, benchmarks: dict) -> Path:
    """Write an asv results folder (benchmarks.json + one result file); return the file.

    ``benchmarks`` maps a name to (unit, values, samples or None): one value and one
    sample list per combination of PARAMS, in cartesian-product order.
    """
    described, rows = {}, {}
    for name, (unit, values, samples) in benchmarks.items():
        kind = "time" if unit == "seconds" else "track"
        described[name] = {"name": name, "type": kind, "unit": unit, "params": PARAMS}
        described[name]["param_names"] = PARAM_NAMES
        repeat = [len(s) if s else 1 for s in samples] if samples else [1] * len(values)
        rows[name] = [values, PARAMS, "v1", None, 1.0, None, None, None, None, None, repeat]
        rows[name].append(samples)
    root.mkdir(parents=True, exist_ok=True)
    (root / "benchmarks.json").write_text(json.dumps({**described, "version": 2}))
    path = root / "machine" / f"{commit}-virtualenv-py3.11.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "commit_hash": commit, "env_name": "virtualenv-py3.11", "date": 0,
        "params": {"machine": "machine"}, "python": "3.11", "requirements": {},
        "env_vars": {}, "result_columns": ASV_COLUMNS, "results": rows,
        "durations": {}, "version": 2,
    }  # fmt: skip
    path.write_text(json.dumps(data))
    return path


def timings(samples_per_cell: list[list[float] | None]):
    values = [None if s is None else float(np.median(s)) for s in samples_per_cell]
    return ("seconds", values, samples_per_cell)


def run_compare(tmp_path, base: dict, head: dict, *options):
    base_file = asv_results(tmp_path / "base", "a" * 40, base)
    head_file = asv_results(tmp_path / "head", "b" * 40, head)
    report = tmp_path / "report.md"
    status = main(["compare", str(base_file), str(head_file), "--out", str(report), *options])
    return status, report.read_text() if report.exists() else ""


def verdict_line(report: str, params: str, benchmark: str = "") -> str:
    (line,) = [
        line for line in report.splitlines() if f"| {params} |" in line and benchmark in line
    ]
    return line


def test_a_planted_2x_slowdown_is_flagged(tmp_path):
    base = {TIME: timings([STEADY, STEADY])}
    head = {TIME: timings([[2 * s for s in STEADY], STEADY])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 1
    line = verdict_line(report, "contender='ort-full', batch_size=15")
    assert line.startswith("| **regressed**") and line.endswith("| 2.00 |")
    assert "| 1.01 ms | 2.01 ms |" in line
    assert "## Benchmarks: Regressions found" in report
    assert "1 regressed" in report and "1 unchanged" in report


def test_a_3_percent_change_within_the_noise_is_not_flagged(tmp_path):
    noisy = list(1e-3 * (1 + 0.05 * RNG.randn(10)))
    base = {TIME: timings([noisy, STEADY])}
    head = {TIME: timings([[1.03 * s for s in noisy], STEADY])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 0
    assert "2 unchanged" in report and "## Benchmarks: No regression" in report


def test_a_large_noisy_change_is_not_significant(tmp_path):
    before = [1.0, 1.1, 0.9, 1.2, 0.8, 1.3, 0.7, 1.4, 0.6, 1.5]
    after = [0.5, 2.5, 0.6, 2.6, 0.7, 2.4, 1.4, 1.5, 1.3, 1.6]  # median 1.38x, overlapping
    base = {TIME: timings([[1e-3 * s for s in before], STEADY])}
    head = {TIME: timings([[1e-3 * s for s in after], STEADY])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 0
    line = verdict_line(report, "contender='ort-full', batch_size=15")
    assert line.startswith("| not significant") and "| 1.38 |" in line


def test_a_benchmark_that_failed_on_one_side(tmp_path):
    base = {TIME: timings([STEADY, STEADY])}
    head = {TIME: timings([STEADY, None])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 1
    line = verdict_line(report, "contender='ort-fwbw', batch_size=15")
    assert line.startswith("| **failed** (errored in HEAD)") and "| failed |" in line


def test_a_counter_increase_is_flagged(tmp_path):
    base = {COUNTER: ("count", [2.0, 4.0], None)}
    head = {COUNTER: ("count", [2.0, 5.0], None)}
    status, report = run_compare(tmp_path, base, head)
    assert status == 1
    line = verdict_line(report, "contender='ort-fwbw', batch_size=15")
    assert line.startswith("| **regressed** (counter increased)") and "| 1.25 |" in line
    assert verdict_line(report, "contender='ort-full', batch_size=15").startswith("| unchanged")


def test_result_files_away_from_their_benchmarks_json_say_what_is_unknown(tmp_path, capsys):
    """Result files copied out of asv's folder (a CI artifact): without benchmarks.json a
    counter's unit is unknown and it is judged as a time; a warning says so."""
    base = asv_results(tmp_path / "b", "aaaa1111", {COUNTER: ("count", [2.0, 4.0], None)})
    head = asv_results(tmp_path / "h", "bbbb2222", {COUNTER: ("count", [2.0, 4.2], None)})
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "base.json").write_bytes(base.read_bytes())
    (bare / "head.json").write_bytes(head.read_bytes())
    assert main(["compare", str(base), str(head)]) == 1  # the counter increased
    assert "warning" not in capsys.readouterr().err
    assert main(["compare", str(bare / "base.json"), str(bare / "head.json")]) == 0
    err = capsys.readouterr().err
    assert f"ortbench: warning: {bare / 'base.json'}: no benchmarks.json" in err
    assert "counters are judged as times" in err


def test_a_counter_decrease_and_skipped_and_missing_cells(tmp_path):
    base = {COUNTER: ("count", [2.0, math.nan], None)}
    head = {COUNTER: ("count", [1.0, math.nan], None), TIME: timings([STEADY, STEADY])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 0
    line = verdict_line(report, "contender='ort-full', batch_size=15", COUNTER)
    assert line.startswith("| improved |") and line.endswith("| 2 | 1 | 0.50 |")
    assert "contender='ort-fwbw', batch_size=15 | 4" not in report  # skipped on both sides
    assert "missing (only in HEAD)" in report
    assert "1 improved, 2 missing" in report


def test_small_slowdowns_warn_without_failing(tmp_path):
    base = {TIME: timings([STEADY, STEADY])}
    head = {TIME: timings([[1.07 * s for s in STEADY], STEADY])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 0
    assert verdict_line(report, "contender='ort-full', batch_size=15").startswith("| warning")
    status, report = run_compare(tmp_path, base, head, "--warn", "0.08")
    assert status == 0 and "warning" not in report.split("\n\n")[2]


def test_nothing_to_compare_has_its_own_status(tmp_path, capsys):
    base = {TIME: timings([STEADY, STEADY])}
    head = {COUNTER: ("count", [2.0, 4.0], None)}
    status, _ = run_compare(tmp_path, base, head)
    assert status == 3
    assert "nothing to compare" in capsys.readouterr().err


def test_not_a_result_file(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"a": 1}')
    assert main(["compare", str(tmp_path / "x.json"), str(tmp_path / "x.json")]) == 2
    assert "not an asv result file" in capsys.readouterr().err
    assert main(["compare", str(tmp_path), str(tmp_path)]) == 2
    assert "folder without results.jsonl" in capsys.readouterr().err


def bench_run(folder: Path, slowdown: float, fwbw_status: str = "ok") -> Path:
    """An ortbench run folder with two cells: ort-full and ort-fwbw."""
    writer = ResultsWriter(folder)
    for contender, runs, status in (("ort-full", 2.0, "ok"), ("ort-fwbw", 4.0, fwbw_status)):
        samples = [slowdown * s for s in STEADY] if status == "ok" else []
        row = dict.fromkeys(COLUMNS, math.nan)
        row.update(
            run_id=folder.name, contender=contender, problem="mlp",
            dataset="make_regression", batch_size=15, device="cpu", status=status,
        )  # fmt: skip
        if status == "ok":
            row.update(seconds_per_step=float(np.median(samples)), runs_per_step=runs)
            row.update(ortvalues_per_step=0.0)
        writer.append(row, samples, [])
    return folder


def test_ortbench_run_folders(tmp_path, capsys):
    base = bench_run(tmp_path / "base", 1.0)
    assert main(["compare", str(base), str(base)]) == 0
    assert "6 unchanged" in capsys.readouterr().out
    slow = bench_run(tmp_path / "slow", 2.0, fwbw_status="failed: OrtBenchError: diverged")
    assert main(["compare", str(base), str(slow)]) == 1
    out = capsys.readouterr().out
    assert "| **regressed** | `seconds_per_step` | contender=ort-full, problem=mlp" in out
    # with the reason the row gives (it said "errored in HEAD" alone)
    failed = "| **failed** (errored in HEAD: OrtBenchError: diverged) | `runs_per_step` |"
    assert f"{failed} contender=ort-fwbw" in out
    assert "BASE: run base" in out and "HEAD: run slow" in out


def cells_run(folder: Path, statuses: dict[tuple[str, int], str]) -> Path:
    """A run folder with a row per (contender, batch size) in ``statuses``, with that
    status; an ``ok`` row holds STEADY's times and, but for scikit-learn's contender (which
    has none), the onnxruntime counters."""
    writer = ResultsWriter(folder)
    for (contender, batch_size), status in statuses.items():
        samples = STEADY if status == "ok" else []
        row = dict.fromkeys(COLUMNS, math.nan)
        row.update(
            run_id=folder.name, contender=contender, problem="mlp",
            dataset="make_regression", batch_size=batch_size, device="cpu", status=status,
        )  # fmt: skip
        if status == "ok":
            row.update(seconds_per_step=float(np.median(samples)))
        if status == "ok" and not contender.startswith("sklearn"):
            row.update(runs_per_step=2.0, ortvalues_per_step=0.0)
        writer.append(row, samples, [])
    return folder


#: Batch 15 finished, batch 256 interrupted: what Ctrl-C during ``bench --quick`` leaves.
INTERRUPTED_RUN = {
    ("sklearn-mlp-sgd", 15): "ok",
    ("ort-full", 15): "ok",
    ("sklearn-mlp-sgd", 256): "interrupted",
    ("ort-full", 256): "interrupted",
}


def report_lines(out: str, batch_size: int) -> dict[tuple[str, str], str]:
    """(benchmark, contender) -> the verdict line of the cells at ``batch_size``."""
    found = re.findall(r"^\| (.*?) \| `(\w+)` \| contender=([\w-]+),.*batch_size=(\d+)", out, re.M)
    return {(b, c): verdict for verdict, b, c, batch in found if batch == str(batch_size)}


def test_an_interrupted_run_compared_with_itself_has_no_regression(tmp_path, capsys):
    run = cells_run(tmp_path / "run", INTERRUPTED_RUN)
    assert main(["compare", str(run), str(run)]) == 0
    out = capsys.readouterr().out
    assert "## Benchmarks: No regression" in out and "2 missing, 4 unchanged." in out
    # one line per cell that did not run, on its time: its counters never were measured
    assert report_lines(out, 256) == {
        ("seconds_per_step", "sklearn-mlp-sgd"): "missing (not run: interrupted in both)",
        ("seconds_per_step", "ort-full"): "missing (not run: interrupted in both)",
    }
    assert "| interrupted | interrupted | n/a |" in out
    finished = {key: status for key, status in INTERRUPTED_RUN.items() if status == "ok"}
    finished = cells_run(tmp_path / "finished", finished)  # the cells it ran, alone
    assert main(["compare", str(run), str(finished)]) == 0
    assert report_lines(capsys.readouterr().out, 256) == {
        (
            "seconds_per_step",
            "sklearn-mlp-sgd",
        ): "missing (not run: interrupted in BASE, absent from HEAD)",
        (
            "seconds_per_step",
            "ort-full",
        ): "missing (not run: interrupted in BASE, absent from HEAD)",
    }


def test_a_cell_interrupted_on_one_side_is_missing_and_failures_stay_failures(tmp_path, capsys):
    interrupted = cells_run(tmp_path / "stopped", {**INTERRUPTED_RUN, ("ort-fwbw", 15): "ok"})
    finished = {key: "ok" for key in INTERRUPTED_RUN} | {("ort-fwbw", 15): "failed: diverged"}
    finished = cells_run(tmp_path / "finished", finished)
    assert main(["compare", str(finished), str(interrupted)]) == 0
    out = capsys.readouterr().out
    assert report_lines(out, 256) == {
        ("runs_per_step", "ort-full"): "missing (not run: interrupted in HEAD)",
        ("ortvalues_per_step", "ort-full"): "missing (not run: interrupted in HEAD)",
        ("seconds_per_step", "sklearn-mlp-sgd"): "missing (not run: interrupted in HEAD)",
        ("seconds_per_step", "ort-full"): "missing (not run: interrupted in HEAD)",
    }  # scikit-learn's counters: n/a in BASE, never measured in HEAD
    assert report_lines(out, 15)[("seconds_per_step", "ort-fwbw")] == (
        "improved (errored in BASE only)"
    )
    assert main(["compare", str(interrupted), str(finished)]) == 1
    out = capsys.readouterr().out
    assert report_lines(out, 256)[("seconds_per_step", "ort-full")] == (
        "missing (not run: interrupted in BASE)"
    )
    for benchmark in ("seconds_per_step", "runs_per_step"):  # a real failure, as before
        assert report_lines(out, 15)[(benchmark, "ort-fwbw")] == (
            "**failed** (errored in HEAD: diverged)"
        )


#: The cells of a run of two contenders at three batch sizes.
PLANNED = [(c, b) for b in (15, 256, 1024) for c in ("sklearn-mlp-sgd", "ort-full")]


def planned_run(
    folder: Path, statuses: dict[tuple[str, int], str], interrupted: bool, planned=PLANNED
) -> Path:
    """A run folder of :func:`cells_run` whose plan holds the ``planned`` cells, as
    ``bench`` writes it when it starts, marked interrupted as Ctrl-C marks it."""
    folder.mkdir()
    keys = {"problem": "mlp", "dataset": "make_regression", "device": "cpu"}
    write_plan(folder, [{"contender": c, "batch_size": b, **keys} for c, b in planned])
    cells_run(folder, statuses)
    if interrupted:
        mark_interrupted(folder)
    return folder


def test_cells_an_interrupted_run_never_reached_are_missing_not_failed(tmp_path, capsys):
    """Ctrl-C during batch 256: batch 1024 has no row at all, only its plan."""
    finished = planned_run(tmp_path / "finished", dict.fromkeys(PLANNED, "ok"), False)
    stopped = planned_run(tmp_path / "stopped", INTERRUPTED_RUN, True)
    for base, head, side in ((finished, stopped, "HEAD"), (stopped, finished, "BASE")):
        assert main(["compare", str(base), str(head)]) == 0
        out = capsys.readouterr().out
        assert "failed" not in out and "## Benchmarks: No regression" in out
        not_run = f"missing (not run: interrupted in {side})"
        assert report_lines(out, 1024) == {
            ("seconds_per_step", "sklearn-mlp-sgd"): not_run,
            ("seconds_per_step", "ort-full"): not_run,
            ("runs_per_step", "ort-full"): not_run,
            ("ortvalues_per_step", "ort-full"): not_run,
        }  # scikit-learn's counters: n/a where they ran, never measured where not
        assert report_lines(out, 1024) == report_lines(out, 256)


def test_a_row_that_lacks_a_key_leaves_its_cell_unjudged_not_failed(tmp_path, capsys):
    """A row of HEAD without its batch size: the cell it may be is not judged, on either
    side, nor taken for a cell the run did not reach."""
    base = cells_run(tmp_path / "base", dict.fromkeys(PLANNED[:4], "ok"))
    head = planned_run(tmp_path / "head", dict.fromkeys(PLANNED[:4], "ok"), False, PLANNED[:4])
    lines = (head / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[2])
    assert (record["contender"], record.pop("batch_size")) == ("sklearn-mlp-sgd", 256)
    lines[2] = json.dumps(record)
    (head / "results.jsonl").write_text("\n".join(lines) + "\n")
    for argv, line in (([base, head], "HEAD"), ([head, base], "BASE")):
        assert main(["compare", *map(str, argv)]) == 0
        out = capsys.readouterr().out
        assert "1 bad row left out, their cells not judged:" in out
        assert f"- {head / 'results.jsonl'} line 3: no batch_size" in out
        assert "failed" not in out and "missing" not in out, line
        assert ("seconds_per_step", "sklearn-mlp-sgd") not in report_lines(out, 256)
        assert ("seconds_per_step", "ort-full") in report_lines(out, 256)  # its row is good


def test_out_and_html_naming_one_file_is_refused(tmp_path, capsys):
    run = bench_run(tmp_path / "run", 1.0)
    same = tmp_path / "same.x"
    assert main(["compare", str(run), str(run), "--out", str(same), "--html", str(same)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and not same.exists()
    assert captured.err == (
        f"ortbench: error: --out and --html name the same file {same}: give two files\n"
    )


def test_a_run_folder_compared_with_itself_says_so(tmp_path, capsys, monkeypatch):
    run = bench_run(tmp_path / "run", 1.0)
    other = bench_run(tmp_path / "other", 1.0)
    monkeypatch.chdir(tmp_path)
    assert main(["compare", str(run), "run/", "--html", "page.html"]) == 0
    assert f"HEAD: run run\n\n{SAME_RUN}\n" in capsys.readouterr().out
    assert f"<p>{SAME_RUN}</p>" in (tmp_path / "page.html").read_text(encoding="utf-8")
    assert "Indicative: BASE and HEAD are separate runs" not in capsys.readouterr().out
    assert main(["compare", str(run), str(other), "--html", "page.html"]) == 0
    out = capsys.readouterr().out
    assert SAME_RUN not in out and "Indicative: BASE and HEAD are separate runs" in out
    assert SAME_RUN not in (tmp_path / "page.html").read_text(encoding="utf-8")
    # a copy of the folder holds the same run
    shutil.copytree(run, tmp_path / "copy")
    assert main(["compare", str(run), str(tmp_path / "copy")]) == 0
    assert SAME_RUN in capsys.readouterr().out


def ab_run(folder: Path) -> Path:
    """An ``ortbench ab`` run folder, written as ``ab`` writes one: a row per cell and
    side (fits in blocks of A B B A), then ``ab.md``."""
    writer = ResultsWriter(folder, keys=[*KEYS, SIDE])
    for side, places in ((BASE, (0, 3)), (HEAD, (1, 2))):
        row = dict.fromkeys(writer.columns, math.nan)
        row.update(
            run_id=folder.name, contender="ort-full", problem="mlp", dataset="make_regression",
            batch_size=15, device="cpu", side=side, status="ok",
            seconds_per_step=float(np.median(STEADY)), runs_per_step=2.0, ortvalues_per_step=0.0,
        )  # fmt: skip
        positions = [4 * block + place for block in range(len(STEADY) // 2) for place in places]
        writer.append(row, STEADY, [], **{POSITIONS: positions, FITS: STEADY})
    (folder / AB_MD).write_text(ab_markdown(ab_comparison(folder)), encoding="utf-8")
    return folder


def test_an_ab_run_is_refused_in_one_line(tmp_path, capsys):
    ab = ab_run(tmp_path / "ab")
    bench = bench_run(tmp_path / "bench", 1.0)
    compares = "compare two ortbench bench run folders or two asv result files"
    for argv, instead in (
        (["compare", ab, ab], compares),
        (["compare", bench, ab], compares),
        (["report", ab], "ortbench report draws the runs of ortbench bench and profile"),
    ):
        assert main([str(arg) for arg in argv]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err == (
            f"ortbench: error: {ab} is an ortbench ab run (a row per cell and side): "
            f"its verdict is in {ab / AB_MD}; {instead}\n"
        )
    assert not (ab / "index.html").exists()


def test_significance_stages():
    clean, shifted = STEADY, [1.2 * s for s in STEADY]
    assert is_significant(
        Measurement(1.0, samples=tuple(clean)), Measurement(1.2, samples=tuple(shifted))
    )
    assert not is_significant(
        Measurement(1.0, samples=tuple(clean)), Measurement(1.0, samples=tuple(clean))
    )
    # three samples each: too few for the rank test, so confidence intervals decide
    few = Measurement(1.0, samples=(1.0, 1.01, 0.99))
    assert is_significant(few, Measurement(2.0, samples=(2.0, 2.01, 1.99)))
    assert not is_significant(few, Measurement(2.0, samples=(1.0, 3.0, 2.0)))
    assert is_significant(Measurement(1.0, ci=(0.9, 1.1)), Measurement(2.0, ci=(1.9, 2.1)))
    assert is_significant(Measurement(1.0), Measurement(2.0)) is None
    # the median's interval from order statistics covers it with >= 99% probability
    lo, hi = confidence_interval(list(range(20)))
    assert (lo, hi) == (3, 16)


def test_real_asv_layout_is_read(tmp_path):
    path = asv_results(tmp_path, "c" * 40, {TIME: timings([STEADY, None])})
    result = load_result_set(path)
    assert result.label == "commit cccccccc on machine"
    full = result.measurements[(TIME, "contender='ort-full', batch_size=15")]
    assert full.unit == "seconds" and len(full.samples) == 10
    assert result.measurements[(TIME, "contender='ort-fwbw', batch_size=15")].failed


# --- the gate at the sample counts the harness produces -------------------------------------

#: Spread (sigma of the logarithm) of the per-step timing samples of one cell: the largest
#: seen on the 2-core machine (docs/benchmarks.md, "How sure is a verdict?").
NOISE = 0.07


def noisy(rng, n: int, factor: float = 1.0) -> tuple[float, ...]:
    """``n`` timings of ``factor`` ms with lognormal noise of spread NOISE."""
    return tuple(1e-3 * factor * np.exp(rng.normal(0.0, NOISE, n)))


def flagged_fraction(n_base: int, n_head: int, factor: float, pairs: int = 200) -> float:
    """Fraction of ``pairs`` synthetic BASE/HEAD pairs that compare marks as a change."""
    rng = np.random.default_rng(12345)
    flagged = 0
    for _ in range(pairs):
        a, b = noisy(rng, n_base), noisy(rng, n_head, factor)
        before = Measurement(float(np.median(a)), "seconds", a)
        after = Measurement(float(np.median(b)), "seconds", b)
        flagged += judge(before, after, 0.10, 0.05)[0] in (REGRESSED, WARNING, IMPROVED)
    return flagged / pairs


def test_the_rank_tests_smallest_p_value_is_exact():
    # the exact two-sided p-value of fully separated samples, from scipy
    for n_a, n_b in ((6, 6), (5, 7), (4, 9), (7, 7), (10, 10)):
        separated = stats.mannwhitneyu(range(n_a), range(n_a, n_a + n_b), method="exact")
        assert rank_test_min_p(n_a, n_b) == pytest.approx(separated.pvalue)
    assert rank_test_min_p(6, 6) > P_THRESHOLD  # 0.00216: the rank test cannot decide
    assert not rank_test_can_decide(6, 6) and not rank_test_can_decide(4, 9)
    assert rank_test_can_decide(7, 7) and rank_test_can_decide(10, 10)


@pytest.mark.parametrize(("n_base", "n_head"), [(6, 6), (5, 7), (4, 9), (10, 10)])
def test_slowdowns_are_flagged_at_small_sample_counts(n_base, n_head):
    assert flagged_fraction(n_base, n_head, 10.0) == 1.0
    assert flagged_fraction(n_base, n_head, 2.0) >= 0.99
    # the default repeat (10) finds a 1.3x change nearly always, 6 a side most of the time
    if min(n_base, n_head) >= 5:
        detected = 0.95 if n_base == n_head == BenchConfig.repeat else 0.85
        assert flagged_fraction(n_base, n_head, 1.3) >= detected


@pytest.mark.parametrize(("n_base", "n_head"), [(6, 6), (5, 7), (10, 10)])
def test_a_3_percent_change_and_no_change_are_not_flagged(n_base, n_head):
    assert flagged_fraction(n_base, n_head, 1.03) <= 0.05
    assert flagged_fraction(n_base, n_head, 1.0) <= 0.05  # A/A: 200 pairs


def test_a_10x_slowdown_with_6_samples_a_side_fails_the_gate(tmp_path):
    rng = np.random.default_rng(1)
    six = list(noisy(rng, 6))
    base = {TIME: timings([six, six])}
    head = {TIME: timings([[10 * s for s in six], six])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 1
    assert verdict_line(report, "contender='ort-full', batch_size=15").startswith(
        "| **regressed** |"
    )
    assert verdict_line(report, "contender='ort-fwbw', batch_size=15").startswith("| unchanged")


def test_improvements_are_reported_as_improved(tmp_path):
    base = {TIME: timings([STEADY, STEADY])}
    head = {TIME: timings([[0.5 * s for s in STEADY], [0.93 * s for s in STEADY]])}
    status, report = run_compare(tmp_path, base, head)
    assert status == 0
    assert verdict_line(report, "contender='ort-full', batch_size=15").startswith("| improved |")
    assert verdict_line(report, "contender='ort-fwbw', batch_size=15").startswith("| improved |")
    assert "2 improved" in report and "## Benchmarks: No regression" in report


@pytest.mark.parametrize(
    ("base_cells", "head_cells", "status", "verdict"),
    [
        ([STEADY, STEADY], [STEADY, None], 1, "| **failed** (errored in HEAD)"),
        ([STEADY, STEADY], [STEADY, math.nan], 1, "| **failed** (unavailable in HEAD)"),
        ([STEADY, math.nan], [STEADY, None], 1, "| **failed** (errored in HEAD)"),
        ([STEADY, None], [STEADY, None], 1, "| **failed** (errored in both)"),
        ([STEADY, None], [STEADY, STEADY], 0, "| improved (errored in BASE only)"),
        ([STEADY, math.nan], [STEADY, STEADY], 0, "| missing (could not run in BASE)"),
    ],
)
def test_what_happened_to_a_cell_decides_the_status(
    tmp_path, base_cells, head_cells, status, verdict
):
    def cells(samples):
        values = [None if s is None else math.nan if s is math.nan else 1e-3 for s in samples]
        return ("seconds", values, [s if isinstance(s, list) else None for s in samples])

    got, report = run_compare(tmp_path, {TIME: cells(base_cells)}, {TIME: cells(head_cells)})
    assert got == status
    assert verdict_line(report, "contender='ort-fwbw', batch_size=15").startswith(verdict)


def test_a_benchmark_that_vanished_or_failed_only_in_head_fails(tmp_path):
    base = {TIME: timings([STEADY, STEADY])}
    head = {TIME: timings([STEADY, STEADY]), COUNTER: ("count", [None, 2.0], None)}
    status, report = run_compare(tmp_path, base, head)
    assert status == 1
    line = verdict_line(report, "contender='ort-full', batch_size=15", COUNTER)
    assert line.startswith("| **failed** (errored in HEAD, absent from BASE)")
    assert "| missing (only in HEAD)" in report  # ok only in HEAD: no failure
    status, report = run_compare(tmp_path, head, base)
    assert status == 1
    line = verdict_line(report, "contender='ort-fwbw', batch_size=15", COUNTER)
    assert line.startswith("| **failed** (absent from HEAD)")


def test_a_pipe_in_a_cell_keeps_the_table_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(__name__ + ".PARAMS", [["'a|b'", "'ort-fwbw'"], ["15"]])
    base = {TIME: timings([STEADY, STEADY])}
    head = {TIME: timings([[2 * s for s in STEADY], STEADY])}
    _, report = run_compare(tmp_path, base, head)
    line = verdict_line(report, "contender='a\\|b', batch_size=15")
    assert len(re.findall(r"(?<!\\)\|", line)) == 7


def malformed_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (BASE path, what the error line says) for each kind of malformed input."""
    good = asv_results(tmp_path / "good", "a" * 40, {TIME: timings([STEADY, STEADY])})
    data = json.loads(good.read_text())
    cases = {}

    def result_file(name: str, text: str | bytes, benchmarks: str | None = None) -> Path:
        path = tmp_path / name / "machine" / good.name
        path.parent.mkdir(parents=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        if benchmarks is not None:
            (tmp_path / name / "benchmarks.json").write_text(benchmarks)
        return path

    def edited(change) -> str:
        copy = json.loads(json.dumps(data))
        change(copy)
        return json.dumps(copy)

    row = data["results"][TIME]
    accepted = "give an ortbench bench run folder (holding results.jsonl) or an asv result .json"
    cases["not JSON"] = (
        result_file("text", "results: none"),
        f"not an asv result file (not JSON: Expecting value at line 1): {accepted}",
    )
    cases["binary"] = (
        result_file("binary", bytes(range(256)) * 4),
        f"not an asv result file (not a text file): {accepted}",
    )
    cases["empty"] = result_file("empty", ""), f"not an asv result file (empty): {accepted}"
    cases["a list"] = result_file("list", "[1, 2]"), "not an asv result file"
    cases["no results"] = (
        result_file("keys", edited(lambda d: d.pop("results"))),
        "no results or result_columns",
    )
    cases["results not an object"] = (
        result_file("results", edited(lambda d: d.update(results=[1]))),
        "no results or result_columns",
    )
    cases["a value that is a string"] = (
        result_file("value", edited(lambda d: d["results"][TIME][0].__setitem__(0, "fast"))),
        "expected a number, got 'fast'",
    )
    cases["too few values"] = (
        result_file("short", edited(lambda d: d["results"][TIME][0].pop())),
        "result holds 1 values for 2 parameter sets",
    )
    cases["samples not a list"] = (
        result_file("samples", edited(lambda d: d["results"][TIME][-1].__setitem__(0, 3))),
        "expected a list of samples",
    )
    cases["params not lists"] = (
        result_file("params", edited(lambda d: d["results"][TIME].__setitem__(1, 3))),
        "params is not a list of lists",
    )
    cases["a row that is not a list"] = (
        result_file("row", edited(lambda d: d["results"].__setitem__(TIME, 7))),
        "expected a list of result columns",
    )
    cases["benchmarks.json not JSON"] = (
        result_file("bjson", json.dumps(data), "{"),
        "not asv's benchmarks.json",
    )
    cases["benchmarks.json param_names"] = (
        result_file("bnames", json.dumps(data), json.dumps({TIME: {"param_names": 3}})),
        "malformed description",
    )
    assert row  # the good file's row is what the cases above edit

    def run_folder(name: str, lines: list[str]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "results.jsonl").write_text("".join(line + "\n" for line in lines))
        return folder

    record = {"run_id": "r", "contender": "c", "problem": "p", "dataset": "d"}
    record |= {"batch_size": 1, "device": "cpu", "status": "ok", "seconds_per_step": 1.0}
    cases["run: a line not JSON"] = (
        run_folder("run1", ["{nope", json.dumps(record)]),
        "line 1 is not JSON",
    )
    binary = run_folder("run6", [])
    (binary / "results.jsonl").write_bytes(bytes(range(256)))
    cases["run: binary"] = binary, "not a text file of JSON lines"
    run = bench_run(tmp_path / "run7", 1.0)
    for name in ("results.csv", "results.jsonl", "loss_curves.csv"):
        cases[f"run: its {name}"] = (
            run / name,
            f"{run / name} is a file of the run folder {run}: give the folder",
        )
    return cases


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"status": None}, "no status"),
        ({"seconds_per_step": "1 ms"}, "seconds_per_step '1 ms' is not a number"),
        ({"seconds_per_step_samples": ["a"]}, "seconds_per_step_samples 'a' is not a number"),
        (None, "not an object"),
    ],
)
def test_a_malformed_run_row_is_named_and_left_out(tmp_path, capsys, change, reason):
    """A row of a run folder is checked as a row (ortbench.bench.store.check_rows)."""
    record = {"run_id": "r", "contender": "c", "problem": "p", "dataset": "d"}
    record |= {"batch_size": 1, "device": "cpu", "status": "ok", "seconds_per_step": 1.0}
    folder = tmp_path / "run"
    folder.mkdir()
    line = json.dumps([1] if change is None else record | change)
    (folder / "results.jsonl").write_text(line + "\n")
    assert main(["compare", str(folder), str(folder)]) == 3
    err = capsys.readouterr().err.splitlines()
    assert (
        err[:2] == [f"ortbench: bad row left out: {folder / 'results.jsonl'} line 1: {reason}"] * 2
    )


def test_each_malformed_input_is_one_line_with_status_2(tmp_path, capsys):
    good = asv_results(tmp_path / "head", "b" * 40, {TIME: timings([STEADY, STEADY])})
    for name, (path, message) in malformed_inputs(tmp_path).items():
        for argv in ([str(path), str(good)], [str(good), str(path)]):
            assert main(["compare", *argv]) == 2, name
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith("ortbench: error: "), (name, err)
            assert message in err, (name, err)


def test_a_file_of_a_run_folder_names_the_folder(tmp_path, capsys, monkeypatch):
    run = bench_run(tmp_path / "run", 1.0)
    monkeypatch.chdir(run)
    assert main(["compare", "results.csv", "results.csv"]) == 2
    assert capsys.readouterr().err == (
        f"ortbench: error: results.csv is a file of the run folder {run}: give the folder\n"
    )


def test_an_unusable_report_path_is_refused_before_comparing(tmp_path, capsys):
    good = asv_results(tmp_path / "r", "b" * 40, {TIME: timings([STEADY, STEADY])})
    for out, message in (
        (tmp_path, "it is a folder"),
        (tmp_path / "no" / "such" / "report.md", "no folder"),
    ):
        assert main(["compare", str(good), str(good), "--out", str(out)]) == 2
        err = capsys.readouterr()
        assert err.out == "" and err.err.count("\n") == 1 and message in err.err
