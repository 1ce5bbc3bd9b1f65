"""``ortbench merge``: the run folders of one matrix's shards become one run folder.

Before anything is written every shard is checked (:func:`check_shards`): one command,
ortbench version, matrix and report settings, the same BASE and HEAD for ``ab``; each
part of the split given once; every cell of the matrix in exactly one shard, and every
cell of a shard finished there (a shard stopped by Ctrl-C, SIGTERM or an error is
incomplete). Each refusal is one line naming the folders. Shards that ran on different
machines are merged, and the difference is recorded in ``merge.json``.

The merged folder holds the rows of every shard in the matrix's order, under the merged
run's id, as one unsharded run writes them (``results.csv``, ``results.jsonl``,
``loss_curves.csv``), the shards' calibrations one after the other, ``ab.json`` for an
A/B run, and ``merge.json``. Reports are made from it as from any run folder.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..schema import CALIBRATION_JSON, SIDE, SIDES
from ..training import OrtBenchError
from .ab import AB_JSON
from .matrix import BenchConfig, Cell, cells
from .shard import read_shard
from .store import (
    KEYS,
    RESULTS_JSONL,
    SAMPLES,
    ResultsWriter,
    read_calibration,
    read_checked_records,
    read_loss_curves,
)

MERGE_JSON = "merge.json"
#: What must agree between shards, and how a refusal names it.
_SAME = {
    "command": "commands",
    "ortbench_version": "ortbench versions",
    "matrix": "matrices",
    "settings": "report settings",
}


@dataclass
class Merged:
    """What a merge wrote and how to report it."""

    #: ``bench`` or ``ab``
    command: str
    #: the report's settings (``ab``: ``threshold``, ``warn``, ``instructions_threshold``,
    #: ``measure`` and ``max_repeat``)
    settings: dict
    #: shard folder -> machine description, when the shards' machines differ (else empty)
    machines: dict[str, dict]

    def machine_note(self) -> str:
        """One line naming the machines when they differ, else ``""``."""
        if not self.machines:
            return ""
        names = "; ".join(
            f"{folder}: {m['cpu_model']}, {m['cpu_threads']} threads"
            for folder, m in self.machines.items()
        )
        return f"The shards ran on different machines ({names})."


@dataclass
class ShardFolder:
    """A shard's run folder as read: its ``shard.json`` and its rows."""

    folder: Path
    info: dict
    records: list[dict]


def _differs(a: object, b: object) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return f"{key} {a.get(key)!r} against {b.get(key)!r}"
    return f"{a!r} against {b!r}"


def _row_key(record: dict, command: str) -> tuple[Cell, str | None]:
    return Cell(*(record[k] for k in KEYS)), record[SIDE] if command == "ab" else None


def _checked_key(record: dict, command: str, folder: Path) -> tuple[Cell, str | None]:
    try:
        return _row_key(record, command)
    except (KeyError, TypeError):
        raise OrtBenchError(
            f"{folder / RESULTS_JSONL} holds a row without its cell's keys"
        ) from None


def _sides(folder: Path) -> dict:
    path = folder / AB_JSON
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        return {name: (info[name]["label"], info[name]["commit"]) for name in SIDES}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise OrtBenchError(f"{folder} is an ab shard without a readable {AB_JSON}: {e}") from None


def _checked_records(folder: Path, command: str) -> list[dict]:
    """A shard's rows, refused in one line when one of them is bad (see ``check_rows``)."""
    if not (folder / RESULTS_JSONL).exists():
        return []
    keys = [*KEYS, SIDE] if command == "ab" else KEYS
    records, bad = read_checked_records(folder, keys)
    if bad:
        raise OrtBenchError(
            f"{folder / RESULTS_JSONL} has {len(bad)} bad row(s), first {bad[0]}: re-run that shard"
        )
    return records


def check_shards(folders: Sequence[str | Path]) -> list[ShardFolder]:
    """Read and check the shards of one matrix (see the module's description).

    Raises
    ------
    OrtBenchError
        On the first mismatch, overlap, missing cell or incomplete shard.
    """
    shards = []
    for folder in map(Path, folders):
        if not folder.is_dir():
            raise OrtBenchError(f"no run folder at {folder}")
        shards.append(ShardFolder(folder, read_shard(folder), []))
    first = shards[0]
    for shard in shards[1:]:
        for key, what in _SAME.items():
            if shard.info[key] != first.info[key]:
                raise OrtBenchError(
                    f"{first.folder} and {shard.folder} ran different {what} "
                    f"({_differs(first.info[key], shard.info[key])}): merge the shards of one run"
                )
        if shard.info["shard"].count != first.info["shard"].count:
            raise OrtBenchError(
                f"{first.folder} is shard {first.info['shard']} and {shard.folder} shard "
                f"{shard.info['shard']}: merge the shards of one split"
            )
    command = first.info["command"]
    if command == "ab":
        sides = _sides(first.folder)
        for shard in shards[1:]:
            other = _sides(shard.folder)
            for name in SIDES:
                if other[name] != sides[name]:
                    raise OrtBenchError(
                        f"{first.folder} and {shard.folder} timed different {name} sides "
                        f"({_differs(sides[name], other[name])}): merge the shards of one run"
                    )
    for shard in shards:  # the rows, once the shards are known to be of one run
        shard.records.extend(_checked_records(shard.folder, command))
    _check_cells(shards, command)
    return shards


