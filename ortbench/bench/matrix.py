"""The comparison matrix: contenders x problems x data sets x batch sizes x devices.

:func:`run_matrix` runs the cells group by group (the contenders of one problem, data
set, device and batch size, their timed fits interleaved) and appends each row to the
run folder as soon as its group finishes. A cell a contender cannot run gets a row with
status "unavailable: <reason>", a cell that raised gets "failed: <error>": no cell disappears.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..training import OrtBenchError
from .contenders import CONTENDERS, Unavailable, make_contender
from .machine import machine, versions
from .memory import peak_memory
from .problems import check_problems, make_problem
from .store import MEASURED, ResultsWriter

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class BenchConfig:
    """What to run: the matrix's axes, epochs per fit and timing repeats."""

    contenders: tuple[str, ...] = tuple(CONTENDERS)
    problems: tuple[str, ...] = ("linear", "mlp", "mlp-binary")
    datasets: tuple[str, ...] = ("make_regression",)
    batch_sizes: tuple[int, ...] = (1, 15, 64, 256, 1024)
    devices: tuple[str, ...] = DEVICES
    epochs: int = 3
    repeat: int = 6
    #: rows kept from each data set (None: all); small runs for tests
    n_samples: int | None = None
    #: features of generated data sets (None: their default)
    n_features: int | None = None
    #: the contender speed-ups are measured against (None: see report.summary)
    baseline: str | None = None

    def check(self) -> BenchConfig:
        """Raise a one-line error for anything the matrix cannot run."""
        for axis, known in (("contenders", CONTENDERS), ("devices", DEVICES)):
            values = getattr(self, axis)
            if not values:
                raise OrtBenchError(f"no {axis} to run")
            unknown = [v for v in values if v not in known]
            if unknown:
                raise OrtBenchError(f"unknown {axis} {unknown}: expected some of {list(known)}")
        check_problems(self.problems, self.datasets)
        if self.baseline is not None and self.baseline not in self.contenders:
            raise OrtBenchError(
                f"baseline {self.baseline!r} is not among the contenders run {list(self.contenders)}"
            )
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise OrtBenchError(f"batch sizes must be >= 1, got {list(self.batch_sizes)}")
        for name in ("epochs", "repeat"):
            if getattr(self, name) < 1:
                raise OrtBenchError(f"{name} must be >= 1, got {getattr(self, name)}")
        return self


#: ``ortbench bench --quick``: the default problem, four contenders, two batch sizes.
QUICK = BenchConfig(
    contenders=("sklearn-mlp-sgd", "ort-full", "ort-fwbw", "ort-fwbw-nesterov"),
    problems=("mlp",),
    batch_sizes=(15, 256),
    devices=("cpu",),
    epochs=3,
    repeat=8,
)


@dataclass(frozen=True)
class Cell:
    """One contender on one problem, data set, batch size and device."""

    contender: str
    problem: str
    dataset: str
    batch_size: int
    device: str

    @property
    def label(self) -> str:
        return (
            f"{self.contender} {self.problem}/{self.dataset} batch={self.batch_size} {self.device}"
        )


def cells(config: BenchConfig) -> list[Cell]:
    """Every cell of the matrix, grouped by problem, data set, device and batch size."""
    return [
        Cell(contender, problem, dataset, batch, device)
        for problem, dataset, device, batch, contender in itertools.product(
            config.problems, config.datasets, config.devices, config.batch_sizes, config.contenders
        )
    ]


