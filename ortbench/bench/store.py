"""The results of a run: one tidy row per cell, appended as soon as the cell finishes.

A run folder holds

- ``results.csv``: one row per cell, the columns of :data:`COLUMNS`;
- ``results.jsonl``: the same rows as JSON lines, plus the timing samples of each repeat
  (``seconds_per_step_samples``) that ``ortbench compare`` tests for significance;
- ``loss_curves.csv``: one row per cell and epoch (the cell's keys, ``epoch``, ``loss``).

Every file is appended and flushed row by row, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pandas as pd

from ..training import OrtBenchError

#: The cell's coordinates: what identifies a row across runs.
KEYS = ["contender", "problem", "dataset", "batch_size", "device"]

#: Columns a cell measures (NaN when it did not get that far).
MEASURED = [
    "seconds_per_step",
    "seconds_per_step_min",
    "seconds_per_step_max",
    "peak_memory_mb",
    "initial_loss",
    "final_train_loss",
    "validation_loss",
    "validation_score",
    "runs_per_step",
    "ortvalues_per_step",
]

#: Columns of results.csv, in order.
COLUMNS = [
    "run_id",
    *KEYS,
    "epochs",
    "steps",
    "repeat",
    "trained_values",
    "baseline",
    *MEASURED,
    "status",
    "python_version",
    "ortbench_version",
    "numpy_version",
    "sklearn_version",
    "onnx_version",
    "onnxruntime_version",
    "skl2onnx_version",
    "torch_version",
    "cpu_model",
    "cpu_cores",
    "cpu_threads",
    "platform",
]

RESULTS_CSV = "results.csv"
RESULTS_JSONL = "results.jsonl"
LOSS_CURVES_CSV = "loss_curves.csv"
SAMPLES = "seconds_per_step_samples"


def _json_value(value):
    return None if isinstance(value, float) and math.isnan(value) else value


class ResultsWriter:
    """Appends rows to a run folder's files, flushing each one."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def _append_csv(self, name: str, columns: list[str], rows: list[dict]) -> None:
        path = self.folder / name
        new = not path.exists()
        with open(path, "a", newline="") as f:
            writer = csv.DictWriter(f, columns)
            if new:
                writer.writeheader()
            writer.writerows(rows)

    def append(self, row: dict, samples: list[float], loss_curve: list[float]) -> None:
        """Write one finished cell: its row, its timing samples and its loss curve."""
        missing = set(COLUMNS) - set(row)
        if missing:
            raise ValueError(f"row lacks columns {sorted(missing)}")
        row = {c: row[c] for c in COLUMNS}
        self._append_csv(RESULTS_CSV, COLUMNS, [row])
        record = {c: _json_value(v) for c, v in row.items()}
        record[SAMPLES] = samples
        with open(self.folder / RESULTS_JSONL, "a") as f:
            f.write(json.dumps(record) + "\n")
        curve = [
            {**{k: row[k] for k in KEYS}, "epoch": e + 1, "loss": v}
            for e, v in enumerate(loss_curve)
        ]
        self._append_csv(LOSS_CURVES_CSV, [*KEYS, "epoch", "loss"], curve)


def read_results(folder: str | Path) -> pd.DataFrame:
    """The results table of a run folder."""
    path = Path(folder) / RESULTS_CSV
    if not path.exists():
        raise OrtBenchError(f"{folder} holds no {RESULTS_CSV}: not an ortbench bench run folder")
    return pd.read_csv(path)


def read_loss_curves(folder: str | Path) -> pd.DataFrame:
    """The loss curves of a run folder (one row per cell and epoch)."""
    path = Path(folder) / LOSS_CURVES_CSV
    if not path.exists():
        return pd.DataFrame(columns=[*KEYS, "epoch", "loss"])
    return pd.read_csv(path)


def read_records(folder: str | Path) -> list[dict]:
    """The rows of a run folder as dictionaries, with their timing samples."""
    path = Path(folder) / RESULTS_JSONL
    if not path.exists():
        raise OrtBenchError(f"{folder} holds no {RESULTS_JSONL}: not an ortbench bench run folder")
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    records = []
    for k, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if k < len(lines) - 1:  # only the last line may be cut by an interruption
                raise OrtBenchError(f"{path}: line {k + 1} is not JSON") from None
    return records
