"""The results of a run: one tidy row per cell, appended as soon as the cell finishes.

A run folder holds

- ``results.csv``: one row per cell, the columns of :data:`COLUMNS`;
- ``results.jsonl``: the same rows as JSON lines, plus the timing samples of each repeat
  (``seconds_per_step_samples``) that ``ortbench compare`` tests for significance;
- ``loss_curves.csv``: one row per cell and epoch (the cell's keys, ``epoch``, ``loss``);
- ``plan.json``: the cells the run set out to run, written as it starts, and whether a
  signal (Ctrl-C, SIGTERM) stopped it (:class:`RunPlan`): a planned cell without a row
  was never reached.

Every file is appended row by row, each row one whole line written by one call, so an
interrupted run keeps what it finished. A write that fails (disk full, read-only) is
undone back to the last whole row and raises a one-line :class:`OrtBenchError`.
"""

from __future__ import annotations

import contextlib
import csv
import fnmatch
import io
import json
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import OrtBenchError
from ..schema import (
    CALIBRATION_JSON,
    COLUMNS,
    KEYS,
    LATER_COLUMNS,
    LOSS_CURVES_CSV,
    MEASURED,
    PLAN_JSON,
    RESULTS_CSV,
    RESULTS_JSONL,
    SAMPLES,
)

#: Names of a run's data files: no ``--out`` of any command writes over them.
RUN_DATA_FILES = ("results.*", "calibration.json", "timings*", "loss_curves.csv", PLAN_JSON)
#: Names of a run folder's own reports (``ortbench report`` writes them): a comparison's
#: ``--out`` or ``--html`` does not take their place either.
RUN_REPORTS = ("index.html", "summary.md")
#: The columns of results.csv that hold numbers: a row with anything else in one is bad.
NUMBERS = ["batch_size", "epochs", "steps", "repeat", "learning_rate", *MEASURED]
#: The columns of results.csv that count something: read back as integers when every row
#: kept has a whole number there (a bad row, cut or edited, may have left them floats).
COUNTS = ("batch_size", "epochs", "steps", "repeat", "trained_values", "cpu_cores", "cpu_threads")
#: The status of a cell that never ran: its row names no timed fits.
UNAVAILABLE = "unavailable"