@dataclass
class CellResult:
    """A finished cell: its row, its timing samples and its loss curve."""

    row: dict
    samples: list[float] = field(default_factory=list)
    loss_curve: list[float] = field(default_factory=list)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _prepare(cell: Cell, config: BenchConfig) -> tuple[dict, object | None]:
    """The cell's row after a first fit and its scores, and the fitted contender (None
    when the cell is unavailable or failed: the row's status says why)."""
    problem = make_problem(
        cell.problem, cell.dataset, n_samples=config.n_samples, n_features=config.n_features
    )
    row = {
        **vars(cell),
        "trained_values": problem.trained_values,
        "baseline": config.baseline or "",
        "epochs": config.epochs,
        "steps": config.epochs * problem.steps_per_epoch(cell.batch_size),
        "repeat": config.repeat,
        "status": "ok",
    }
    try:
        contender = make_contender(cell.contender, problem, cell.batch_size, cell.device)
    except Unavailable as e:
        return {**row, "status": f"unavailable: {e}"}, None
    data = problem.data
    try:
        row["initial_loss"] = problem.loss(
            data.y_train, contender.predict(data.X_train), data.w_train
        )
        with peak_memory() as peak:
            contender.fit(config.epochs)
        row["peak_memory_mb"] = peak.mb
        row["final_train_loss"] = contender.loss_curve_[-1]
        validation = contender.predict(data.X_val)
        row["validation_loss"] = problem.loss(data.y_val, validation, data.w_val)
        row["validation_score"] = problem.score(data.y_val, validation)
    except Exception as e:  # a cell that breaks is a result, not the end of the run
        return {**row, "status": f"failed: {_first_line(e)}"}, None
    return row, contender


def run_group(group: list[Cell], config: BenchConfig) -> list[CellResult]:
    """Run cells that differ only by contender, their timed fits interleaved.

    Every contender is fitted once first; then each of the ``repeat`` rounds times one
    fit of ``epochs`` epochs of every contender in turn. A drift of the machine's speed
    during the group then touches every contender alike, which keeps their ratios (what
    the matrix is read for) honest on a noisy machine. Each timed fit follows one untimed
    epoch of the same contender, so that it times steady steps rather than the caches
    the previous contender's fit evicted (docs/benchmarks.md).
    """
    rows, contenders = zip(*(_prepare(cell, config) for cell in group))
    contenders = list(contenders)  # a contender whose timed fit breaks becomes None
    samples: list[list[float]] = [[] for _ in group]
    for _ in range(config.repeat):
        for k, contender in enumerate(contenders):
            if contender is None:
                continue
            try:
                contender.continue_fit(1)
                samples[k].append(contender.seconds_per_step(config.epochs))
            except Exception as e:
                rows[k]["status"] = f"failed: {_first_line(e)}"
                contenders[k] = None
    results = []
    for row, contender, times in zip(rows, contenders, samples):
        if contender is None:
            results.append(CellResult(row))
            continue
        row.update(
            seconds_per_step=float(np.median(times)),
            seconds_per_step_min=min(times),
            seconds_per_step_max=max(times),
        )
        counts = contender.runtime_counts()
        if counts is not None:
            row.update(
                runs_per_step=counts.runs_per_step, ortvalues_per_step=counts.ortvalues_per_step
            )
        results.append(CellResult(row, times, contender.loss_curve_))
    return results


def run_matrix(
    config: BenchConfig,
    writer: ResultsWriter,
    run_id: str,
    progress: Callable[[int, int, Cell, dict], None] | None = None,
) -> int:
    """Run every cell, group by group (see :func:`run_group`), appending each row to
    ``writer`` as its group finishes; return the number of cells."""
    todo = cells(config.check())
    context = {"run_id": run_id, **versions(), **machine()}
    done = 0
    for _, group in itertools.groupby(
        todo, key=lambda c: (c.problem, c.dataset, c.device, c.batch_size)
    ):
        group = list(group)
        for cell, result in zip(group, run_group(group, config)):
            row = {column: np.nan for column in MEASURED} | context | result.row
            writer.append(row, result.samples, result.loss_curve)
            done += 1
            if progress is not None:
                progress(done, len(todo), cell, row)
    return len(todo)


def run_id_now() -> str:
    """A run id from the local time: sortable and readable."""
    return time.strftime("%Y%m%d-%H%M%S")
