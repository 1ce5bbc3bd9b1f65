"""Result sets: an asv result file or an ``ortbench bench`` run folder, read once.

``compare`` judges either as a mapping ``(benchmark, parameters) -> Measurement``; the
reports of a run folder (plots, ``summary.md``, ``index.html``) draw its results table and
loss curves, each file read at first use and kept, so every renderer gets the same rows. asv's files
(``<results_dir>/<machine>/<commit>-<environment>.json``) store, per benchmark, the
parameter lists and one value per combination of them in cartesian-product order: a
number, ``None`` when the benchmark failed, NaN when it was skipped (its setup raised
NotImplementedError); the repeat samples (when recorded) and the 99% confidence interval
of each value sit in parallel columns. Units and parameter names come from the
``benchmarks.json`` asv writes at the top of the results folder, when it is there.
Benchmarks whose unit is "count" are deterministic counters.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from ..bench.store import (
    BadRow,
    RunPlan,
    read_calibration,
    read_checked_records,
    read_loss_curves,
    read_plan,
    read_results,
)
from ..bench.timing import UNSTABLE
from ..errors import OrtBenchError
from ..schema import KEYS, RESULTS_CSV, RESULTS_JSONL, SAMPLES

#: The unit of deterministic counters: any increase is a regression.
COUNT = "count"
#: The status of a cell its run was interrupted before: never measured.
INTERRUPTED = "interrupted"
#: What ``compare`` judges of each cell of a run folder, with its unit.
CELL_MEASURES = (
    ("seconds_per_step", "seconds"),
    ("runs_per_step", COUNT),
    ("ortvalues_per_step", COUNT),
)
#: What a result set is read from, as an error about any other file says.
ACCEPTED = f": give an ortbench bench run folder (holding {RESULTS_JSONL}) or an asv result .json"


@dataclass(frozen=True)
class Measurement:
    """One benchmark's value for one parameter combination, with its statistics."""

    value: float | None
    unit: str | None = None
    samples: tuple[float, ...] | None = None
    ci: tuple[float, float] | None = None
    #: never measured: its run was interrupted before the cell finished (``value`` is None)
    interrupted: bool = False
    #: timed, but its slopes spread too far to give a time per step (``value`` is NaN)
    unstable: bool = False
    #: why it errored, from its row's status (``failed: <reason>``), where known
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.value is None and not self.interrupted

    @property
    def skipped(self) -> bool:
        return self.value is not None and math.isnan(self.value)

    @property
    def measured(self) -> bool:
        """True when it holds a value: not failed, skipped nor interrupted."""
        return self.value is not None and not math.isnan(self.value)

    @property
    def counter(self) -> bool:
        return self.unit == COUNT


@dataclass
class ResultSet:
    """Measurements keyed by (benchmark, parameters), and where they came from."""

    label: str
    measurements: dict[tuple[str, str], Measurement]
    #: a bench run's calibration samples per probe (``ortbench.bench.calibration``)
    calibration: dict[str, list[float]] | None = None
    #: the rows left out (see :func:`ortbench.bench.store.check_rows`), one line each
    bad_rows: list[str] = field(default_factory=list)
    #: the parameters of the cells a bad row names: never judged, on either side
    left_out: set[str] = field(default_factory=set)
    #: the run folder it was read from (None for an asv result file)
    folder: Path | None = None
    #: the bad rows that lack a key: a cell absent from this side may be one of them
    unidentified: list[BadRow] = field(default_factory=list)

    def may_hold(self, params: str) -> bool:
        """Whether a bad row that lacks a key may be the cell of ``params``."""
        return any(row.may_be(params) for row in self.unidentified)

    @cached_property
    def plan(self) -> RunPlan | None:
        """The run folder's plan (``plan.json``), read at first use; None without one.

        Raises
        ------
        OrtBenchError
            When ``plan.json`` is malformed.
        """
        return None if self.folder is None else read_plan(self.folder)

    @cached_property
    def table(self) -> pd.DataFrame | None:
        """The run folder's results table: the good rows of ``results.csv``, bad ones in
        ``attrs['bad_rows']`` (see :func:`ortbench.bench.store.read_results`), read at
        first use; None when the folder has no ``results.csv`` (a profile's).

        Raises
        ------
        OrtBenchError
            When ``results.csv`` is malformed.
        """
        if self.folder is None or not (self.folder / RESULTS_CSV).exists():
            return None
        return read_results(self.folder)

    @cached_property
    def loss_curves(self) -> pd.DataFrame:
        """The run folder's loss curves (one row per cell and epoch), read at first use."""
        return read_loss_curves(self.folder)