def _json_value(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def _not_run_data(path: Path, option: str, named: str | Path | None = None) -> None:
    """Refuse an output path that is an existing run data file (:data:`RUN_DATA_FILES`),
    ``named`` as the user gave it (by default ``path``)."""
    if path.is_file() and any(fnmatch.fnmatch(path.name, p) for p in RUN_DATA_FILES):
        raise OrtBenchError(
            f"cannot use {option} {named or path}: it is a run's data file, which ortbench "
            f"never writes over; choose another path"
        )


def usable_folder(path: str | Path, option: str = "--out") -> Path:
    """Create folder ``path`` if needed and check that files can be created in it.

    Raises
    ------
    OrtBenchError
        When ``path`` is a file, cannot be created or is not writable.
    """
    path = Path(path)
    _not_run_data(path, option)
    if path.exists() and not path.is_dir():
        raise OrtBenchError(f"cannot use {option} {path}: it is a file; name a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OrtBenchError(f"cannot use {option} {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise OrtBenchError(f"cannot use {option} {path}: not writable")
    return path


def usable_file(path: str | Path, option: str = "--out") -> Path:
    """Check that file ``path`` can be written (its folder exists and is writable).

    Raises
    ------
    OrtBenchError
        When ``path`` is a folder, a run's data file (:data:`RUN_DATA_FILES`) or one of a
        run folder's reports (:data:`RUN_REPORTS`), or its folder is missing or not
        writable.
    """
    path = Path(path)
    target = path.resolve()  # a link writes into the file it names: that file is checked
    named = path if target == path.absolute() else f"{path} (a link to {target})"
    _not_run_data(target, option, named)
    parent = path.parent
    if target.name in RUN_REPORTS and is_run_folder(target.parent):
        raise OrtBenchError(
            f"cannot use {option} {named}: it is the run's own report (ortbench report "
            "writes it); choose another path"
        )
    if path.is_dir():
        raise OrtBenchError(f"cannot use {option} {path}: it is a folder")
    if not parent.is_dir():
        raise OrtBenchError(f"cannot use {option} {path}: no folder {parent}")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise OrtBenchError(f"cannot use {option} {path}: not writable")
    return path


def create_run_folder(root: str | Path, run_id: str) -> Path:
    """Create a new run folder under ``root``, atomically: ``run_id``, else ``run_id-1``...

    Two runs never share a folder, even when started at once; the folder's name is the run
    id its rows carry.

    Raises
    ------
    OrtBenchError
        When ``root`` is unusable.
    """
    root = usable_folder(root)
    for k in range(1000):
        folder = root / (run_id if k == 0 else f"{run_id}-{k}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as e:
            raise OrtBenchError(f"cannot create {folder}: {e.strerror or e}") from None
        return folder
    raise OrtBenchError(f"{root} already holds 1000 runs named {run_id}: choose another --out")


def is_run_folder(folder: str | Path) -> bool:
    """True for a folder ``ortbench bench`` or ``ortbench profile`` wrote."""
    folder = Path(folder)
    return (folder / RESULTS_CSV).is_file() or any(
        (p / "profile.md").is_file() for p in folder.glob("profile-*")
    )


def _csv_lines(columns: list[str], rows: list[dict], header: bool) -> str:
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


class ResultsWriter:
    """Appends rows to a run folder's files, each row in one write.

    On a write error every file is cut back to the size it had before the row, and a
    one-line :class:`OrtBenchError` names the file and the reason.

    ``keys`` are the columns that identify a row (:data:`KEYS`, plus ``side`` in an A/B
    run); they follow ``run_id`` in results.csv and lead each row of loss_curves.csv.
    """

    def __init__(self, folder: str | Path, keys: list[str] = KEYS):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.keys = keys
        self.columns = ["run_id", *keys, *COLUMNS[1 + len(KEYS) :]]

    def _append(self, writes: list[tuple[str, str]]) -> None:
        sizes = {}
        try:
            for name, text in writes:
                path = self.folder / name
                with open(path, "ab") as f:
                    sizes[path] = f.tell()
                    f.write(text.encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as e:
            for written, size in sizes.items():
                with contextlib.suppress(OSError), open(written, "r+b") as f:
                    f.truncate(size)
            raise OrtBenchError(
                f"cannot write {e.filename or path}: {e.strerror or e}; the run stopped, "
                "its files end on the last whole row"
            ) from None

    def append(self, row: dict, samples: list[float], loss_curve: list[float], **details) -> None:
        """Write one finished cell: its row, its timing samples and its loss curve
        (``details`` go to its JSON line only). An unavailable cell's ``timing`` is left
        empty: it was never timed."""
        missing = set(self.columns) - set(row)
        if missing:
            raise ValueError(f"row lacks columns {sorted(missing)}")
        row = {c: row[c] for c in self.columns}
        if str(row["status"]).startswith(UNAVAILABLE):
            row["timing"] = ""
        record = {c: _json_value(v) for c, v in row.items()}
        record[SAMPLES] = samples
        record.update(details)
        curve = [
            {**{k: row[k] for k in self.keys}, "epoch": e + 1, "loss": v}
            for e, v in enumerate(loss_curve)
        ]
        new = not (self.folder / RESULTS_CSV).exists()
        self._append(
            [
                (RESULTS_JSONL, json.dumps(record) + "\n"),
                (RESULTS_CSV, _csv_lines(self.columns, [row], new)),
                (LOSS_CURVES_CSV, _csv_lines([*self.keys, "epoch", "loss"], curve, new)),
            ]
        )


@dataclass(frozen=True)
class BadRow:
    """A row of a results file that no reader uses, and why."""

    #: its line in the file (1 is the first line, a CSV's header)
    line: int
    reason: str
    #: the cell it would be, ``key=value, ...`` over the keys, when it has them all
    cell: str | None = None
    #: the (key, value) pairs of a row that lacks a key but has others
    known: tuple[tuple[str, str], ...] = ()
    #: a last line its run stopped writing: it may be any cell
    cut: bool = False

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"

    def may_be(self, cell: str, keys: Sequence[str] = KEYS) -> bool:
        """Whether this row may be ``cell`` (``key=value, ...`` over ``keys``): it is that
        cell, or it lacks a key and agrees with ``cell`` on every key it has, or it was cut
        short."""
        if self.cut:
            return True
        if self.cell is not None or not self.known:
            return cell == self.cell
        known = dict(self.known)
        pattern = ", ".join(
            re.escape(f"{k}={known[k]}") if k in known else re.escape(f"{k}=") + ".*" for k in keys
        )
        return re.fullmatch(pattern, cell) is not None


def check_rows(
    rows: Iterable[tuple[int, object]], keys: Sequence[str] = KEYS
) -> tuple[list[dict], list[BadRow]]:
    """Split the rows of a results file into those a reader may use and the bad ones.

    Every reader of results (``compare``, ``report``, ``merge``) goes through this check, so
    a file written by another version, by hand or half-written is judged on its good rows
    only, and its bad rows are named, never judged nor drawn.

    Parameters
    ----------
    rows : iterable of (int, object)
        Each row with its line number in the file.
    keys : sequence of str
        The columns that identify a cell (:data:`KEYS`, plus ``side`` in an A/B run).

    Returns
    -------
    good : list of dict
        The rows to use, in file order.
    bad : list of BadRow
        In line order: a row that is not an object, lacks a key or a status, whose
        ``ok`` time (``seconds_per_step`` or a sample of it) is not a finite number > 0,
        or that shares its key with another row (every row of that key is bad).
    """
    bad: dict[int, BadRow] = {}
    lines_of: dict[str, list[int]] = {}
    checked = []
    for line, row in rows:
        cell = _cell(row, keys)
        reason = _row_problem(row, keys)
        if reason:
            known = () if cell else _known(row, keys)
            bad[line] = BadRow(line, reason, cell, known, cut=row is _CUT)
            continue
        lines_of.setdefault(cell, []).append(line)
        checked.append((line, row))
    for cell, lines in lines_of.items():
        for line in lines if len(lines) > 1 else ():
            others = ", ".join(str(n) for n in lines if n != line)
            bad[line] = BadRow(line, f"the same cell as line {others} ({cell})", cell)
    good = [row for line, row in checked if line not in bad]
    return good, [bad[line] for line in sorted(bad)]


def _cell(row: object, keys: Sequence[str]) -> str | None:
    """The cell a row is, ``key=value, ...`` over the keys; None when it lacks one."""
    if not isinstance(row, dict) or any(_missing(row.get(k)) for k in keys):
        return None
    return ", ".join(f"{k}={row[k]}" for k in keys)


def _known(row: object, keys: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """The keys a row has, each with its value as a cell names it (a whole float as an
    integer: a CSV column with an empty cell reads its batch sizes as floats)."""
    if not isinstance(row, dict):
        return ()
    return tuple(
        (k, str(int(v)) if isinstance(v, float) and v.is_integer() else str(v))
        for k in keys
        if not _missing(v := row.get(k))
    )


def _missing(value: object) -> bool:
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def _row_problem(row: object, keys: Sequence[str]) -> str | None:
    """Why a row is bad (see :func:`check_rows`), or None."""
    if row is _CUT:
        return "cut short: its run stopped while writing it"
    if not isinstance(row, dict):
        return "not an object"
    missing = [k for k in (*keys, "status") if _missing(row.get(k))]
    if missing:
        return f"no {', '.join(missing)}"
    if not isinstance(row["status"], str):
        return f"status {row['status']!r:.40} is not a string"
    if row["status"] != "ok":
        return None
    times = [("seconds_per_step", row.get("seconds_per_step"))]
    samples = row.get(SAMPLES)
    if isinstance(samples, list):
        times += [(SAMPLES, value) for value in samples]
    elif samples is not None:
        return f"{SAMPLES} is not a list"
    for name, value in times:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{name} {value!r:.40} is not a number"
        if not math.isfinite(value) or value <= 0:
            return f"{name} is {value}: a time is a finite number > 0"
    return None


def read_results(folder: str | Path) -> pd.DataFrame:
    """The results table of a run folder: its good rows (see :func:`check_rows`; a row
    with anything but a number in a column of :data:`NUMBERS` is bad too), its counts
    integers where they are whole (:data:`COUNTS`).

    The bad rows are in ``attrs['bad_rows']`` (a list of :class:`BadRow`).

    Raises
    ------
    OrtBenchError
        When the folder holds no ``results.csv`` or a malformed one.
    """
    path = Path(folder) / RESULTS_CSV
    if not path.exists():
        raise OrtBenchError(f"{folder} holds no {RESULTS_CSV}: not an ortbench bench run folder")
    try:
        results = pd.read_csv(path)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OrtBenchError(f"{path} is not a results table: {reason}") from None
    missing = [c for c in COLUMNS if c not in results.columns and c not in LATER_COLUMNS]
    if missing:
        raise OrtBenchError(f"{path} lacks the columns {', '.join(missing)}")
    for column in LATER_COLUMNS:
        if column not in results.columns:
            results[column] = math.nan if column in NUMBERS else ""
    keys = [*KEYS, "side"] if "side" in results.columns else KEYS
    not_numbers = _as_numbers(results, keys)
    rows = (
        (k + 2, row)  # line 1: the header
        for k, row in enumerate(results.to_dict("records"))
        if k + 2 not in not_numbers
    )
    _, bad = check_rows(rows, keys)
    bad = sorted([*bad, *not_numbers.values()], key=lambda b: b.line)
    bad_lines = {b.line for b in bad}
    kept = results[[k + 2 not in bad_lines for k in range(len(results))]].reset_index(drop=True)
    _whole_counts(kept)
    kept.attrs["bad_rows"] = bad
    return kept


def _as_numbers(results: pd.DataFrame, keys: Sequence[str]) -> dict[int, BadRow]:
    """Turn the columns of :data:`NUMBERS` into numbers, in place; return the rows that
    held something else in one (by line: the first row is line 2), each a bad row."""
    bad: dict[int, BadRow] = {}
    for column in NUMBERS:
        numbers = pd.to_numeric(results[column], errors="coerce")
        for k in results.index[numbers.isna() & results[column].notna()]:
            reason = f"{column} {results.at[k, column]!r:.40} is not a number"
            bad.setdefault(k + 2, BadRow(k + 2, reason, _cell(results.loc[k].to_dict(), keys)))
        results[column] = numbers
    return bad


def _whole_counts(results: pd.DataFrame) -> None:
    """Turn the columns of :data:`COUNTS` that hold whole numbers only into integers."""
    for column in COUNTS:
        values = results[column]
        if values.dtype.kind == "f" and values.notna().all() and (values % 1 == 0).all():
            results[column] = values.astype("int64")


def read_loss_curves(folder: str | Path) -> pd.DataFrame:
    """The loss curves of a run folder (one row per cell and epoch), empty without its
    ``loss_curves.csv``.

    Raises
    ------
    OrtBenchError
        When the file is not a table with the cells' keys, ``epoch`` and ``loss``.
    """
    path = Path(folder) / LOSS_CURVES_CSV
    columns = [*KEYS, "epoch", "loss"]
    if not path.exists():
        return pd.DataFrame(columns=columns)
    try:
        table = pd.read_csv(path)
    except (ValueError, UnicodeDecodeError) as e:  # pandas' parser and empty-data errors
        reason = " ".join(str(e).split())[:200] or type(e).__name__
    else:
        missing = [c for c in columns if c not in table.columns]
        if not missing:
            return table
        reason = f"no column {missing[0]!r}"
    raise OrtBenchError(
        f"{path} is not ortbench's loss curves ({reason}): restore it, or delete it to "
        "report the run without its loss curves"
    )


def read_records(folder: str | Path) -> list[dict]:
    """The rows of a run folder as dictionaries, with their timing samples, unchecked (a
    reader that judges or draws them uses :func:`read_checked_records`).

    Raises
    ------
    OrtBenchError
        When the folder holds no ``results.jsonl``, or a line of it (but the last, which an
        interruption may have cut) is not JSON.
    """
    return [record for _, record in _numbered_records(folder)]


def read_checked_records(
    folder: str | Path, keys: Sequence[str] = KEYS
) -> tuple[list[dict], list[BadRow]]:
    """The good rows of a run folder's ``results.jsonl`` and its bad rows (see
    :func:`check_rows`; line numbers count every line of the file).

    Raises
    ------
    OrtBenchError
        As :func:`read_records`.
    """
    return check_rows(_numbered_records(folder, keep_cut=True), keys)


#: A last line of ``results.jsonl`` its run stopped writing (killed while it wrote it).
_CUT = object()


def _numbered_records(folder: str | Path, keep_cut: bool = False) -> list[tuple[int, object]]:
    """The JSON lines of a run folder's ``results.jsonl`` with their line numbers; a cut
    last line is left out, or with ``keep_cut`` given as :data:`_CUT`."""
    path = Path(folder) / RESULTS_JSONL
    if not path.exists():
        raise OrtBenchError(f"{folder} holds no {RESULTS_JSONL}: not an ortbench bench run folder")
    try:
        with open(path, encoding="utf-8") as f:
            lines = [(n, line) for n, line in enumerate(f, 1) if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise OrtBenchError(f"{path} is not a text file of JSON lines: {e}") from None
    records = []
    for k, (number, line) in enumerate(lines):
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError:
            if k < len(lines) - 1 or line.endswith("\n"):  # only the last line can be cut
                raise OrtBenchError(f"{path}: line {number} is not JSON") from None
            if keep_cut:
                records.append((number, _CUT))
    return records


def read_calibration(folder: str | Path) -> dict[str, list[float]] | None:
    """A run folder's calibration samples, or None when it has none.

    Raises
    ------
    OrtBenchError
        When the file is there but malformed.
    """
    path = Path(folder, CALIBRATION_JSON)
    if not path.exists():
        return None
    try:
        samples = json.loads(path.read_text(encoding="utf-8"))
        return {
            str(name): [float(s) for s in values]
            for name, values in samples.items()
            if isinstance(values, list)
        }
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as e:
        raise OrtBenchError(f"{path} is not a calibration file: {e}") from None


@dataclass(frozen=True)
class RunPlan:
    """What a run set out to do (``plan.json``): its cells, and whether a signal stopped it."""

    #: each planned cell as ``{key: value}`` over :data:`KEYS`, in the run's order
    cells: list[dict]
    interrupted: bool = False

    def unreached(self, rows: Iterable[dict], bad: Sequence[BadRow] = ()) -> list[dict]:
        """The planned cells that have no row: neither one of ``rows`` nor one of ``bad``
        that may be it (see :meth:`BadRow.may_be`)."""
        done = {_cell(row, KEYS) for row in rows}
        return [
            cell
            for cell in self.cells
            if (name := _cell(cell, KEYS)) not in done and not any(b.may_be(name) for b in bad)
        ]


def write_plan(folder: str | Path, cells: Iterable[dict], interrupted: bool = False) -> None:
    """Write ``plan.json``: the cells a run sets out to run (``{key: value}`` over
    :data:`KEYS` each) and whether a signal stopped it.

    Raises
    ------
    OrtBenchError
        When the file cannot be written.
    """
    plan = {"cells": [[cell[k] for k in KEYS] for cell in cells], "interrupted": interrupted}
    path = Path(folder, PLAN_JSON)
    try:
        path.write_text(json.dumps(plan, indent=1), encoding="utf-8")
    except OSError as e:
        raise OrtBenchError(f"cannot write {path}: {e.strerror or e}") from None


def mark_interrupted(folder: str | Path) -> None:
    """Record in ``plan.json`` that a signal stopped the run (nothing without a plan)."""
    plan = read_plan(folder)
    if plan is not None:
        write_plan(folder, plan.cells, interrupted=True)


def read_plan(folder: str | Path) -> RunPlan | None:
    """A run folder's plan, or None for a folder written without one.

    Raises
    ------
    OrtBenchError
        When ``plan.json`` is there but malformed.
    """
    path = Path(folder, PLAN_JSON)
    if not path.exists():
        return None
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
        cells = [dict(zip(KEYS, values, strict=True)) for values in plan["cells"]]
        return RunPlan(cells, plan["interrupted"] is True)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as e:
        reason = e.strerror if isinstance(e, OSError) else f"{type(e).__name__}: {e}"
        raise OrtBenchError(f"{path} is not a run's plan ({reason})") from None
