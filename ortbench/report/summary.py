"""What a bench run found, in the order a reader wants it: the answer first (one line per
data set and model size), then one table per section, then the plots, then how it was
measured. :func:`bench_summary` builds it from the results; ``summary.md`` and the run's
page render that same content, rounded once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..bench.store import RunPlan
from ..bench.timing import MIN_EXTRA_SECONDS, SHORT_EPOCHS
from ..errors import OrtBenchError
from ..schema import BASELINE, NOT_RUN, RESULTS_CSV, builtin_task
from .baselines import baseline_times, group_baseline
from .plots import PLOT_CAPTIONS
from .resultsets import INTERRUPTED, ResultSet, load_result_set
from .scaling import SCALING_CAPTION, SCALING_PNG, has_model_sizes
from .units import format_seconds, plural, round_range, round_to_noise
from .verdicts import escape_cell

SUMMARY_MD = "summary.md"
METHOD_TITLE = "How it was measured"
#: The name of the validation score, by the problem's task.
SCORE_NAMES = {
    "regression": "validation R²",
    "binary": "validation accuracy",
    "multiclass": "validation accuracy",
}
#: The section of the cells that have no time per step to show (unavailable, failed,
#: unstable or interrupted), and its columns.
NOT_MEASURED_TITLE = "Cells without a measurement"
NOT_RUN_COLUMNS = ("contender", "problem", "dataset", "batch size", "device", "status")
#: The section naming the rows of ``results.csv`` that no report uses.
BAD_ROWS_TITLE = f"Bad rows of {RESULTS_CSV}, left out"
#: The fixed cost per fit of a cell whose estimate came out below 0: the noise of the
#: fits outweighed what a fit pays once (results.csv keeps the estimate).
NEGATIVE_FIXED_COST = "< 0 (noise)"


@dataclass
class Table:
    """Headers, which columns hold numbers, and rows of cells already written out."""

    headers: list[str]
    numeric: list[bool]
    rows: list[list[str]] = field(default_factory=list)


@dataclass
class Section:
    """The cells of one problem (model size) on one data set and device."""

    title: str
    conclusion: str
    table: Table


@dataclass
class Plot:
    """A PNG of the run folder and the sentence that says what to look at in it."""

    file: str
    caption: str


@dataclass
class BenchSummary:
    """A bench run's report, independent of how it is rendered."""

    title: str
    lead: str
    sections: list[Section]
    not_run: Table | None
    plots: list[Plot]
    method: str
    machine: str
    #: a signal stopped the run before it finished
    interrupted: bool = False
    #: the rows of ``results.csv`` left out (see :func:`ortbench.bench.store.read_results`)
    bad_rows: list[str] = field(default_factory=list)


def format_speedup(ratio: float) -> str:
    """A speed-up as it reads everywhere: 2 significant digits, at least 1 decimal below 10."""
    if ratio is None or math.isnan(ratio):
        return "n/a"
    if ratio < 0.1:  # a contender 10x slower or more: its digits, not "0.0x"
        return f"{ratio:.2g}x"
    return f"{ratio:.1f}x" if ratio < 10 else f"{ratio:.0f}x"


def _machines_line(results: pd.DataFrame) -> list[str]:
    """A line when the rows come from several machines (shards merged from several): the
    machine line above is the first row's."""
    columns = [c for c in ("cpu_model", "cpu_cores", "platform") if c in results]
    machines = results[columns].astype(str).drop_duplicates()
    if len(machines) < 2:
        return []
    names = "; ".join(", ".join(row) for row in machines.itertuples(index=False))
    return [
        f"**Several machines**: these rows ran on {len(machines)} ({names}); the line "
        f"above is the first's, and times compare within one machine only (results.csv's "
        f"cpu_model column says which)."
    ]


def _title(problem: str, dataset: str, device: str, rows: pd.DataFrame) -> str:
    """The section's problem, with its size and SGD learning rate where the rows have
    them, its data set and device."""
    values = rows["trained_values"].iloc[0] if "trained_values" in rows else math.nan
    rates = rows["learning_rate"].dropna().unique() if "learning_rate" in rows else []
    about = [] if pd.isna(values) else [f"{int(values):,} trained values"]
    if len(rates) == 1:
        about.append(f"learning rate {rates[0]:g}")
    size = f" ({', '.join(about)})" if about else ""
    return f"{problem}{size} on {dataset}, {device}"


