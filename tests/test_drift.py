"""Drift between runs made apart: the calibration each run records, and ``compare`` judging
on times normalised by it, on synthetic run folders; counters first in its report."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from ortbench.bench.calibration import (
    CALIBRATION_JSON,
    NUMPY_PROBE,
    ORT_PROBE,
    _OrtLoop,
    read_calibration,
    write_calibration,
)
from ortbench.bench.contenders import BASELINE
from ortbench.bench.store import COLUMNS, ResultsWriter
from ortbench.cli import main
from ortbench.training import OrtBenchError

RNG = np.random.default_rng(0)


def noisy(value: float, n: int = 8, spread: float = 0.02) -> list[float]:
    return list(value * np.exp(spread * RNG.standard_normal(n)))


def run_folder(folder: Path, cells: dict[str, float], probes: dict[str, float] | None) -> Path:
    """A bench run folder: ``cells`` maps a contender to its time per step (8 noisy
    samples), ``probes`` a calibration probe to its time (None: no calibration)."""
    writer = ResultsWriter(folder)
    for contender, seconds in cells.items():
        samples = noisy(seconds)
        row = dict.fromkeys(COLUMNS, math.nan)
        row.update(
            run_id=folder.name, contender=contender, problem="mlp",
            dataset="make_regression", batch_size=15, device="cpu", status="ok",
            seconds_per_step=float(np.median(samples)), runs_per_step=2.0,
            ortvalues_per_step=0.0,
        )  # fmt: skip
        writer.append(row, samples, [])
    if probes is not None:
        calibration = {name: noisy(seconds) for name, seconds in probes.items()}
        (folder / CALIBRATION_JSON).write_text(json.dumps(calibration))
    return folder


PROBES = {NUMPY_PROBE: 3e-4, ORT_PROBE: 4e-6, BASELINE: 3e-4}
CELLS = {"ort-full": 1e-4, "ort-fwbw": 1e-4, "ort-fwbw-nesterov": 1e-4}


def compare(tmp_path, base, head, capsys) -> tuple[int, str]:
    status = main(["compare", str(base), str(head)])
    return status, capsys.readouterr().out


def line(report: str, contender: str) -> str:
    (found,) = [x for x in report.splitlines() if f"contender={contender}," in x and "seconds" in x]
    return found


def test_a_machine_slowed_down_everywhere_is_not_a_regression(tmp_path, capsys):
    base = run_folder(tmp_path / "base", CELLS, PROBES)
    head = run_folder(
        tmp_path / "head",
        {name: 1.3 * s for name, s in CELLS.items()},
        {name: 1.3 * s for name, s in PROBES.items()},
    )
    status, report = compare(tmp_path, base, head, capsys)
    assert status == 0
    assert report.splitlines()[0].startswith("**Machine drift: the calibration ran 1.3")
    assert report.count("the calibration ran") == 1  # said once, first
    assert "\n9 unchanged.\n" in report
    # the same runs without their calibration regress everywhere
    for folder in (base, head):
        (folder / CALIBRATION_JSON).unlink()
    status, report = compare(tmp_path, base, head, capsys)
    assert status == 1
    assert report.splitlines()[0].startswith("## Benchmarks: Regressions found")
    assert "machine drift not checked" in report


def test_drift_that_could_explain_a_slowdown_is_inconclusive(tmp_path, capsys):
    """The machine probes moved 1.2x and 1.4x (factor 1.30); the baseline contender, 1.6x,
    is no probe: the change under test could have moved it.
    ort-full: 1.55x raw, 1.20x normalised, 1.11x against the largest probe: regressed.
    ort-fwbw: 1.45x raw, 1.12x normalised, 1.04x against the largest probe: drift?."""
    base = run_folder(tmp_path / "base", CELLS, PROBES)
    moved = {NUMPY_PROBE: 1.2, ORT_PROBE: 1.4, BASELINE: 1.6}
    calibration = {name: moved[name] * s for name, s in PROBES.items()}
    slower = {"ort-full": 1.55, "ort-fwbw": 1.45, "ort-fwbw-nesterov": 1.3}
    head = run_folder(
        tmp_path / "head", {name: slower[name] * s for name, s in CELLS.items()}, calibration
    )
    status, report = compare(tmp_path, base, head, capsys)
    assert status == 1
    assert report.splitlines()[0].startswith("**Machine drift")
    assert BASELINE not in report.splitlines()[0]
    assert line(report, "ort-full").startswith("| **regressed** |")
    assert line(report, "ort-fwbw").startswith("| drift? |")
    assert line(report, "ort-fwbw-nesterov").startswith("| unchanged |")
    assert "1 regressed, 1 drift?" in report
    # the same drift with nothing worse than drift?: inconclusive, its own status
    slower["ort-full"] = 1.3
    head = run_folder(
        tmp_path / "head2", {name: slower[name] * s for name, s in CELLS.items()}, calibration
    )
    status = main(["compare", str(base), str(head)])
    captured = capsys.readouterr()
    assert status == 4
    assert captured.err == "ortbench: inconclusive: re-run with ortbench ab\n"
    assert "1 drift?" in captured.out and "regressed" not in captured.out
    heading = next(row for row in captured.out.splitlines() if row.startswith("## "))
    assert heading == (
        "## Benchmarks: Inconclusive: a slowdown the machine's drift could explain"
    ), "an inconclusive verdict read as a pass"


def test_the_correction_alone_makes_no_verdict(tmp_path, capsys):
    """The same code timed on a machine whose probes ran 0.6x as long in HEAD: raw times
    equal, 1.67x once normalised. Regressed before (exit 1); now inconclusive, since no
    drift at all is as likely as the probes' (exit 4). The other way round, a speed-up
    made by the correction alone is not significant (exit 0). HEAD's column says its
    times are divided by the drift factor."""
    base = run_folder(tmp_path / "base", CELLS, PROBES)
    faster = {name: 0.6 * s for name, s in PROBES.items()}
    head = run_folder(tmp_path / "head", CELLS, faster)
    status, report = compare(tmp_path, base, head, capsys)
    assert status == 4, report
    assert all(line(report, c).startswith("| drift? |") for c in CELLS)
    factor = re.search(r"the calibration ran (\S+)x as long", report).group(1)
    assert (
        f"| verdict | benchmark | parameters | BASE | HEAD, times ÷ {factor} (drift) | ratio |"
        in report
    )
    main(["compare", str(base), str(head), "--html", str(tmp_path / "page.html")])
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert f"Machine drift: the calibration ran {factor}x as long" in page  # said there too
    assert f"HEAD, times ÷ {factor} (drift)" in page
    capsys.readouterr()
    status, report = compare(tmp_path, head, base, capsys)
    assert status == 0, report
    for contender in CELLS:
        assert line(report, contender).startswith("| not significant (within the machine's drift)")
    # a speed-up beyond what any change of the machine explains is still one
    quicker = run_folder(tmp_path / "quicker", {**CELLS, "ort-full": 0.3e-4}, faster)
    status, report = compare(tmp_path, base, quicker, capsys)
    assert line(report, "ort-full").startswith("| improved |")


def test_an_unstable_cell_is_missing_not_failed(tmp_path, capsys):
    """A cell whose slopes spread too far ran: it is not judged (missing), and does not
    fail the comparison as an unavailable one would."""
    base = run_folder(tmp_path / "base", CELLS, PROBES)
    head = run_folder(tmp_path / "head", CELLS, PROBES)
    records = (head / "results.jsonl").read_text().splitlines()
    first = json.loads(records[0])
    first["status"] = "unstable: slopes spread beyond 2x"
    (head / "results.jsonl").write_text("\n".join([json.dumps(first), *records[1:]]) + "\n")
    status, report = compare(tmp_path, base, head, capsys)
    assert status == 0, report
    unstable = line(report, first["contender"])
    assert unstable.startswith("| missing (unstable in HEAD: its time per step could not be read)")
    status, report = compare(tmp_path, head, base, capsys)
    assert status == 0 and "unstable in BASE" in line(report, first["contender"])


def test_compare_verdicts_are_labelled_indicative(tmp_path, capsys):
    base = run_folder(tmp_path / "base", CELLS, PROBES)
    status, report = compare(tmp_path, base, run_folder(tmp_path / "head", CELLS, PROBES), capsys)
    assert status == 0
    assert "Indicative: BASE and HEAD are separate runs" in report
    assert "`ortbench ab`" in report


def test_a_steady_calibration_changes_nothing(tmp_path, capsys):
    base = run_folder(tmp_path / "base", CELLS, PROBES)
    head = run_folder(tmp_path / "head", {**CELLS, "ort-full": 1.5e-4}, PROBES)
    status, report = compare(tmp_path, base, head, capsys)
    assert status == 1
    assert report.splitlines()[0] == "## Benchmarks: Regressions found"
    assert "Calibration steady" in report
    assert line(report, "ort-full").startswith("| **regressed** |")


def test_calibration_probes(tmp_path):
    loop = _OrtLoop()
    loop.buffers[0][:] = RNG.standard_normal(loop.buffers[0].shape)
    loop()
    np.testing.assert_array_equal(loop.buffers[1], loop.buffers[0])  # X @ identity
    assert read_calibration(tmp_path) is None
    write_calibration(tmp_path, 2)  # before a run's cells
    first = read_calibration(tmp_path)
    write_calibration(tmp_path, 2)  # and after them
    samples = read_calibration(tmp_path)
    assert set(samples) == {NUMPY_PROBE, ORT_PROBE}  # the machine alone, no contender
    assert all(len(v) == 4 and min(v) > 0 for v in samples.values())
    assert all(samples[name][:2] == first[name] for name in samples)
    (tmp_path / CALIBRATION_JSON).write_text("{not json")
    with pytest.raises(OrtBenchError, match="not a calibration file"):
        read_calibration(tmp_path)


def test_compare_lists_counter_verdicts_first(tmp_path, capsys):
    base = run_folder(tmp_path / "base", CELLS, PROBES)
    records = [json.loads(x) for x in (base / "results.jsonl").read_text().splitlines()]
    records[-1]["ortvalues_per_step"] = 1.0  # ort-fwbw-nesterov allocated in BASE, not in HEAD
    (base / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    head = run_folder(tmp_path / "head", {**CELLS, "ort-full": 2e-4}, PROBES)
    status, report = compare(tmp_path, base, head, capsys)
    assert status == 1
    rows = [x for x in report.splitlines() if x.startswith("| ") and "_per_step`" in x]
    assert rows[0].startswith("| improved |") and "`ortvalues_per_step`" in rows[0]
    assert rows[1].startswith("| **regressed** |") and "`seconds_per_step`" in rows[1]
