"""``ortbench compare`` on result sets built here, in asv's format and in ortbench's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ortbench.bench.store import COLUMNS, ResultsWriter
from ortbench.cli import main
from ortbench.report.resultsets import Measurement, load_result_set
from ortbench.report.significance import confidence_interval, is_significant

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


def test_a_counter_decrease_and_skipped_and_missing_cells(tmp_path):
    base = {COUNTER: ("count", [2.0, math.nan], None), TIME: timings([STEADY, STEADY])}
    head = {COUNTER: ("count", [1.0, math.nan], None)}
    status, report = run_compare(tmp_path, base, head)
    assert status == 0
    line = verdict_line(report, "contender='ort-full', batch_size=15", COUNTER)
    assert line.startswith("| improved |") and line.endswith("| 2 | 1 | 0.50 |")
    assert "contender='ort-fwbw', batch_size=15 | 4" not in report  # skipped on both sides
    assert "missing (only in BASE)" in report
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
    assert "| **failed** (errored in HEAD) | `runs_per_step` | contender=ort-fwbw" in out
    assert "BASE: run base" in out and "HEAD: run slow" in out


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