def conclusion(rows: pd.DataFrame) -> str:
    """One line: the fastest contender at each batch size, and its speed-up over the
    baseline (the range over batch sizes).

    Parameters
    ----------
    rows : DataFrame
        The finished cells of one problem on one data set and device.

    Returns
    -------
    str
        For example "ort-fwbw fastest at every batch size, 3.3x to 6.5x sklearn-mlp-sgd".
    """
    timed = rows[rows.seconds_per_step > 0]  # a non-positive slope measures nothing
    if timed.empty:
        return "no cell has a positive time per step"
    baseline = group_baseline(rows)
    base = baseline_times(rows, baseline)
    fastest = timed.loc[timed.groupby("batch_size").seconds_per_step.idxmin()]
    names = list(dict.fromkeys(fastest.contender))
    if len(names) == 1:
        where = "every batch size" if rows.batch_size.nunique() > 1 else "this batch size"
        text = f"{names[0]} fastest at {where}"
    else:
        text = "fastest: " + ", ".join(
            f"{r.contender} at batch size {r.batch_size}" for r in fastest.itertuples()
        )
    ratios = (base.reindex(fastest.batch_size).to_numpy() / fastest.seconds_per_step).dropna()
    if names == [baseline] or ratios.empty:
        return text
    low, high = format_speedup(ratios.min()), format_speedup(ratios.max())
    separator = ", " if len(names) == 1 else "; "
    return f"{text}{separator}{low if low == high else f'{low} to {high}'} {baseline}"


def _number(value, form: str = ".4g") -> str:
    return "" if value is None or pd.isna(value) else f"{value:{form}}"


def _fixed_cost(seconds: float) -> str:
    """A cell's fixed cost per fit in ms, 2 significant digits; an estimate below 0 reads
    :data:`NEGATIVE_FIXED_COST`."""
    return NEGATIVE_FIXED_COST if seconds < 0 else round_to_noise(seconds * 1e3, math.nan, 2)


def _threads(value) -> str:
    """An engine cell's intra-op threads: a count, or "pool" for onnxruntime's (0)."""
    if value is None or pd.isna(value):
        return ""
    return "pool" if value == 0 else f"{value:.0f}"


def _section_table(rows: pd.DataFrame) -> Table:
    """Every column a reader needs, the empty ones left out."""
    baseline = group_baseline(rows)
    base = baseline_times(rows, baseline)
    tasks = {builtin_task(p) for p in rows.problem.unique()}
    score = SCORE_NAMES.get(tasks.pop()) if len(tasks) == 1 else None
    columns: dict[str, tuple[bool, list[str]]] = {
        name: (numeric, [])
        for name, numeric in (
            ("batch size", True),
            ("contender", False),
            ("time per step (µs, median)", True),
            ("min to max (µs)", True),
            ("fixed cost per fit (ms)", True),
            (f"speed-up vs {baseline}", True),
            ("peak memory (MB)", True),
            ("final train loss", True),
            ("validation loss", True),
            (score or "validation score (R² or accuracy)", True),
            ("runtime runs per step", True),
            ("new OrtValues per step", True),
            ("intra-op threads", False),
        )
    }
    for row in rows.sort_values("batch_size", kind="stable").itertuples():
        median, low, high = (
            row.seconds_per_step * 1e6,
            row.seconds_per_step_min * 1e6,
            row.seconds_per_step_max * 1e6,
        )
        speedup = base.get(row.batch_size, math.nan) / row.seconds_per_step
        cells = [
            str(row.batch_size),
            row.contender,
            round_to_noise(median, (high - low) / 2),
            round_range(low, high, median, (high - low) / 2),
            _fixed_cost(row.seconds_per_fit_overhead),
            format_speedup(speedup) if row.seconds_per_step > 0 else "n/a",
            _number(row.peak_memory_mb, ".1f"),
            _number(row.final_train_loss),
            _number(row.validation_loss),
            _number(row.validation_score, ".3g"),
            _number(row.runs_per_step, ".3g"),
            _number(row.ortvalues_per_step, ".3g"),
            _threads(row.intra_op_threads),
        ]
        for (_, values), cell in zip(columns.values(), cells):
            values.append(cell)
    shown = {name: v for name, v in columns.items() if any(v[1])}
    return Table(
        list(shown),
        [numeric for numeric, _ in shown.values()],
        [list(cells) for cells in zip(*(values for _, values in shown.values()))],
    )