def load_result_set(path: str | Path | ResultSet, measurements: bool = True) -> ResultSet:
    """Read an asv result file or an ortbench bench run folder.

    Parameters
    ----------
    path : str, Path or ResultSet
        An asv result file (``<results_dir>/<machine>/<commit>-<env>.json``) or a run folder
        of ``ortbench bench`` (holding ``results.jsonl``); a result set is returned as is.
    measurements : bool
        False for a run folder's reports: its table and loss curves only, read at first
        use (no ``results.jsonl`` needed: a profile's folder has none), no measurements.

    Returns
    -------
    ResultSet
        Its measurements, keyed by (benchmark, parameters).

    Raises
    ------
    OrtBenchError
        When the path does not exist or holds anything but a well-formed result set.
    """
    if isinstance(path, ResultSet):
        return path
    path = Path(path)
    if not measurements:
        if not path.is_dir():
            raise OrtBenchError(f"no run folder at {path}")
        return ResultSet(f"run {path.name}", {}, folder=path)
    if path.is_dir():
        if (path / RESULTS_JSONL).exists():
            return _bench_folder(path)
        raise OrtBenchError(f"{path} is a folder without {RESULTS_JSONL}{ACCEPTED}")
    if not path.exists():
        raise OrtBenchError(f"{path} does not exist")
    if (path.parent / RESULTS_JSONL).is_file():
        folder = path.parent if path.parent.name else path.absolute().parent
        raise OrtBenchError(f"{path} is a file of the run folder {folder}: give the folder")
    return _asv_file(path)


def _number(value: object, where: str) -> float | None:
    """``value`` as a float (None stays None); raise naming ``where`` for anything else."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OrtBenchError(f"{where}: expected a number, got {value!r:.40}")
    return float(value)


def _samples(value: object, where: str) -> tuple[float, ...] | None:
    if not value:
        return None
    if not isinstance(value, list):
        raise OrtBenchError(f"{where}: expected a list of samples, got {value!r:.40}")
    samples = tuple(_number(v, where) for v in value)
    if None in samples:
        raise OrtBenchError(f"{where}: a sample is null")
    return samples


def _bench_folder(folder: Path) -> ResultSet:
    records, bad = read_checked_records(folder)
    measurements = {}
    for record in records:
        where = f"{folder / RESULTS_JSONL}, {record.get('run_id')}"
        status = record["status"]
        params = ", ".join(f"{k}={record[k]}" for k in KEYS)
        for name, unit in CELL_MEASURES:
            if status == "ok":
                value = _number(record.get(name), f"{where}, {name}")
                value = math.nan if value is None else value
            else:
                value = None if status.startswith(("failed", INTERRUPTED)) else math.nan
            samples = None
            if name == "seconds_per_step":
                samples = _samples(record.get(SAMPLES), f"{where}, {SAMPLES}")
            measurements[(name, params)] = Measurement(
                value,
                unit,
                samples,
                interrupted=status == INTERRUPTED,
                unstable=status.startswith(UNSTABLE),
                error=status.removeprefix("failed: ") if status.startswith("failed") else "",
            )
    measurements |= _not_reached(folder, records, bad)
    run = records[0].get("run_id", folder.name) if records else folder.name
    return ResultSet(
        f"run {run}",
        measurements,
        read_calibration(folder),
        [f"{folder / RESULTS_JSONL} {row}" for row in bad],
        {row.cell for row in bad if row.cell is not None},
        folder,
        [row for row in bad if row.cell is None and (row.known or row.cut)],
    )


def _not_reached(
    folder: Path, records: list[dict], bad: list[BadRow]
) -> dict[tuple[str, str], Measurement]:
    """The measurements of the planned cells a run never reached (see
    :meth:`~ortbench.bench.store.RunPlan.unreached`): not run, as an interrupted cell."""
    plan = read_plan(folder)
    return {
        (name, ", ".join(f"{k}={cell[k]}" for k in KEYS)): Measurement(None, unit, interrupted=True)
        for cell in ([] if plan is None else plan.unreached(records, bad))
        for name, unit in CELL_MEASURES
    }


def _column(columns: dict, name: str, n: int, where: str) -> list:
    values = columns.get(name)
    if not isinstance(values, list):
        return [values] * n
    if len(values) != n:
        raise OrtBenchError(f"{where}: {name} holds {len(values)} values for {n} parameter sets")
    return values


def _read_json(path: Path, what: str, hint: str = "") -> object:
    """The JSON document in ``path``; else raise one line naming it, saying it is not
    ``what`` and why (then ``hint``)."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        reason = e.strerror or str(e)
    except UnicodeDecodeError:
        reason = "not a text file"
    except json.JSONDecodeError as e:
        reason = f"not JSON: {e.msg} at line {e.lineno}" if e.doc.strip() else "empty"
    raise OrtBenchError(f"{path} is not {what} ({reason}){hint}")


