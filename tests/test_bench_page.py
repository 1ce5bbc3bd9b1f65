"""The bench run's page and ``summary.md``: the answer first, each row once, the plots
that say something, the method folded at the end (read back with the standard library's
HTML parser; ``tests/test_browser.py`` checks the page in a browser)."""

from __future__ import annotations

import html
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from ortbench.bench.store import (
    COLUMNS,
    ResultsWriter,
    mark_interrupted,
    read_results,
    write_plan,
)
from ortbench.cli import main
from ortbench.report.html import write_index, write_reports
from ortbench.report.markdown import markdown_to_html
from ortbench.report.plots import PLOT_CAPTIONS, write_plots
from ortbench.report.scaling import SCALING_PNG, has_model_sizes
from ortbench.report.summary import (
    NEGATIVE_FIXED_COST,
    SUMMARY_MD,
    bench_summary,
    conclusion,
    run_plots,
    write_summary,
)
from ortbench.schema import RESULTS_CSV

#: Seconds per step by (problem, batch size, contender): ort-fwbw 3.3x then 6.5x faster
#: than scikit-learn on the small model; on the big one ort-full wins at batch 256.
TIMES = {
    ("mlp", 15, "sklearn-mlp-sgd"): 660e-6,
    ("mlp", 15, "ort-full"): 300e-6,
    ("mlp", 15, "ort-fwbw"): 200e-6,
    ("mlp", 256, "sklearn-mlp-sgd"): 13e-3,
    ("mlp", 256, "ort-full"): 2.5e-3,
    ("mlp", 256, "ort-fwbw"): 2e-3,
    ("mlp-256-128", 15, "sklearn-mlp-sgd"): 3e-3,
    ("mlp-256-128", 15, "ort-full"): 1.1e-3,
    ("mlp-256-128", 15, "ort-fwbw"): 1e-3,
    ("mlp-256-128", 256, "sklearn-mlp-sgd"): 60e-3,
    ("mlp-256-128", 256, "ort-full"): 4e-3,
    ("mlp-256-128", 256, "ort-fwbw"): 5e-3,
}
SIZES = {"mlp": 5571, "mlp-256-128": 47_000}


def _row(problem: str, batch_size: int, contender: str, seconds: float) -> dict:
    row = dict.fromkeys(COLUMNS, math.nan)
    row.update(
        run_id="r1", contender=contender, problem=problem, dataset="make_regression",
        batch_size=batch_size, device="cpu", status="ok", epochs=3, steps=100, repeat=8,
        timing="slope", trained_values=SIZES[problem], seconds_per_step=seconds,
        seconds_per_step_min=seconds * 0.9, seconds_per_step_max=seconds * 1.1,
        seconds_per_fit_overhead=1e-3, peak_memory_mb=2.0, final_train_loss=0.5,
        validation_loss=0.6, validation_score=0.25, cpu_model="cpu",
        runs_per_step=math.nan if contender.startswith("sklearn") else 2.0,
        intra_op_threads={"ort-full": 0, "ort-fwbw": 1}.get(contender, math.nan),
    )  # fmt: skip
    return row


def _results(problems=("mlp", "mlp-256-128")) -> pd.DataFrame:
    rows = [_row(*key, seconds) for key, seconds in TIMES.items() if key[0] in problems]
    failed = _row("mlp", 15, "torch-sgd", math.nan)
    failed["status"] = "failed: ValueError: shape (3|4) | (5)"
    return pd.DataFrame([*rows, failed])


def _folder(tmp_path, problems=("mlp", "mlp-256-128")):
    writer = ResultsWriter(tmp_path)
    for row in _results(problems).to_dict("records"):
        writer.append(row, [row["seconds_per_step"]], [])
    return tmp_path