def _method(first: pd.Series, baselines: list[str]) -> str:
    return (
        f"Time per training step: median over {plural(first['repeat'], 'round')} of the slope "
        f"between a {SHORT_EPOCHS}-epoch fit and a longer one, at least "
        f"{plural(first['epochs'], 'epoch')} and {format_seconds(MIN_EXTRA_SECONDS)} longer "
        "(the timing column of results.csv gives each cell's lengths; the time a fit pays "
        "once cancels out and is shown apart as fixed cost per fit), after a first fit of "
        f"{plural(first['epochs'], 'epoch')} that built the model and gave the losses and "
        "the validation score; the timed fits of the contenders of one batch size take "
        "turns, and every timed epoch holds at least 8 full batches; a batch size whose "
        "rounds left a cell without a measurement was timed again once with longer fits, "
        "its cells keeping the second rounds. The fixed cost per fit is the short fit's "
        "time beyond its steps at the round's slope, median over the rounds; an estimate "
        f'below 0, where the noise of the fits outweighed it, reads "{NEGATIVE_FIXED_COST}" '
        "(results.csv keeps the estimate). Times are rounded to half the spread between "
        "their min and max, and their min and max to the same digits. "
        "Speed-up: the baseline's time per step over the "
        "contender's, at the same batch size (the baseline: the one the run named, else "
        f"{BASELINE} where it ran, else the first of the engine's contenders; here "
        f"{', '.join(baselines) or 'none ran'}). Sections go by data set, device and model "
        "size (trained values)."
    )


def run_plots(folder: str | Path, results: pd.DataFrame) -> list[Plot]:
    """The plots of a run folder worth showing, in reading order, with their captions:
    the scaling plot only when the run has two model sizes or more."""
    folder = Path(folder)
    captions = dict(PLOT_CAPTIONS)
    if has_model_sizes(results):
        captions[SCALING_PNG] = SCALING_CAPTION
    return [Plot(name, text) for name, text in captions.items() if (folder / name).exists()]


def kernel_lines(results: pd.DataFrame) -> list[str]:
    """The BLAS/OpenMP libraries the run loaded (its last row's: every contender's library
    loaded by then), and one line naming each variable that held a library's kernels below
    the CPU's, when one did; nothing for results written before these columns."""
    last = results.iloc[-1]
    lines = []
    if isinstance(last.get("kernels"), str) and last["kernels"]:
        lines.append(f"Kernels (threadpoolctl): {last['kernels']}.")
    if isinstance(last.get("kernel_pins"), str) and last["kernel_pins"]:
        lines.append(
            f"Not the native kernels: {last['kernel_pins']} pins them (docs/benchmarks.md "
            "says how to time the native ones)."
        )
    return lines


def _not_run_table(results: pd.DataFrame, unreached: list[dict], why: str) -> Table | None:
    """The cells without a measurement: the rows not ``ok``, then the planned cells the
    run never reached (their status ``not run``, then ``why``)."""
    other = results[results.status != "ok"]
    if other.empty and not unreached:
        return None
    rows = [
        [r.contender, r.problem, r.dataset, str(r.batch_size), r.device, r.status]
        for r in other.itertuples()
    ]
    rows += [
        [c["contender"], c["problem"], c["dataset"], str(c["batch_size"]), c["device"], why]
        for c in unreached
    ]
    return Table(list(NOT_RUN_COLUMNS), [False, False, False, True, False, False], rows)


def _stopped(interrupted: bool, not_run: int, plan: RunPlan | None) -> str:
    """The lead's first sentence on a run that did not finish (``not_run``: its cells
    interrupted or never reached); "" for one that did."""
    if not interrupted and not not_run:
        return ""
    if plan is None:
        return f"Interrupted: the cells it did not finish are under {NOT_MEASURED_TITLE}. "
    what = "Interrupted" if interrupted else "Incomplete"
    return (
        f"{what}: {not_run} of the {plural(len(plan.cells), 'planned cell')} were not "
        f"run (see {NOT_MEASURED_TITLE}). "
    )