def _asv_benchmarks(path: Path) -> dict | None:
    """``benchmarks.json`` of the results folder a result file sits in, or None."""
    candidate = path.parent.parent / "benchmarks.json"
    if not candidate.exists():
        return None
    info = _read_json(candidate, "asv's benchmarks.json")
    if not isinstance(info, dict):
        raise OrtBenchError(f"{candidate} is not asv's benchmarks.json (not an object)")
    for name, described in info.items():
        if name == "version":
            continue
        names = described.get("param_names", []) if isinstance(described, dict) else None
        unit = described.get("unit") if isinstance(described, dict) else None
        if (
            not isinstance(names, list)
            or not all(isinstance(n, str) for n in names)
            or not isinstance(unit, (str, type(None)))
        ):
            raise OrtBenchError(f"{candidate}: malformed description of {name}")
    return info


def _asv_file(path: Path) -> ResultSet:
    data = _read_json(path, "an asv result file", ACCEPTED)
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("results"), dict)
        or not isinstance(data.get("result_columns"), list)
    ):
        raise OrtBenchError(
            f"{path} is not an asv result file (no results or result_columns){ACCEPTED}"
        )
    described_here = _asv_benchmarks(path)
    info = described_here or {}
    measurements = {}
    for name, row in data["results"].items():
        where = f"{path}, {name}"
        if not isinstance(row, list) or len(row) > len(data["result_columns"]):
            raise OrtBenchError(f"{where}: expected a list of result columns")
        columns = dict(zip(data["result_columns"], row))
        params = columns.get("params") or []
        if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
            raise OrtBenchError(f"{where}: params is not a list of lists")
        combos = list(itertools.product(*params))
        n = len(combos)
        described = info.get(name, {})
        names = described.get("param_names") or [f"param{k + 1}" for k in range(len(params))]
        results = _column(columns, "result", n, where)
        samples = _column(columns, "samples", n, where)
        ci_a = _column(columns, "stats_ci_99_a", n, where)
        ci_b = _column(columns, "stats_ci_99_b", n, where)
        repeat = _column(columns, "stats_repeat", n, where)
        for k, combo in enumerate(combos):
            label = ", ".join(f"{p}={v}" for p, v in zip(names, combo))
            low, high = _number(ci_a[k], where), _number(ci_b[k], where)
            ci = None
            if low is not None and high is not None and repeat[k] != 1:
                ci = (low, high)
            measurements[(name, label)] = Measurement(
                _number(results[k], where), described.get("unit"), _samples(samples[k], where), ci
            )
    commit = str(data.get("commit_hash", "?"))[:8]
    machine = (
        data.get("params", {}).get("machine", "?") if isinstance(data.get("params"), dict) else "?"
    )
    if described_here is None:  # said once the file has been read
        warnings.warn(
            f"{path}: no benchmarks.json two folders up, where asv writes it: units and "
            "parameter names are unknown, so counters are judged as times; compare the "
            "files in asv's results folder",
            UserWarning,
            stacklevel=2,
        )
    return ResultSet(f"commit {commit} on {machine}", measurements)