class _Page(HTMLParser):
    """Headings, tables (rows of cell texts), figures, list items of class conclusion, and
    for each text whether it lies inside a <details>."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, object]] = []  # the page's parts in reading order
        self.tables: list[list[list[str]]] = []
        self.folded: list[str] = []  # text inside <details>
        self.open: list[tuple[str, dict]] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag not in ("img", "br", "meta", "link"):
            self.open.append((tag, attrs))
        if tag == "table":
            self.tables.append([])
            self.events.append(("table", len(self.tables) - 1))
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th", "h1", "h2", "li", "figcaption"):
            self._text = []
        elif tag == "img":
            self.events.append(("img", attrs["src"]))

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag):
        opened, attrs = self.open.pop()
        assert opened == tag, (opened, tag)
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._text))
        elif tag in ("h1", "h2", "figcaption"):
            self.events.append((tag, "".join(self._text)))
        elif tag == "li" and attrs.get("class") == "conclusion":
            self.events.append(("conclusion", "".join(self._text)))
        if tag in ("td", "th", "h1", "h2", "li", "figcaption"):
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)
        if any(tag == "details" for tag, _ in self.open):
            self.folded.append(data)

    def kinds(self, kind: str) -> list:
        return [value for k, value in self.events if k == kind]


def _page(folder) -> _Page:
    parser = _Page()
    parser.feed((folder / "index.html").read_text(encoding="utf-8"))
    parser.close()
    return parser


def test_the_conclusion_names_the_fastest_and_its_speed_up_range():
    results = _results()
    small, big = (results[results.problem == p] for p in ("mlp", "mlp-256-128"))
    assert conclusion(small) == "ort-fwbw fastest at every batch size, 3.3x to 6.5x sklearn-mlp-sgd"
    assert conclusion(big) == (
        "fastest: ort-fwbw at batch size 15, ort-full at batch size 256; 3.0x to 15x "
        "sklearn-mlp-sgd"
    )
    one = small[(small.batch_size == 15) & (small.status == "ok")]
    assert conclusion(one) == "ort-fwbw fastest at this batch size, 3.3x sklearn-mlp-sgd"
    # a non-positive slope measures nothing: not the fastest, no speed-up against it
    loaded = small.assign(seconds_per_step=small.seconds_per_step.where(
        ~((small.contender == "sklearn-mlp-sgd") & (small.batch_size == 256)), -1e-3
    ))  # fmt: skip
    assert conclusion(loaded) == "ort-fwbw fastest at every batch size, 3.3x sklearn-mlp-sgd"
    slow = one.assign(seconds_per_step=one.seconds_per_step[::-1].to_numpy())
    assert conclusion(slow) == "sklearn-mlp-sgd fastest at this batch size"  # the baseline


def test_the_page_leads_with_its_answer_and_shows_each_row_once(tmp_path):
    folder = _folder(tmp_path)
    for name in [*PLOT_CAPTIONS, SCALING_PNG]:
        (folder / name).write_bytes(b"")  # the page shows the plots the folder holds
    write_index(folder)
    page = _page(folder)
    assert page.kinds("h1") == ["ortbench bench: run r1"]
    conclusions = page.kinds("conclusion")
    assert len(conclusions) == 2 and conclusions[0].endswith(
        ": ort-fwbw fastest at every batch size, 3.3x to 6.5x sklearn-mlp-sgd."
    )
    # one table per section, then the cells without a measurement: every row once
    (small, big, not_run, _environment) = page.tables
    keys = [tuple(r[:2]) for table in (small, big) for r in table[1:]]
    assert len(keys) == len(TIMES) and len(set(keys)) == len(TIMES) // 2
    assert not_run[1][-1] == "failed: ValueError: shape (3|4) | (5)"
    headers = small[0]
    assert {"validation R²", "peak memory (MB)", "runtime runs per step"} <= set(headers)
    assert "new OrtValues per step" not in headers  # empty in every row
    threads = {row[1]: row[headers.index("intra-op threads")] for row in small[1:]}
    assert threads == {"sklearn-mlp-sgd": "", "ort-full": "pool", "ort-fwbw": "1"}
    # the reading order: the answer, the tables, the plots, the method (folded)
    order = [kind for kind, _ in page.events if kind in ("conclusion", "table", "img")]
    assert order == ["conclusion"] * 2 + ["table"] * 3 + ["img"] * 4 + ["table"]
    assert page.kinds("img") == [*PLOT_CAPTIONS, SCALING_PNG]
    assert all(c.endswith(".") and len(c.split()) > 10 for c in page.kinds("figcaption"))
    folded = "".join(page.folded)
    assert "slope between" in folded and "python_version" in folded
    # summary.md: the same cells, rounded once, in the same order
    summary = _Page()
    summary.feed(markdown_to_html((folder / SUMMARY_MD).read_text(encoding="utf-8"), 1))
    assert summary.tables == page.tables[:3]
    parts = ("h1", "h2", "table", "img")
    shown = [(k, v) for k, v in page.events if k in parts][:-1]  # the environment: page only
    assert [(k, v) for k, v in summary.events if k in parts] == shown
    assert "slope between" in "".join(summary.folded)


def test_a_run_of_one_model_size_has_no_scaling_plot(tmp_path):
    assert has_model_sizes(_results())
    one = _results(("mlp",))
    assert not has_model_sizes(one)
    folder = _folder(tmp_path, ("mlp",))
    (folder / SCALING_PNG).write_bytes(b"")  # left by an earlier version: not shown
    assert SCALING_PNG not in [p.file for p in run_plots(folder, one)]


@pytest.mark.parametrize(
    ("problem", "name"),
    [("mlp", "validation R²"), ("mlp-binary", "validation accuracy"), ("linear", "validation R²")],
)
def test_the_score_column_says_what_the_score_is(problem, name):
    results = _results(("mlp",)).assign(problem=problem)
    (section,) = bench_summary(results).sections
    assert name in section.table.headers


def test_every_report_of_a_run_folder_reads_its_results_once(tmp_path, monkeypatch, capsys):
    """The plots, the scaling plot, ``summary.md`` and ``index.html`` of one run (as bench
    and merge write them, and as ``ortbench report`` writes them again) draw on one read of
    ``results.csv``."""
    folder = _folder(tmp_path)
    reads = []
    read_csv = pd.read_csv

    def counted(path, *args, **kwargs):
        reads.append(Path(path).name)
        return read_csv(path, *args, **kwargs)

    monkeypatch.setattr(pd, "read_csv", counted)
    text = write_reports(folder)
    assert reads.count(RESULTS_CSV) == 1
    assert text == (folder / SUMMARY_MD).read_text(encoding="utf-8")
    assert "ort-fwbw fastest at every batch size" in text
    for name in [*PLOT_CAPTIONS, SCALING_PNG, "index.html"]:
        assert (folder / name).stat().st_size > 0, name
    reads.clear()
    for name in [*PLOT_CAPTIONS, SCALING_PNG, "index.html", SUMMARY_MD]:
        (folder / name).unlink()
    assert main(["report", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == str(folder / "index.html")
    assert reads.count(RESULTS_CSV) == 1
    for name in [*PLOT_CAPTIONS, SCALING_PNG, "index.html", SUMMARY_MD]:
        assert (folder / name).stat().st_size > 0, name


def _one_row(**values) -> pd.DataFrame:
    """One timed cell of ``_row``, its columns set to ``values``."""
    return pd.DataFrame([{**_row("mlp", 15, "ort-fwbw", 200e-6), **values}])


def _cells(results: pd.DataFrame) -> dict[str, str]:
    """The first table row of the only section, by header."""
    (section,) = bench_summary(results).sections
    return dict(zip(section.table.headers, section.table.rows[0]))


def test_a_fixed_cost_estimated_below_zero_reads_as_noise(tmp_path):
    cells = _cells(_one_row(seconds_per_fit_overhead=-0.0712))
    assert cells["fixed cost per fit (ms)"] == NEGATIVE_FIXED_COST == "< 0 (noise)"
    assert _cells(_one_row(seconds_per_fit_overhead=0.0016))["fixed cost per fit (ms)"] == "1.6"
    # results.csv keeps the estimate; the method says what the mark means
    writer = ResultsWriter(tmp_path)
    for contender, fixed in (("sklearn-mlp-sgd", 0.0021), ("ort-fwbw", -0.0016)):
        row = {**_row("mlp", 15, contender, 1e-4), "seconds_per_fit_overhead": fixed}
        writer.append(row, [row["seconds_per_step"]], [])
    text = write_summary(tmp_path)
    assert "| 15 | sklearn-mlp-sgd | 100 | 90 to 110 | 2.1 |" in text
    assert f"| 15 | ort-fwbw | 100 | 90 to 110 | {NEGATIVE_FIXED_COST} |" in text
    assert text.count(NEGATIVE_FIXED_COST) == 2  # the cell and the method
    assert list(read_results(tmp_path).seconds_per_fit_overhead) == [0.0021, -0.0016]


@pytest.mark.parametrize(
    ("median", "low", "high", "shown"),
    [
        (161.6, 160.9, 162.3, ("162", "161 to 162")),
        (290.4, 210.2, 670.6, ("290", "210 to 670")),
        (780.0, 3.21, 7512.0, ("780", "3.2 to 7510")),
        (0.5012, 0.4511, 0.5523, ("0.50", "0.45 to 0.55")),
    ],
)
def test_a_median_never_falls_outside_its_range(median, low, high, shown):
    cells = _cells(
        _one_row(
            seconds_per_step=median * 1e-6,
            seconds_per_step_min=low * 1e-6,
            seconds_per_step_max=high * 1e-6,
        )
    )
    text = (cells["time per step (µs, median)"], cells["min to max (µs)"])
    assert text == shown
    least, most = (float(end) for end in text[1].split(" to "))
    assert least <= float(text[0]) <= most


def test_counts_of_one_read_in_the_singular():
    results = _one_row(repeat=1, epochs=1, cpu_cores=1, cpu_threads=1)
    summary = bench_summary(results)
    assert "median of 1 timed round, and" in summary.lead
    for text in ("median over 1 round of", "at least 1 epoch and", "a first fit of 1 epoch that"):
        assert text in summary.method
    assert ", 1 core, 1 thread (" in summary.machine
    many = bench_summary(_one_row(repeat=8, epochs=3, cpu_cores=2, cpu_threads=4))
    assert "median of 8 timed rounds, and" in many.lead
    assert (
        "median over 8 rounds of" in many.method and "a first fit of 3 epochs that" in many.method
    )
    assert ", 2 cores, 4 threads (" in many.machine


def test_a_much_slower_contender_keeps_its_speed_up_digits():
    """A contender 70x slower than the baseline reads 0.014x, not 0.0x."""
    results = pd.concat(
        [
            _one_row(contender="sklearn-mlp-sgd", seconds_per_step=100e-6),
            _one_row(contender="ort-fwbw", seconds_per_step=7000e-6),
        ]
    )
    (section,) = bench_summary(results).sections
    column = section.table.headers.index("speed-up vs sklearn-mlp-sgd")
    speedups = {row[1]: row[column] for row in section.table.rows}
    assert speedups == {"sklearn-mlp-sgd": "1.0x", "ort-fwbw": "0.014x"}


def test_the_speed_up_plot_is_over_the_baseline_the_run_named(tmp_path, monkeypatch):
    """A run with --baseline ort-full plots each contender's ratio to ort-full, labelled so,
    also where scikit-learn ran beside it."""
    results = _results(("mlp",)).assign(baseline="ort-full")
    writer = ResultsWriter(tmp_path)
    for row in results.to_dict("records"):
        writer.append(row, [row["seconds_per_step"]], [])
    saved = {}
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, path, **_: saved.update({Path(path).name: fig})
    )
    write_plots(tmp_path)
    (ax, *_) = saved["speedup.png"].axes
    assert ax.get_ylabel() == "speed-up over ort-full (x, higher is faster)"
    ratios = [list(line.get_ydata()) for line in ax.get_lines()[:-1]]  # the last: y = 1
    want = [
        [TIMES["mlp", b, "ort-full"] / TIMES["mlp", b, c] for b in (15, 256)]
        for c in ("sklearn-mlp-sgd", "ort-full", "ort-fwbw")  # in the order they ran
    ]
    np.testing.assert_allclose(ratios, want)


def _interrupted_run(
    folder: Path, reached: int = 2, interrupted: bool = True, cut: bool = False
) -> Path:
    """A run folder as Ctrl-C leaves ``bench``: the rows of its first ``reached`` planned
    cells (batch 15), the plan of all four (batch 256 too), marked interrupted; with
    ``cut``, the other cells were running: their rows say ``interrupted``."""
    planned = [(b, c) for b in (15, 256) for c in ("sklearn-mlp-sgd", "ort-fwbw")]
    keys = {"problem": "mlp", "dataset": "make_regression", "device": "cpu"}
    folder.mkdir(exist_ok=True)
    write_plan(folder, [{"contender": c, "batch_size": b, **keys} for b, c in planned])
    writer = ResultsWriter(folder)
    for b, c in planned[:reached]:
        row = _row("mlp", b, c, TIMES[("mlp", b, c)])
        writer.append(row, [row["seconds_per_step"]], [])
    for b, c in planned[reached:] if cut else []:
        writer.append({**_row("mlp", b, c, math.nan), "status": "interrupted"}, [], [])
    if interrupted:
        mark_interrupted(folder)
    return folder


def test_an_interrupted_run_says_so_and_lists_the_cells_it_never_reached(tmp_path, capsys):
    run = _interrupted_run(tmp_path)
    assert main(["report", str(run)]) == 0
    summary = (run / SUMMARY_MD).read_text(encoding="utf-8")
    assert summary.startswith(
        "# ortbench bench: run r1 (interrupted)\n\nInterrupted: 2 of the 4 planned cells "
        "were not run (see Cells without a measurement). Time per training step"
    )
    page = (run / "index.html").read_text(encoding="utf-8")
    assert "<h1>ortbench bench: run r1 (interrupted)</h1>" in page
    assert "Interrupted: 2 of the 4 planned cells were not run" in page
    for contender in ("sklearn-mlp-sgd", "ort-fwbw"):
        row = f"| {contender} | mlp | make_regression | 256 | cpu | not run: interrupted |"
        assert row in summary
        cells = [contender, "mlp", "make_regression", "256", "cpu", "not run: interrupted"]
        assert "".join(f"<td class='{k}'>{c}</td>" for k, c in zip(ROW_CLASSES, cells)) in page
    assert summary.count("not run") == 3 and page.count("not run") == 3  # the lead's too
    # stopped while batch 256 was running: its rows say so, and count as not run
    text = write_summary(_interrupted_run(tmp_path / "cut", cut=True))
    assert text.startswith(
        "# ortbench bench: run r1 (interrupted)\n\nInterrupted: 2 of the 4 planned cells "
        "were not run"
    )
    assert "| ort-fwbw | mlp | make_regression | 256 | cpu | interrupted |" in text
    # a run that finished every cell it planned reads as it always did, also where the
    # signal came after its last cell (while it wrote its files)
    for late in (False, True):
        finished = _interrupted_run(tmp_path / f"finished-{late}", reached=4, interrupted=late)
        text = write_summary(finished)
        assert text.startswith("# ortbench bench: run r1\n\nTime per training step")
        assert "not run" not in text and "Interrupted" not in text


#: The classes of a row's cells in the table of cells without a measurement.
ROW_CLASSES = ("text", "text", "text", "num", "text", "status")


def test_summary_names_the_bad_rows_as_the_page_does(tmp_path, capsys):
    writer = ResultsWriter(tmp_path)
    for contender in ("sklearn-mlp-sgd", "ort-full", "ort-fwbw", "ort-portable-fwbw"):
        row = _row("mlp", 15, contender, 1e-4)
        writer.append(row, [row["seconds_per_step"]], [])
    table = pd.read_csv(tmp_path / RESULTS_CSV)
    table.loc[1, "seconds_per_step"] = math.nan  # ort-full
    table.loc[2, "seconds_per_step"] = -1e-4  # ort-fwbw
    pd.concat([table, table.iloc[[0]]]).to_csv(tmp_path / RESULTS_CSV, index=False)
    assert main(["report", str(tmp_path)]) == 0
    bad = [str(row) for row in read_results(tmp_path).attrs["bad_rows"]]
    assert [line.split(":")[0] for line in bad] == ["line 2", "line 3", "line 4", "line 6"]
    assert len(capsys.readouterr().err.splitlines()) == 4
    summary = (tmp_path / SUMMARY_MD).read_text(encoding="utf-8")
    assert "| 15 | ort-portable-fwbw |" in summary
    section = summary.split("\n## Bad rows of results.csv, left out\n\n")[1]
    assert section.split("\n\n")[0].splitlines() == [f"- {line}" for line in bad]
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert all(f"<li>{html.escape(line)}</li>" in page for line in bad)


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (17, 20, {"17", "18", "19", "20"}),  # under 3x: every minor tick (and halves)
        (12, 95, {"20", "30", "50"}),  # under 10x, no decade tick: 2, 3 and 5 of it
        (3, 900, {"10", "100"}),  # the decades alone
    ],
)
def test_a_log_axis_within_one_decade_keeps_numbers(low, high, expected):
    """A contender whose times stay within one decade (17 and 20 µs) had a panel of the
    scaling plot with no number on its log axis, beside panels labelled 0.01 to 0.1."""
    from ortbench.report.plots import log_axis_labels

    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([1, 2], [low, high])
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    log_axis_labels(ax.yaxis)
    fig.canvas.draw()
    ticks = [*ax.yaxis.get_majorticklabels(), *ax.yaxis.get_minorticklabels()]
    shown = {t.get_text() for t in ticks if t.get_text() and low <= t.get_position()[1] <= high}
    assert shown >= expected and (high / low < 3 or shown == expected), shown
