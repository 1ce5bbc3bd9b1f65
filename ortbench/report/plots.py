"""PNG plots of a run: loss curves, time per step against batch size, speed-ups."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..bench.contenders import BASELINE, CONTENDERS
from ..bench.store import read_loss_curves, read_results

GROUP = ["problem", "dataset", "device"]
#: One color per contender, the same in every panel.
COLORS = {name: f"C{k}" for k, name in enumerate(CONTENDERS)}


def _title(key: tuple) -> str:
    problem, dataset, device = key
    return f"{problem} on {dataset}, {device}"


def _loss_curves(results: pd.DataFrame, curves: pd.DataFrame, path: Path) -> None:
    groups = list(results.groupby(GROUP, sort=False))
    batch_sizes = sorted(results.batch_size.unique())
    fig = Figure(figsize=(3.2 * len(batch_sizes), 2.8 * len(groups) + 0.6), layout="constrained")
    axes = fig.subplots(len(groups), len(batch_sizes), squeeze=False)
    for i, (key, _) in enumerate(groups):
        for j, batch_size in enumerate(batch_sizes):
            ax = axes[i][j]
            mask = (curves[GROUP] == pd.Series(key, index=GROUP)).all(axis=1)
            cell = curves[mask & (curves.batch_size == batch_size)]
            for contender, curve in cell.groupby("contender", sort=False):
                ax.plot(
                    curve.epoch, curve.loss, marker="o", label=contender, color=COLORS[contender]
                )
            ax.set_title(f"{_title(key)}\nbatch {batch_size}", fontsize=8)
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("training loss")
    labels = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            labels.setdefault(label, handle)
    fig.legend(labels.values(), labels.keys(), loc="outside lower center", ncols=len(labels))
    fig.savefig(path, dpi=100)


def _by_batch_size(results: pd.DataFrame, path: Path, speedup: bool) -> None:
    groups = list(results.groupby(GROUP, sort=False))
    fig = Figure(figsize=(5 * len(groups), 4))
    axes = fig.subplots(1, len(groups), squeeze=False)
    for ax, (key, rows) in zip(axes[0], groups):
        baseline = rows[rows.contender == BASELINE].set_index("batch_size").seconds_per_step
        if speedup and baseline.empty:
            ax.set_title(f"{_title(key)}: {BASELINE} did not run", fontsize=9)
            continue
        for contender, points in rows.groupby("contender", sort=False):
            points = points.sort_values("batch_size")
            if speedup:
                values = baseline.reindex(points.batch_size).to_numpy() / points.seconds_per_step
            else:
                values = points.seconds_per_step
            ax.plot(points.batch_size, values, marker="o", label=contender, color=COLORS[contender])
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(_title(key), fontsize=9)
        ax.set_xlabel("batch size")
        ax.set_ylabel(f"speed-up over {BASELINE}" if speedup else "seconds per step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def write_plots(folder: str | Path) -> list[Path]:
    """Write the run's plots into its folder; return their paths (none if nothing ran)."""
    folder = Path(folder)
    results = read_results(folder)
    results = results[results.status == "ok"]
    if results.empty:
        return []
    paths = [folder / "loss_curves.png", folder / "seconds_per_step.png", folder / "speedup.png"]
    _loss_curves(results, read_loss_curves(folder), paths[0])
    _by_batch_size(results, paths[1], speedup=False)
    _by_batch_size(results, paths[2], speedup=True)
    return paths
