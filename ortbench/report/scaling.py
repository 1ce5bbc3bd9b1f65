"""``scaling.png``: how a step's time grows with the batch and with the model.

For each data set and device that ran two model sizes or more, one panel per contender
shows time per step against batch size, one line per model size; a last panel shows time
per step against trained values (the model's size) at one batch size, one line per
contender. A run of one model size gets no such plot: the batch-size plot says it all.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter, ScalarFormatter

from ..schema import CONTENDER_NAMES
from .plots import DPI, WIDTH, log_axis_labels, style
from .resultsets import ResultSet, load_result_set

SCALING_PNG = "scaling.png"
SCALING_CAPTION = (
    "Time per step of each contender, one line per model size, and of every contender "
    "against the model's size at one batch size (last panel of each row): the gap between "
    "two lines is what the bigger model costs, and the steepest line in the last panel is "
    "the contender that copes worst with a bigger model."
)
#: Panels per row of the figure, at most.
COLUMNS = 5


def fixed_batch_size(rows: pd.DataFrame) -> int:
    """The batch size the size panel compares at: the one most model sizes ran, the
    largest of those."""
    sizes = rows.groupby("batch_size").problem.nunique()
    return int(sizes[sizes == sizes.max()].index.max())


def _with_sizes(results: pd.DataFrame) -> pd.DataFrame:
    """The finished cells of the data sets and devices that ran two model sizes or more."""
    if "trained_values" not in results:
        return results.iloc[:0]
    # a slope can come out negative on a loaded machine: nothing to draw on a log scale
    ok = results[(results.status == "ok") & (results.seconds_per_step > 0)]
    sizes = ok.groupby(["dataset", "device"]).trained_values.transform("nunique")
    return ok[sizes >= 2]


def has_model_sizes(results: pd.DataFrame) -> bool:
    """True when some data set and device of the run ran two model sizes or more."""
    return not _with_sizes(results).empty


def _size_label(problem: str, values: float) -> str:
    return f"{problem} ({int(values):,})"


def _by_batch(ax, rows: pd.DataFrame, contender: str, colors: dict) -> None:
    for (problem, values), points in rows.groupby(["problem", "trained_values"], sort=False):
        points = points.sort_values("batch_size")
        ax.plot(
            points.batch_size,
            points.seconds_per_step * 1e6,
            marker="o",
            color=colors[problem],
            label=_size_label(problem, values),
        )
    ax.set_title(contender, fontsize=10)
    ax.set_xlabel("batch size")
    ax.set_ylabel("µs per step")


def _by_size(ax, rows: pd.DataFrame, batch_size: int) -> None:
    at = rows[rows.batch_size == batch_size]
    for contender, points in at.groupby("contender", sort=False):
        points = points.sort_values("trained_values")
        ax.plot(
            points.trained_values,
            points.seconds_per_step * 1e6,
            marker="o",
            label=contender,
            color=style(contender)["color"],
        )
    ax.set_title(f"all at batch size {batch_size}", fontsize=10)
    ax.set_xlabel("trained values")
    ax.set_ylabel("µs per step")


def write_scaling_plot(run: str | Path | ResultSet) -> list[Path]:
    """Write ``scaling.png`` into a run folder from its results.

    Parameters
    ----------
    run : str, Path or ResultSet
        A run folder of ``ortbench bench``, or its result set (read once for all reports).

    Returns
    -------
    list of Path
        The plot's path, or nothing when no data set ran two model sizes (or the results
        predate the ``trained_values`` column).
    """
    run = load_result_set(run, measurements=False)
    if run.table is None or (ok := _with_sizes(run.table)).empty:
        return []
    order = {name: k for k, name in enumerate(CONTENDER_NAMES)}
    groups = list(ok.groupby(["dataset", "device"], sort=True))
    layout = []  # (group key, rows, panels) with panels = contenders + the size panel
    for key, rows in groups:
        contenders = sorted(rows.contender.unique(), key=lambda c: order.get(c, len(order)))
        layout.append((key, rows, contenders))
    columns = min(COLUMNS, max(len(c) + 1 for _, _, c in layout))
    n_rows = sum(math.ceil((len(c) + 1) / columns) for _, _, c in layout)
    fig = Figure(figsize=(WIDTH, 3.2 * n_rows + 0.2), layout="constrained")
    grid = fig.add_gridspec(n_rows, columns)
    line = 0
    legends: tuple[dict, dict] = ({}, {})  # model sizes, contenders
    for (dataset, device), rows, contenders in layout:
        sizes = rows.drop_duplicates("problem").sort_values("trained_values")
        palette = colormaps["viridis"](np.linspace(0, 0.9, max(len(sizes), 1)))
        colors = dict(zip(sizes.problem, palette))
        for k, contender in enumerate([*contenders, None]):
            ax = fig.add_subplot(grid[line + k // columns, k % columns])
            if contender is None:
                _by_size(ax, rows, fixed_batch_size(rows))
            else:
                _by_batch(ax, rows[rows.contender == contender], contender, colors)
                if k == 0:
                    ax.set_ylabel(f"{dataset}, {device}\nµs per step")
            for handle, label in zip(*ax.get_legend_handles_labels()):
                legends[contender is None].setdefault(label, handle)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            log_axis_labels(ax.yaxis)
            if contender is None:  # the model sizes as ticks, written out
                ax.set_xticks(sorted(rows.trained_values.unique()))
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
            else:
                ax.set_xticks(sorted(rows.batch_size.unique()))
                ax.xaxis.set_major_formatter(ScalarFormatter())
        line += math.ceil((len(contenders) + 1) / columns)
    for where, title, labels in (
        ("outside lower left", "model size (trained values)", legends[0]),
        ("outside lower right", "contender (last panel)", legends[1]),
    ):
        fig.legend(
            labels.values(), labels.keys(), loc=where, ncols=min(len(labels), 3), title=title,
            fontsize=9, title_fontsize=9,
        )  # fmt: skip
    path = run.folder / SCALING_PNG
    fig.savefig(path, dpi=DPI)
    return [path]
