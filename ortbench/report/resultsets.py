"""Result sets to compare: an asv result file or an ``ortbench bench`` run folder.

Both become a mapping ``(benchmark, parameters) -> Measurement``. asv's files
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
from dataclasses import dataclass
from pathlib import Path

from ..bench.calibration import read_calibration
from ..bench.store import KEYS, RESULTS_JSONL, SAMPLES, read_records
from ..training import OrtBenchError

#: The unit of deterministic counters: any increase is a regression.
COUNT = "count"


@dataclass(frozen=True)
class Measurement:
    """One benchmark's value for one parameter combination, with its statistics."""

    value: float | None
    unit: str | None = None
    samples: tuple[float, ...] | None = None
    ci: tuple[float, float] | None = None

    @property
    def failed(self) -> bool:
        return self.value is None

    @property
    def skipped(self) -> bool:
        return self.value is not None and math.isnan(self.value)

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


def load_result_set(path: str | Path) -> ResultSet:
    """Read an asv result file or an ortbench bench run folder."""
    path = Path(path)
    if path.is_dir():
        if (path / RESULTS_JSONL).exists():
            return _bench_folder(path)
        raise OrtBenchError(
            f"{path} is a folder without {RESULTS_JSONL}: give an ortbench bench run folder "
            "or an asv result file"
        )
    if not path.exists():
        raise OrtBenchError(f"{path} does not exist")
    return _asv_file(path)


def _bench_folder(folder: Path) -> ResultSet:
    records = read_records(folder)
    measurements = {}
    for record in records:
        params = ", ".join(f"{k}={record[k]}" for k in KEYS)
        status = record["status"]
        for name, unit in (
            ("seconds_per_step", "seconds"),
            ("runs_per_step", COUNT),
            ("ortvalues_per_step", COUNT),
        ):
            if status == "ok":
                value = record[name]
                value = math.nan if value is None else float(value)
            else:
                value = None if status.startswith("failed") else math.nan
            samples = record.get(SAMPLES) if name == "seconds_per_step" else None
            measurements[(name, params)] = Measurement(
                value, unit, tuple(samples) if samples else None
            )
    run = records[0]["run_id"] if records else folder.name
    return ResultSet(f"run {run}", measurements, read_calibration(folder))


def _column(columns: dict, name: str, n: int) -> list:
    values = columns.get(name)
    return values if isinstance(values, list) else [values] * n


def _asv_benchmarks(path: Path) -> dict:
    """``benchmarks.json`` of the results folder a result file sits in, or nothing."""
    candidate = path.parent.parent / "benchmarks.json"
    if candidate.exists():
        with open(candidate) as f:
            return json.load(f)
    return {}


def _asv_file(path: Path) -> ResultSet:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OrtBenchError(f"{path} is not an asv result file: {e}") from None
    if not isinstance(data, dict) or not {"results", "result_columns"} <= set(data):
        raise OrtBenchError(f"{path} is not an asv result file (no results or result_columns)")
    info = _asv_benchmarks(path)
    measurements = {}
    for name, row in data["results"].items():
        columns = dict(zip(data["result_columns"], row))
        params = columns.get("params") or []
        combos = list(itertools.product(*params))
        n = len(combos)
        described = info.get(name, {})
        names = described.get("param_names") or [f"param{k + 1}" for k in range(len(params))]
        results = _column(columns, "result", n)
        samples = _column(columns, "samples", n)
        ci_a = _column(columns, "stats_ci_99_a", n)
        ci_b = _column(columns, "stats_ci_99_b", n)
        repeat = _column(columns, "stats_repeat", n)
        for k, combo in enumerate(combos):
            label = ", ".join(f"{p}={v}" for p, v in zip(names, combo))
            ci = None
            if ci_a[k] is not None and ci_b[k] is not None and repeat[k] != 1:
                ci = (float(ci_a[k]), float(ci_b[k]))
            measurements[(name, label)] = Measurement(
                None if results[k] is None else float(results[k]),
                described.get("unit"),
                tuple(samples[k]) if samples[k] else None,
                ci,
            )
    commit = str(data.get("commit_hash", "?"))[:8]
    machine = (data.get("params") or {}).get("machine", "?")
    return ResultSet(f"commit {commit} on {machine}", measurements)
