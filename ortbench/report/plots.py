"""PNG plots of a run: loss curves, time per step against batch size, speed-ups.

Every contender keeps one color, marker and line style in every panel; markers are hollow
and of different shapes, so curves that coincide (contenders that follow the same
trajectory) stay visible, and the loss-curve legend says which ones coincide. Legends sit
outside the axes; batch sizes are the ticks themselves.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

from ..schema import CONTENDER_NAMES
from .baselines import baseline_times, group_baseline
from .resultsets import ResultSet, load_result_set

GROUP = ["problem", "dataset", "device"]
_MARKERS = "osD^vPX<>*"
_LINES = ("-", "--", "-.", ":")


def style(name: str) -> dict:
    """One color, marker and line style per contender, the same in every panel; a name
    ortbench does not know (a row of an older or edited results file) gets one chosen from
    its name, the same in every plot."""
    k = CONTENDER_NAMES.index(name) if name in CONTENDER_NAMES else zlib.crc32(name.encode())
    return {
        "color": f"C{k % 10}",
        "marker": _MARKERS[k % len(_MARKERS)],
        "linestyle": _LINES[k % len(_LINES)],
        "markerfacecolor": "none",
        "markersize": 7,
        "linewidth": 1.6,
    }


#: Curves closer than this (relative, at every epoch) are said to coincide.
COINCIDE = 1e-3
DPI = 110
LOSS_CURVES_PNG, SECONDS_PER_STEP_PNG, SPEEDUP_PNG = (
    "loss_curves.png",
    "seconds_per_step.png",
    "speedup.png",
)
#: Each plot of :func:`write_plots` and the sentence that says what to look at in it.
PLOT_CAPTIONS = {
    LOSS_CURVES_PNG: "Training loss after each epoch: contenders that train the same model "
    "the same way follow one curve (the legend names those that coincide), so a curve "
    "apart from its twins is a different optimizer or a bug.",
    SECONDS_PER_STEP_PNG: "Time per step against batch size, both on log scales: the lowest "
    "line is the fastest contender, and a line that climbs faster than the others pays "
    "more for each extra sample.",
    SPEEDUP_PNG: "Speed-up over the baseline (named on each panel's axis) against batch "
    "size: above the dotted line at 1 a contender is faster than it; where lines cross, "
    "the best choice depends on the batch size.",
}
#: Width of a whole figure in inches: at DPI, about the page's width.
WIDTH = 12


def _title(key: tuple) -> str:
    problem, dataset, device = key
    return f"{problem} on {dataset}, {device}"


def _plain(value: float, _position=None) -> str:
    """A tick label without exponents: 15, 256, 0.5, 1.2e-05 only when unavoidable."""
    return f"{value:g}"


def log_axis_labels(axis) -> None:
    """Plain labels on a log axis: its decades, and within a view of less than one decade
    (no decade tick shown) its minor ticks too: 2, 3 and 5 times a power of ten, every one
    where the view spans less than 3x."""

    def minor(value: float, _position=None) -> str:
        low, high = sorted(axis.get_view_interval())
        if low <= 0 or high / low >= 10:
            return ""
        mantissa = round(value / 10 ** math.floor(math.log10(value) + 1e-9))
        return _plain(value) if high / low < 3 or mantissa in (2, 3, 5) else ""

    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(FuncFormatter(minor))


def coinciding(curves: dict[str, np.ndarray]) -> dict[str, str]:
    """For each curve equal to an earlier one (within :data:`COINCIDE`), that earlier one.

    Parameters
    ----------
    curves : dict
        Contender -> loss per epoch, in legend order.

    Returns
    -------
    dict
        Contender -> the first contender whose curve it coincides with.
    """
    same: dict[str, str] = {}
    names = list(curves)
    for k, name in enumerate(names):
        for other in names[:k]:
            a, b = curves[name], curves[other]
            if other not in same and len(a) == len(b) and np.allclose(a, b, rtol=COINCIDE):
                same[name] = other
                break
    return same


def _loss_curves(results: pd.DataFrame, curves: pd.DataFrame, path: Path) -> None:
    groups = list(results.groupby(GROUP, sort=False))
    batch_sizes = sorted(results.batch_size.unique())
    columns = min(len(batch_sizes), 3)
    rows = len(groups) * -(-len(batch_sizes) // columns)
    fig = Figure(figsize=(WIDTH, 3.6 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    labels: dict[str, object] = {}
    notes: dict[str, str] = {}
    panel = 0
    for key, _ in groups:
        mask = (curves[GROUP] == pd.Series(key, index=GROUP)).all(axis=1)
        for batch_size in batch_sizes:
            ax = axes[panel]
            panel += 1
            cell = curves[mask & (curves.batch_size == batch_size)]
            by_contender = {
                c: curve.sort_values("epoch") for c, curve in cell.groupby("contender", sort=False)
            }
            same = coinciding({c: v.loss.to_numpy() for c, v in by_contender.items()})
            notes.update({c: f"{c} (= {o})" for c, o in same.items()})
            for contender, curve in by_contender.items():
                (line,) = ax.plot(curve.epoch, curve.loss, **style(contender))
                labels.setdefault(contender, line)
            ax.set_title(f"{_title(key)}, batch size {batch_size}", fontsize=10)
            ax.set_xlabel("epoch")
            last = int(cell.epoch.max()) if len(cell) else 1
            ax.xaxis.set_major_locator(
                FixedLocator(range(1, last + 1)) if last <= 12 else MaxNLocator(integer=True)
            )
            ax.set_xlim(0.5, last + 0.5)
            ax.set_ylabel("training loss")
            ax.grid(alpha=0.3)
    for ax in axes[panel:]:
        ax.set_visible(False)
    fig.legend(
        labels.values(),
        [notes.get(c, c) for c in labels],
        loc="outside lower center",
        ncols=min(len(labels), 4),
        title="coinciding curves: (= the contender they overlap)" if notes else None,
        fontsize=9,
    )
    fig.savefig(path, dpi=DPI)


def _by_batch_size(results: pd.DataFrame, path: Path, speedup: bool) -> None:
    groups = list(results.groupby(GROUP, sort=False))
    columns = min(len(groups), 2)
    rows = -(-len(groups) // columns)
    fig = Figure(figsize=(WIDTH, 3.8 * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    labels: dict[str, object] = {}
    for ax, (key, group) in zip(axes, groups):
        against = group_baseline(group)
        baseline = baseline_times(group, against)
        if speedup and baseline.isna().all():
            ax.set_title(f"{_title(key)}: no baseline ran", fontsize=10)
            ax.set_axis_off()
            continue
        for contender, points in group.groupby("contender", sort=False):
            points = points.sort_values("batch_size")
            if speedup:
                values = baseline.reindex(points.batch_size).to_numpy() / points.seconds_per_step
            else:
                values = points.seconds_per_step * 1e6
            (line,) = ax.plot(points.batch_size, values, **style(contender))
            labels.setdefault(contender, line)
        ax.set_xscale("log")
        sizes = sorted(group.batch_size.unique())
        ax.xaxis.set_major_locator(FixedLocator(sizes))
        ax.xaxis.set_major_formatter(FuncFormatter(_plain))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("batch size")
        if speedup:
            ax.axhline(1.0, color="0.4", linewidth=1, linestyle=":")
            ax.set_ylim(bottom=0)
            ax.set_ylabel(f"speed-up over {against} (x, higher is faster)")
        else:
            ax.set_yscale("log")
            log_axis_labels(ax.yaxis)
            ax.set_ylabel("µs per step (log scale, lower is faster)")
        ax.set_title(_title(key), fontsize=10)
        ax.grid(alpha=0.3, which="both")
    for ax in axes[len(groups) :]:
        ax.set_visible(False)
    fig.legend(labels.values(), labels.keys(), loc="outside right upper", fontsize=9, frameon=False)
    fig.savefig(path, dpi=DPI)


def write_plots(run: str | Path | ResultSet) -> list[Path]:
    """Write the run's plots into its folder.

    Parameters
    ----------
    run : str, Path or ResultSet
        A run folder of ``ortbench bench``, or its result set (read once for all reports).

    Returns
    -------
    list of Path
        The plots' paths (none if nothing ran).
    """
    run = load_result_set(run, measurements=False)
    results = run.table
    if results is None or (results := results[results.status == "ok"]).empty:
        return []
    paths = [run.folder / name for name in PLOT_CAPTIONS]
    _loss_curves(results, run.loss_curves, paths[0])
    _by_batch_size(results, paths[1], speedup=False)
    _by_batch_size(results, paths[2], speedup=True)
    return paths
