"""``ortbench compare --html``: every cell's BASE and HEAD samples, on one scale, and the verdict."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from ortbench.bench.store import COLUMNS, ResultsWriter
from ortbench.cli import main
from ortbench.report.compare_page import LEFT, PAD, WIDTH, strip_svg
from ortbench.report.resultsets import Measurement

RNG = np.random.RandomState(1)
#: eight timings of 1 ms with 2% noise
SAMPLES = list(1e-3 * (1 + 0.02 * RNG.randn(8)))


def bench_run(folder: Path, fwbw_factor: float, fwbw_status: str = "ok") -> Path:
    """A run folder with ort-full (unchanged) and ort-fwbw (times scaled by the factor,
    or no row but its status when that is not ``ok``)."""
    writer = ResultsWriter(folder)
    for contender, factor in (("ort-full", 1.0), ("ort-fwbw", fwbw_factor)):
        status = "ok" if contender == "ort-full" else fwbw_status
        samples = [factor * s for s in SAMPLES] if status == "ok" else []
        row = dict.fromkeys(COLUMNS, math.nan)
        row.update(
            run_id=folder.name, contender=contender, problem="mlp",
            dataset="make_regression", batch_size=15, device="cpu", status=status,
        )  # fmt: skip
        if status == "ok":
            row.update(seconds_per_step=float(np.median(samples)), runs_per_step=2.0)
            row.update(ortvalues_per_step=0.0)
        writer.append(row, samples, [])
    return folder


def rows(page: str) -> dict[tuple[str, str], str]:
    """(verdict, contender) -> the row's HTML."""
    found = {}
    for row in re.findall(r"<tr><td class='verdict'>.*?</tr>", page):
        verdict = re.search(r"</span>([a-z ]+)", row).group(1)
        benchmark = re.search(r"<code>([^<]+)</code>", row).group(1)
        contender = re.search(r"contender=([\w-]+)", row).group(1)
        found[(verdict, benchmark, contender)] = row
    return found


def marks(row: str, y: int) -> tuple[list[float], list[float]]:
    """The x of the sample dots and of the value tick on the strip line at ``y``."""
    dots = [float(x) for x in re.findall(rf"<circle cx='([\d.]+)' cy='{y}'", row)]
    ticks = [
        float(x) for x, x2 in re.findall(rf"<line x1='([\d.]+)' x2='([\d.]+)' y1='{y - 7}'", row)
    ]
    return dots, ticks


def test_compare_page_shows_samples_and_verdicts(tmp_path):
    base = bench_run(tmp_path / "base", 1.0)
    head = bench_run(tmp_path / "head", 2.0)
    page_path = tmp_path / "compare.html"
    assert main(["compare", str(base), str(head), "--html", str(page_path)]) == 1
    page = page_path.read_text()
    assert "Regressions found: 1 regressed, 5 unchanged" in page
    found = rows(page)
    regressed = found[("regressed", "seconds_per_step", "ort-fwbw")]
    assert "<td class='num'>2.00</td>" in regressed  # HEAD / BASE
    base_dots, (base_tick,) = marks(regressed, 12)
    head_dots, (head_tick,) = marks(regressed, 30)
    assert len(base_dots) == len(head_dots) == len(SAMPLES)
    # one scale for both lines, from the lowest to the highest sample, 5% margins
    span = 2 * max(SAMPLES) - min(SAMPLES)
    low, high = min(SAMPLES) - 0.05 * span, 2 * max(SAMPLES) + 0.05 * span
    for dots, factor in ((base_dots, 1.0), (head_dots, 2.0)):
        expected = [
            LEFT + (WIDTH - LEFT - PAD) * (factor * s - low) / (high - low) for s in SAMPLES
        ]
        assert sorted(dots) == pytest.approx(sorted(expected), abs=0.06)
    for tick, factor in ((base_tick, 1.0), (head_tick, 2.0)):  # the medians compared
        median = factor * np.median(SAMPLES)
        assert tick == pytest.approx(
            LEFT + (WIDTH - LEFT - PAD) * (median - low) / (high - low), abs=0.06
        )
    assert min(head_dots) > max(base_dots)  # what moved shows as two clouds apart
    unchanged = found[("unchanged", "seconds_per_step", "ort-full")]
    dots, _ = marks(unchanged, 12)
    head, _ = marks(unchanged, 30)
    assert sorted(dots) == sorted(head)  # same samples, same places
    counter = found[("unchanged", "runs_per_step", "ort-full")]
    assert "<circle" not in counter and "2</td>" in counter  # a counter: values, no samples


def test_a_cell_not_run_shows_as_interrupted_without_a_strip(tmp_path):
    base = bench_run(tmp_path / "base", 1.0)
    head = bench_run(tmp_path / "head", 1.0, fwbw_status="interrupted")
    page_path = tmp_path / "compare.html"
    assert main(["compare", str(base), str(head), "--html", str(page_path)]) == 0
    page = page_path.read_text()
    assert "No regression: 3 missing, 3 unchanged" in page
    found = rows(page)
    for benchmark in ("seconds_per_step", "runs_per_step", "ortvalues_per_step"):
        row = found[("missing", benchmark, "ort-fwbw")]
        assert "not run: interrupted in HEAD" in row
        assert "<td class='num'>interrupted</td><td class='num'>n/a</td>" in row
        assert len(marks(row, 12)[1]) == 1 and marks(row, 30) == ([], [])  # BASE's alone
    assert strip_svg(None, Measurement(None, "seconds", interrupted=True), "red") == ""


def test_strip_draws_intervals_when_there_are_no_samples():
    before = Measurement(1.0, "seconds", ci=(0.9, 1.1))
    after = Measurement(2.0, "seconds", ci=(1.9, 2.1))
    svg = strip_svg(before, after, "red")
    assert "<circle" not in svg

    def x(value):  # the range of all values, 5% margins
        low, high = 0.9 - 0.06, 2.1 + 0.06
        return LEFT + (WIDTH - LEFT - PAD) * (value - low) / (high - low)

    bars = re.findall(
        r"<line x1='([\d.]+)' x2='([\d.]+)' y1='(\d+)' y2='\d+' stroke='[^']+' stroke-width='5'",
        svg,
    )
    assert [(float(a), float(b), int(y)) for a, b, y in bars] == [
        pytest.approx((x(0.9), x(1.1), 12), abs=0.06),
        pytest.approx((x(1.9), x(2.1), 30), abs=0.06),
    ]
    assert strip_svg(None, Measurement(None, "seconds"), "red") == ""  # nothing measured