def _check_cells(shards: list[ShardFolder], command: str) -> None:
    """Every cell of the matrix in one shard exactly, and finished there."""
    owner: dict[Cell, Path] = {}
    by_index: dict[int, Path] = {}
    for shard in shards:
        index = shard.info["shard"].index
        if index in by_index:
            raise OrtBenchError(
                f"shard {shard.info['shard']} given twice ({by_index[index]} and "
                f"{shard.folder}): give each shard's folder once"
            )
        by_index[index] = shard.folder
        for cell in shard.info["cells"]:
            if cell in owner:
                raise OrtBenchError(
                    f"cell {cell.label} is in {owner[cell]} and in {shard.folder}: the shards "
                    "overlap (split with different --shard-timings?)"
                )
            owner[cell] = shard.folder
    every = cells_of(shards[0].info["matrix"])
    missing = [cell for cell in every if cell not in owner]
    if missing:
        count = shards[0].info["shard"].count
        absent = [str(k) for k in range(1, count + 1) if k not in by_index]
        which = f"shards {', '.join(absent)} of {count}" if absent else "no shard"
        raise OrtBenchError(
            f"{len(missing)} cells of the matrix are in no shard given ({missing[0].label}, "
            f"...): {which} missing; give every shard's folder"
        )
    sides = SIDES if command == "ab" else (None,)
    for shard in shards:
        expected = {(cell, side) for cell in shard.info["cells"] for side in sides}
        seen = set()
        for record in shard.records:
            key = _checked_key(record, command, shard.folder)
            if key not in expected:
                raise OrtBenchError(
                    f"{shard.folder} holds a row of {key[0].label}, not a cell of its shard "
                    f"{shard.info['shard']}"
                )
            if key in seen:
                raise OrtBenchError(f"{shard.folder} holds {key[0].label} twice")
            if record["status"] != "interrupted":
                seen.add(key)
        unfinished = {cell for cell, _ in expected - seen}
        if unfinished:
            raise OrtBenchError(
                f"{shard.folder} (shard {shard.info['shard']}) is incomplete: "
                f"{len(unfinished)} of {len(shard.info['cells'])} cells did not finish "
                "(interrupted or stopped); run that shard again"
            )


def _curves(folder: Path, keys: list[str]) -> dict[tuple[str, ...], list[float]]:
    curves: dict[tuple[str, ...], list[float]] = {}
    table = read_loss_curves(folder)
    if table.empty:
        return curves
    for key, rows in table.groupby(keys, sort=False):
        curves[tuple(map(str, key))] = rows.sort_values("epoch")["loss"].tolist()
    return curves


def merge_runs(folders: Sequence[str | Path], out: Path) -> Merged:
    """Check the shards and write their merged run folder.

    Parameters
    ----------
    folders : sequence of str or Path
        The run folders of every shard of one ``bench`` or ``ab`` run, in any order.
    out : Path
        The merged run folder (created, empty); its name becomes the rows' ``run_id``.

    Returns
    -------
    Merged
        The command, its report settings and any difference of machines.

    Raises
    ------
    OrtBenchError
        When the shards do not make one whole run (nothing is written then), or a file
        cannot be written.
    """
    shards = check_shards(folders)
    first = shards[0].info
    command = first["command"]
    keys = [*KEYS, SIDE] if command == "ab" else KEYS
    writer = ResultsWriter(out, keys=keys)
    order = {cell: k for k, cell in enumerate(cells_of(first["matrix"]))}
    rows = []
    for shard in shards:
        curves = _curves(shard.folder, keys)
        for record in shard.records:
            curve = curves.get(tuple(str(record[k]) for k in keys), [])
            cell, side = _row_key(record, command)
            rows.append((order[cell], SIDES.index(side) if side else 0, record, curve))
    columns = set(writer.columns) | {SAMPLES}
    for *_, record, curve in sorted(rows, key=lambda r: r[:2]):
        row = {c: math.nan if record[c] is None else record[c] for c in writer.columns}
        row["run_id"] = out.name
        details = {k: v for k, v in record.items() if k not in columns}
        writer.append(row, record.get(SAMPLES) or [], curve, **details)
    calibration: dict[str, list[float]] = {}
    for shard in shards:
        for probe, samples in (read_calibration(shard.folder) or {}).items():
            calibration[probe] = calibration.get(probe, []) + samples
    if calibration:
        text = json.dumps(calibration, indent=1)
        (out / CALIBRATION_JSON).write_text(text, encoding="utf-8")
    if command == "ab":
        shutil.copyfile(shards[0].folder / AB_JSON, out / AB_JSON)
    machines = {str(s.folder): s.info["machine"] for s in shards}
    # the libraries loaded depend on what a shard's process ran, not on its machine
    differ = len({json.dumps(_hardware(m), sort_keys=True) for m in machines.values()}) > 1
    info = {
        "command": command,
        "shards": [
            {"folder": str(s.folder), "shard": str(s.info["shard"]), "machine": s.info["machine"]}
            for s in sorted(shards, key=lambda s: s.info["shard"].index)
        ],
        "machines_differ": differ,
    }
    (out / MERGE_JSON).write_text(json.dumps(info, indent=1), encoding="utf-8")
    return Merged(command, first["settings"], machines if differ else {})


def _hardware(machine: dict) -> dict:
    return {k: v for k, v in machine.items() if k != "kernels"}


def _tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


def cells_of(matrix: dict) -> list[Cell]:
    """The cells of a matrix as ``shard.json`` holds it (:func:`~.shard.matrix_json`)."""
    return cells(BenchConfig(**{k: _tuple(v) for k, v in matrix.items()}))
