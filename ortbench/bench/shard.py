"""One matrix spread over several machines: ``--shard I/N`` runs the I-th of N parts.

The split keeps each group (the cells of one problem, data set, device and batch size,
whose timed fits are interleaved) whole and gives the N parts roughly equal expected
time: each group weighs its cells' times in a previous run when one is given
(:func:`expected_seconds`), else its number of cells. Groups go, heaviest first, to the
part with the least weight so far (ties: the earlier group, the lower part), and each
part runs its groups in the matrix's order. The split depends on nothing but the matrix
and those weights, so every machine computes the same one.

A shard's run folder holds ``shard.json`` (:func:`write_shard`): the command, the matrix,
the shard, its cells, the ortbench version and the machine. ``ortbench merge`` reads it
(:mod:`.merge`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import ortbench

from ..training import OrtBenchError
from .machine import machine
from .matrix import BenchConfig, Cell, cells
from .store import KEYS, read_records
from .timing import fit_lengths

SHARD_JSON = "shard.json"
#: What ``shard.json`` holds.
_FIELDS = ("command", "shard", "ortbench_version", "matrix", "settings", "machine", "cells")


@dataclass(frozen=True)
class Shard:
    """The ``index``-th (from 1) of ``count`` parts of a matrix."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``I/N`` as a :class:`Shard`.

    Raises
    ------
    ValueError
        When ``text`` is not two integers with 1 <= I <= N.
    """
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not match:
        raise ValueError(f"expected I/N (the I-th of N shards, as 2/3), got {text!r}")
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise ValueError(f"shard {text!r}: I must be between 1 and N")
    return Shard(index, count)


def groups(todo: Sequence[Cell]) -> list[list[Cell]]:
    """The cells in their groups (same problem, data set, device and batch size), in order."""
    return [
        list(group)
        for _, group in itertools.groupby(
            todo, key=lambda c: (c.problem, c.dataset, c.device, c.batch_size)
        )
    ]


def _record_seconds(record: dict) -> float | None:
    """A finished row's expected wall time: its first fit and its rounds of a short and a
    long timed fit (lengths from its ``timing`` column: two sets of rounds when they were
    timed again), each paying the fixed cost."""
    per_step, overhead = record.get("seconds_per_step"), record.get("seconds_per_fit_overhead")
    lengths = fit_lengths(str(record.get("timing", "")))
    if record.get("status") != "ok" or per_step is None or lengths is None:
        return None
    steps_per_epoch = record["steps"] / record["epochs"]
    epochs = record["epochs"] + record["repeat"] * sum(s + t for s, t in lengths)
    fits = 1 + 2 * record["repeat"] * len(lengths)
    return max(per_step, 0.0) * steps_per_epoch * epochs + max(overhead or 0.0, 0.0) * fits


def expected_seconds(folder: str | Path) -> dict[Cell, float]:
    """Each cell's expected time from a previous run folder of ``bench`` or ``ab`` (both
    sides summed); a cell that did not finish there is expected to take the median.

    Raises
    ------
    OrtBenchError
        When the folder holds no results.
    """
    seconds: dict[Cell, float] = {}
    unfinished = set()
    for record in read_records(folder):
        cell = Cell(*(record[k] for k in KEYS))
        time = _record_seconds(record)
        if time is None:
            unfinished.add(cell)
        else:
            seconds[cell] = seconds.get(cell, 0.0) + time
    if not seconds:
        raise OrtBenchError(f"{folder} holds no finished cell to take timings from")
    median = statistics.median(seconds.values())
    return seconds | {cell: median for cell in unfinished - set(seconds)}


def split(
    todo: Sequence[Cell], count: int, seconds: dict[Cell, float] | None = None
) -> list[list[Cell]]:
    """``todo`` in ``count`` parts of whole groups and roughly equal expected time.

    Parameters
    ----------
    todo : sequence of Cell
        The matrix's cells in its order (:func:`~.matrix.cells`).
    count : int
        How many parts.
    seconds : dict, optional
        Expected time per cell; a cell it lacks weighs the median of those it has. Without
        it every cell weighs 1.

    Returns
    -------
    list of list of Cell
        ``count`` parts, each in the matrix's order; some are empty when there are fewer
        groups than parts.
    """
    known = [seconds[c] for c in todo if seconds and c in seconds]
    default = statistics.median(known) if known else 1.0
    weigh = (lambda c: seconds.get(c, default)) if seconds else (lambda c: 1.0)
    parts = groups(todo)
    weights = [sum(weigh(c) for c in group) for group in parts]
    loads, members = [0.0] * count, [[] for _ in range(count)]
    for g in sorted(range(len(parts)), key=lambda g: (-weights[g], g)):
        k = min(range(count), key=lambda k: (loads[k], k))
        loads[k] += weights[g]
        members[k].append(g)
    return [[cell for g in sorted(gs) for cell in parts[g]] for gs in members]


def shard_cells(config: BenchConfig, shard: Shard, timings: str | Path | None = None) -> list[Cell]:
    """The cells of ``shard`` of the matrix, weighted by the run folder ``timings`` if given."""
    seconds = expected_seconds(timings) if timings is not None else None
    return split(cells(config), shard.count, seconds)[shard.index - 1]


def matrix_json(config: BenchConfig) -> dict:
    """The matrix as JSON values: equal for two runs of the same matrix."""
    return json.loads(json.dumps(dataclasses.asdict(config)))


def write_shard(
    folder: Path,
    command: str,
    config: BenchConfig,
    shard: Shard,
    todo: list[Cell],
    settings: dict | None = None,
) -> None:
    """Write ``shard.json``: what ``ortbench merge`` checks before it merges the folder.

    Parameters
    ----------
    folder : Path
        The shard's run folder.
    command : str
        ``bench`` or ``ab``.
    config : BenchConfig
        The whole matrix.
    shard : Shard
        Which part this run holds.
    todo : list of Cell
        The cells of this part.
    settings : dict, optional
        What else decides the report (``ab``'s ``threshold`` and ``warn``).
    """
    info = {
        "command": command,
        "shard": str(shard),
        "ortbench_version": ortbench.__version__,
        "matrix": matrix_json(config),
        "settings": settings or {},
        "machine": machine(),
        "cells": [[getattr(cell, k) for k in KEYS] for cell in todo],
    }
    (folder / SHARD_JSON).write_text(json.dumps(info, indent=1), encoding="utf-8")


def read_shard(folder: Path) -> dict:
    """A shard folder's ``shard.json``, its cells as :class:`~.matrix.Cell`.

    Raises
    ------
    OrtBenchError
        When the folder holds none, or a malformed one.
    """
    path = folder / SHARD_JSON
    if not path.is_file():
        raise OrtBenchError(
            f"{folder} is not a shard's run folder (no {SHARD_JSON}): give folders that "
            "ortbench bench or ab wrote with --shard I/N"
        )
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        missing = sorted(set(_FIELDS) - set(info))
        if missing or info["command"] not in ("bench", "ab"):
            raise ValueError(f"no {', '.join(missing)}" if missing else "unknown command")
        info["shard"] = parse_shard(info["shard"])
        info["cells"] = [Cell(*values) for values in info["cells"]]
        BenchConfig(**info["matrix"])
        return info
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as e:
        raise OrtBenchError(f"{path} is not a shard description: {e}") from None
