"""``summary.md``: per data set and model size, then batch size, each contender's time per
step and speed-up over the run's baseline."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..bench.contenders import BASELINE, CONTENDERS
from ..bench.contenders.base import MIN_EXTRA_SECONDS, SHORT_EPOCHS
from ..bench.store import read_results
from .units import format_seconds
from .verdicts import escape_cell

SUMMARY_MD = "summary.md"


def _number(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.4g}"


def _speedup(baseline: float, seconds: float) -> str:
    if math.isnan(baseline) or math.isnan(seconds) or seconds <= 0:
        return "n/a"
    return f"{baseline / seconds:.2f}x"


def group_baseline(rows: pd.DataFrame) -> str | None:
    """The contender speed-ups are measured against in one group of finished cells: the
    one the run named (``--baseline``), else scikit-learn's MLP where it ran, else the
    first of the engine's contenders that ran; None when none of them ran."""
    named = rows["baseline"].dropna() if "baseline" in rows else pd.Series(dtype=object)
    named = [n for n in named.unique() if n]
    ran = set(rows.contender)
    candidates = [*named, BASELINE, *(c for c in CONTENDERS if c.startswith("ort-"))]
    return next((name for name in candidates if name in ran), None)


def _heading(problem: str, dataset: str, device: str, rows: pd.DataFrame) -> str:
    values = rows["trained_values"].iloc[0] if "trained_values" in rows else math.nan
    size = "" if pd.isna(values) else f" ({int(values):,} trained values)"
    return f"## {problem}{size} on {dataset}, {device}"


def _group_table(rows: pd.DataFrame) -> list[str]:
    baseline_name = group_baseline(rows)
    lines = [
        f"| batch size | contender | time per step | min - max | fixed cost per fit "
        f"| speed-up vs {baseline_name} | final train loss | validation loss |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for batch_size, batch in rows.groupby("batch_size", sort=True):
        base = batch.loc[batch.contender == baseline_name, "seconds_per_step"]
        baseline = float(base.iloc[0]) if len(base) else math.nan
        for row in batch.itertuples():
            spread = (
                f"{format_seconds(row.seconds_per_step_min)} - "
                f"{format_seconds(row.seconds_per_step_max)}"
            )
            lines.append(
                f"| {batch_size} | {row.contender} | {format_seconds(row.seconds_per_step)} "
                f"| {spread} | {format_seconds(row.seconds_per_fit_overhead)} "
                f"| {_speedup(baseline, row.seconds_per_step)} "
                f"| {_number(row.final_train_loss)} | {_number(row.validation_loss)} |"
            )
    return lines


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


def summary_markdown(results: pd.DataFrame) -> str:
    """The markdown summary of a results table."""
    if results.empty:
        return "# ortbench bench\n\nNo cell finished.\n"
    first = results.iloc[0]
    lines = [
        f"# ortbench bench: run {first.run_id}",
        "",
        f"Time per training step: median over {first['repeat']} rounds of the slope between "
        f"a {SHORT_EPOCHS}-epoch fit and a longer one, at least {first['epochs']} epochs and "
        f"{format_seconds(MIN_EXTRA_SECONDS)} longer (the timing column of results.csv gives "
        "each cell's lengths; the time a fit pays once cancels out and is shown apart as "
        "fixed cost per fit), after a first fit of "
        f"{first['epochs']} epochs that built the model and gave the losses; the timed fits "
        "of the contenders of one batch size take turns, and every timed epoch holds at "
        "least 8 full batches. Speed-up: the baseline's time per step over the contender's, "
        "at the same batch size (the baseline: the one the run named, else "
        f"{BASELINE} where it ran, else the first of the engine's contenders). Sections go "
        "by data set, device and model size (trained values).",
        "",
        f"Machine: {first.cpu_model}, {first.cpu_cores} cores, {first.cpu_threads} threads "
        f"({first.platform}). Python {first.python_version}, onnxruntime "
        f"{first.onnxruntime_version}, scikit-learn {first.sklearn_version}, numpy "
        f"{first.numpy_version}, torch {first.torch_version}.",
        *kernel_lines(results),
    ]
    ok = results[results.status == "ok"]
    if "trained_values" in ok:
        ok = ok.sort_values(["dataset", "device", "trained_values"], kind="stable")
    for (problem, dataset, device), rows in ok.groupby(
        ["problem", "dataset", "device"], sort=False
    ):
        lines += ["", _heading(problem, dataset, device, rows), "", *_group_table(rows)]
    other = results[results.status != "ok"]
    if len(other):
        lines += [
            "",
            "## Cells not run",
            "",
            "| contender | problem | dataset | batch size | device | status |",
            "|---|---|---|---:|---|---|",
        ]
        lines += [
            f"| {r.contender} | {r.problem} | {r.dataset} | {r.batch_size} | {r.device} "
            f"| {escape_cell(r.status)} |"
            for r in other.itertuples()
        ]
    return "\n".join(lines) + "\n"


def write_summary(folder: str | Path) -> str:
    """Write ``summary.md`` into a run folder from its results; return its text."""
    text = summary_markdown(read_results(folder))
    (Path(folder) / SUMMARY_MD).write_text(text, encoding="utf-8")
    return text