def bench_summary(
    results: pd.DataFrame, plots: list[Plot] | None = None, plan: RunPlan | None = None
) -> BenchSummary:
    """What a bench run found, from its results table.

    Parameters
    ----------
    results : DataFrame
        ``results.csv`` of one run (its bad rows in ``attrs['bad_rows']``, as
        :func:`ortbench.bench.store.read_results` reads it).
    plots : list of Plot, optional
        The plots shown after the tables (see :func:`run_plots`).
    plan : RunPlan, optional
        The run's plan: its planned cells without a row are listed as not run, and the
        title and lead say when a signal stopped the run.

    Returns
    -------
    BenchSummary
    """
    first = results.iloc[0]
    ok = results[results.status == "ok"]
    if "trained_values" in ok:
        ok = ok.sort_values(["dataset", "device", "trained_values"], kind="stable")
    groups = list(ok.groupby(["problem", "dataset", "device"], sort=False))
    sections = [
        Section(_title(*key, rows), conclusion(rows), _section_table(rows)) for key, rows in groups
    ]
    baselines = list(dict.fromkeys(b for _, rows in groups if (b := group_baseline(rows))))
    against = baselines[0] if len(baselines) == 1 else "each section's baseline"
    bad_rows = results.attrs.get("bad_rows", [])
    unreached = [] if plan is None else plan.unreached(results.to_dict("records"), bad_rows)
    cut = int((results.status == INTERRUPTED).sum())
    # a signal after the last cell (while the run wrote its files) left nothing unmeasured
    interrupted = cut > 0 or (plan is not None and plan.interrupted and bool(unreached))
    why = f"{NOT_RUN}: {INTERRUPTED}" if interrupted else NOT_RUN
    machine = (
        f"Machine: {first.cpu_model}, {plural(first.cpu_cores, 'core')}, "
        f"{plural(first.cpu_threads, 'thread')} "
        f"({first.platform}). Python {first.python_version}, onnxruntime "
        f"{first.onnxruntime_version}, scikit-learn {first.sklearn_version}, numpy "
        f"{first.numpy_version}, torch {first.torch_version}."
    )
    machine = "\n\n".join([machine, *_machines_line(results), *kernel_lines(results)])
    return BenchSummary(
        title=f"ortbench bench: run {first.run_id}{' (interrupted)' if interrupted else ''}",
        lead=_stopped(interrupted, cut + len(unreached), plan)
        + (
            "Time per training step of each contender, median of "
            f"{plural(first['repeat'], 'timed round')}, and its speed-up over {against} at "
            "the same batch size."
            if sections
            else "No cell finished."
        ),
        sections=sections,
        not_run=_not_run_table(results, unreached, why),
        plots=plots or [],
        method=_method(first, baselines),
        machine=machine,
        interrupted=interrupted,
        bad_rows=[str(row) for row in bad_rows],
    )


def _markdown_table(table: Table) -> list[str]:
    rule = "|".join("---:" if numeric else "---" for numeric in table.numeric)
    return [
        "| " + " | ".join(table.headers) + " |",
        f"|{rule}|",
        *("| " + " | ".join(escape_cell(c) for c in row) + " |" for row in table.rows),
    ]


def summary_markdown(
    results: pd.DataFrame, plots: list[Plot] | None = None, plan: RunPlan | None = None
) -> str:
    """``summary.md``: :func:`bench_summary` as markdown, in the page's order."""
    if results.empty:
        return "# ortbench bench\n\nNo cell finished.\n"
    summary = bench_summary(results, plots, plan)
    lines = [f"# {summary.title}", "", summary.lead]
    if summary.sections:
        lines.append("")
        lines += [f"- **{s.title}**: {s.conclusion}." for s in summary.sections]
    for section in summary.sections:
        lines += ["", f"## {section.title}", "", *_markdown_table(section.table)]
    if summary.not_run:
        lines += ["", f"## {NOT_MEASURED_TITLE}", "", *_markdown_table(summary.not_run)]
    if summary.bad_rows:
        lines += ["", f"## {BAD_ROWS_TITLE}", "", *(f"- {row}" for row in summary.bad_rows)]
    if summary.plots:
        lines += ["", "## Plots"]
        for plot in summary.plots:
            lines += ["", f"![{plot.file}]({plot.file})", "", plot.caption]
    lines += [
        "",
        f"<details><summary>{METHOD_TITLE}</summary>",
        "",
        summary.method,
        "",
        summary.machine,
        "",
        "</details>",
    ]
    return "\n".join(lines) + "\n"


def write_summary(run: str | Path | ResultSet) -> str:
    """Write ``summary.md`` into a run folder from its results; return its text.

    Parameters
    ----------
    run : str, Path or ResultSet
        A run folder of ``ortbench bench``, or its result set (read once for all reports).

    Returns
    -------
    str
        The summary.

    Raises
    ------
    OrtBenchError
        When the folder holds no ``results.csv``, or a malformed one.
    """
    run = load_result_set(run, measurements=False)
    if run.table is None:
        raise OrtBenchError(
            f"{run.folder} holds no {RESULTS_CSV}: not an ortbench bench run folder"
        )
    text = summary_markdown(run.table, run_plots(run.folder, run.table), run.plan)
    (run.folder / SUMMARY_MD).write_text(text, encoding="utf-8")
    return text
