"""The comparison matrix: contenders x problems x data sets x batch sizes x devices.

:func:`run_matrix` runs the cells group by group (the contenders of one problem, data
set, device and batch size, their timed fits interleaved) and appends each row to the
run folder as soon as its group finishes. A cell a contender cannot run gets a row with
status "unavailable: <reason>" (a contender whose backend has no gradient for a node of
the model included), a cell that raised gets "failed: <error>": no cell disappears.

A group takes minutes on a large model, so its progress is reported in stages
(:class:`Stage`): each contender's first fit, the sizing of each long fit, each round.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np

from ..training import NoGradientError, OrtBenchError
from .contenders import CONTENDERS, Contender, Unavailable, make_contender
from .datasets import DATASETS, check_data_options
from .interruption import interruptible
from .machine import available_devices, kernels, machine, versions
from .memory import peak_memory
from .problems import (
    Problem,
    batch_data_sizes,
    batch_too_large,
    check_problems,
    make_problem,
)
from .store import MEASURED, ResultsWriter
from .timing import (
    AGAIN_GROWTH,
    SHORT_EPOCHS,
    UNSTABLE,
    TimedFits,
    settled_heap,
    slope,
    step_columns,
    timed_fit,
    timing_column,
    unstable,
)

DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class BenchConfig:
    """What to run: the matrix's axes, epochs per fit and timing repeats."""

    contenders: tuple[str, ...] = tuple(CONTENDERS)
    problems: tuple[str, ...] = ("linear", "mlp", "mlp-binary")
    datasets: tuple[str, ...] = ("make_regression",)
    batch_sizes: tuple[int, ...] = (1, 15, 64, 256, 1024)
    devices: tuple[str, ...] = field(default_factory=available_devices)
    epochs: int = 3
    #: 10 a side lets the rank test decide (p can reach 1e-5) and finds a 1.3x change
    #: at the spread of timings on a 2-core machine (docs/benchmarks.md)
    repeat: int = 10
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
        for dataset in set(self.datasets) & set(DATASETS):  # not a user's own data
            check_data_options(dataset, self.n_samples, self.n_features)
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


#: ``ortbench bench --quick``: the default problem, scikit-learn, the training build's
#: contenders and the portable ones (any onnxruntime build), two batch sizes.
QUICK = BenchConfig(
    contenders=(
        "sklearn-mlp-sgd",
        "ort-full",
        "ort-fwbw",
        "ort-fwbw-nesterov",
        "ort-portable-full",
        "ort-portable-fwbw",
        "ort-portable-nesterov",
    ),
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
        return f"{self.contender} {self.group_label}"

    @property
    def group_label(self) -> str:
        """The cell's group (:func:`run_group`): all but the contender."""
        return f"{self.problem}/{self.dataset} batch={self.batch_size} {self.device}"


def cells(config: BenchConfig) -> list[Cell]:
    """Every cell of the matrix, grouped by problem, data set, device and batch size."""
    return [
        Cell(contender, problem, dataset, batch, device)
        for problem, dataset, device, batch, contender in itertools.product(
            config.problems, config.datasets, config.devices, config.batch_sizes, config.contenders
        )
    ]


def groups(config: BenchConfig, only: Collection[Cell] | None = None) -> list[list[Cell]]:
    """The groups :func:`run_matrix` runs, in turn: the cells of ``only`` (all by default)
    that differ only by contender."""
    todo = [cell for cell in cells(config.check()) if only is None or cell in only]
    return [
        list(group)
        for _, group in itertools.groupby(
            todo, key=lambda c: (c.problem, c.dataset, c.device, c.batch_size)
        )
    ]


def planned_stages(config: BenchConfig, only: Collection[Cell] | None = None) -> int:
    """The stages (:class:`Stage`) of the groups of ``config`` (those of ``only``): each
    contender's first fit and the sizing of its long fit, then the group's rounds. Timing
    a group's rounds again adds ``repeat`` more."""
    return sum(2 * len(group) + config.repeat for group in groups(config, only))


@dataclass(frozen=True)
class Stage:
    """A stage of the run that finished: ``done`` of its ``total`` stages are (``total``
    grows when a group's rounds are timed again; see :func:`planned_stages`).

    Stages, unlike cells, finish at a steady pace: all the cells of a group finish
    together, at its end.
    """

    done: int
    total: int
    #: the group's :attr:`Cell.group_label`
    group: str
    #: what finished: "torch-sgd fitted", "round 2/10"...
    text: str


class StageCounter:
    """A run's stages: counts them and reports each one as it finishes.

    Parameters
    ----------
    total : int
        The stages the run plans (:func:`planned_stages`).
    report : callable, optional
        Called with each :class:`Stage` as it finishes (by default nothing is reported).
    """

    def __init__(self, total: int = 0, report: Callable[[Stage], None] | None = None):
        self.done, self.total, self.report = 0, total, report
        #: the :attr:`Cell.group_label` of the group that runs
        self.group = ""

    def finished(self, text: str, stages: int = 1) -> None:
        """``stages`` more stages finished; ``text`` says which."""
        self.done += stages
        if self.report is not None:
            self.report(Stage(self.done, self.total, self.group, text))

    def add(self, stages: int) -> None:
        """The run takes ``stages`` more stages than planned."""
        self.total += stages


@dataclass
class CellResult:
    """A finished cell: its row, its timing samples and its loss curve."""

    row: dict
    samples: list[float] = field(default_factory=list)
    loss_curve: list[float] = field(default_factory=list)


class Interrupted(KeyboardInterrupt):
    """A signal stopped a group: ``results`` holds its rows, the unfinished ones marked."""

    def __init__(self, results: list[CellResult]):
        super().__init__()
        self.results = results


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def data_sizes(cell: Cell, config: BenchConfig) -> dict[str, int | None]:
    """The ``n_samples`` and ``n_features`` of the cell's data set (see
    :func:`~ortbench.bench.problems.batch_data_sizes`)."""
    return batch_data_sizes(
        cell.problem, cell.dataset, cell.batch_size, config.n_samples, config.n_features
    )


def _problem(cell: Cell, config: BenchConfig) -> Problem:
    """The cell's problem, on the data :func:`data_sizes` sizes."""
    return make_problem(cell.problem, cell.dataset, **data_sizes(cell, config))


def _row(cell: Cell, config: BenchConfig, problem: Problem) -> dict:
    """The cell's row before anything ran."""
    return {
        **vars(cell),
        "trained_values": problem.trained_values,
        "learning_rate": problem.eta0,
        "baseline": config.baseline or "",
        "epochs": config.epochs,
        "steps": config.epochs * problem.steps_per_epoch(cell.batch_size),
        "repeat": config.repeat,
        "timing": timing_column(f"{SHORT_EPOCHS + config.epochs}+"),
        "status": "ok",
    }


def _prepare(
    cell: Cell, config: BenchConfig, interrupted: Callable[[], bool]
) -> tuple[dict, Contender | None]:
    """The cell's row after a first fit and its scores, and the fitted contender (None
    when the cell is unavailable or failed: the row's status says why)."""
    problem = _problem(cell, config)
    row = _row(cell, config, problem)
    reason = batch_too_large(problem, cell.batch_size)
    if reason is not None:
        return {**row, "status": f"unavailable: {reason}"}, None
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
        _check(interrupted)
        row["peak_memory_mb"] = peak.mb
        row["final_train_loss"] = contender.loss_curve_[-1]
        validation = contender.predict(data.X_val)
        row["validation_loss"] = problem.loss(data.y_val, validation, data.w_val)
        row["validation_score"] = problem.score(data.y_val, validation)
    except NoGradientError as e:  # this contender's backend cannot train the model
        return {**row, "status": f"unavailable: {e.reason}"}, None
    except Exception as e:  # a cell that breaks is a result, not the end of the run
        return {**row, "status": f"failed: {_first_line(e)}"}, None
    return row, contender


def _check(interrupted: Callable[[], bool]) -> None:
    """Raise KeyboardInterrupt when a signal came, even if a contender swallowed it."""
    if interrupted():
        raise KeyboardInterrupt


def run_group(
    group: list[Cell],
    config: BenchConfig,
    interrupted: Callable[[], bool] = lambda: False,
    stages: StageCounter | None = None,
) -> list[CellResult]:
    """Run cells that differ only by contender, their timed fits interleaved.

    Every contender is fitted once first. Then the protocol of :mod:`.timing` sizes each
    contender's long fit (``epochs`` or more epochs more than the short one, enough to
    outlast it by :data:`~.timing.MIN_EXTRA_SECONDS`; the ``timing`` column says how
    many), and each of the ``repeat`` rounds times a short fit of every contender in
    turn, then a long fit of every contender in turn, all continuing from the trained
    weights, each once the threads of the one before have stopped spinning. The round's
    sample of a cell is the slope between its two fits (:func:`~.timing.slope`): its time
    per step without what a fit pays once, which the row keeps apart as
    ``seconds_per_fit_overhead``. Both fits of a contender start after another
    contender's fit, so the cache misses at a fit's start cancel out too. A drift of the
    machine's speed during the group touches every contender alike, which keeps their
    ratios honest on a noisy machine. When a cell's slopes are no measurement
    (:func:`~.timing.unstable`), the group's rounds are timed again, once, with longer
    long fits; a cell whose second rounds are no measurement either keeps them, with the
    status "unstable: <reason>".

    Each stage of the group (:class:`Stage`) is counted by ``stages`` as it finishes.

    Raises
    ------
    Interrupted
        When SIGINT or SIGTERM came (see :mod:`.interruption`): its results mark the
        group's unfinished cells "interrupted".
    """
    stages = stages or StageCounter()
    rows, contenders = [], []
    try:
        for cell in group:
            row, contender = _prepare(cell, config, interrupted)
            rows.append(row)
            contenders.append(contender)
            if contender is None:  # never timed: its sizing is skipped too
                stages.finished(f"{cell.contender} {row['status'].split(':')[0]}", 2)
            else:
                stages.finished(f"{cell.contender} fitted")
        with settled_heap():
            durations = _timed_fits(contenders, config, rows, interrupted, stages)
        return [
            _finish(row, contender, *fits, interrupted)
            for row, contender, fits in zip(rows, contenders, durations)
        ]
    except KeyboardInterrupt:
        results = [CellResult(row) for row in rows]
        results += [
            CellResult(_row(cell, config, _problem(cell, config))) for cell in group[len(rows) :]
        ]
        for result in results:
            if result.row["status"] == "ok":
                result.row["status"] = "interrupted"
        raise Interrupted(results) from None


def _finish(
    row: dict,
    contender: Contender | None,
    pairs: list[tuple[float, float]],
    long_epochs: int,
    interrupted: Callable[[], bool],
) -> CellResult:
    """The cell's result from the durations of its rounds' short and long timed fits."""
    if contender is None:
        return CellResult(row)
    slopes = _slopes(contender, pairs, long_epochs)
    times = [p[0] for p in slopes]
    row.update(step_columns(times, [p[1] for p in slopes]))
    reason = unstable(times)
    if reason is not None:
        row["status"] = f"{UNSTABLE}: {reason}"
    counts = contender.runtime_counts()
    _check(interrupted)
    if counts is not None:
        row.update(runs_per_step=counts.runs_per_step, ortvalues_per_step=counts.ortvalues_per_step)
    row["intra_op_threads"] = contender.session_threads()
    return CellResult(row, times, contender.loss_curve_)


def _slopes(
    contender: Contender, pairs: list[tuple[float, float]], long_epochs: int
) -> list[tuple[float, float]]:
    """The (seconds per step, seconds per fit) of each round from its (short, long)
    durations (:func:`~.timing.slope`)."""
    steps = contender.problem.steps_per_epoch(contender.batch_size)
    return [slope(s, t, SHORT_EPOCHS * steps, long_epochs * steps) for s, t in pairs]


def _timed_fits(
    contenders: list,
    config: BenchConfig,
    rows: list[dict],
    interrupted: Callable[[], bool],
    stages: StageCounter,
) -> list[tuple[list[tuple[float, float]], int]]:
    """The (short, long) durations of each contender's rounds and the epochs of its long
    fits (see :class:`~.timing.TimedFits`); a contender whose fit breaks gets a failed
    status and becomes None in ``contenders``. A row's ``timing`` says after how many of
    its fits the wait for quiet gave up.

    When the rounds leave a cell of the group without a measurement
    (:func:`~.timing.unstable`: a stall in one fit is enough), the whole group is timed
    again, once, with long fits of :data:`~.timing.AGAIN_GROWTH` times the extra epochs,
    and its cells keep the second rounds: every contender's, so that their ratios still
    come from one interleaved timing. Their ``timing`` says so.
    """

    def fit(k: int, epochs: int) -> tuple[float, bool] | None:
        if contenders[k] is None:
            return None
        try:
            result = timed_fit(contenders[k], epochs)
        except Exception as e:
            rows[k]["status"] = f"failed: {_first_line(e)}"
            contenders[k] = None
            return None
        _check(interrupted)
        return result

    fits = TimedFits(fit)
    running = [k for k, contender in enumerate(contenders) if contender is not None]
    long_epochs = {}
    for k in running:
        long_epochs[k] = fits.long_epochs([k], config.epochs)
        sized = "failed" if contenders[k] is None else f"long fits of {long_epochs[k]} epochs"
        stages.finished(f"{rows[k]['contender']} {sized}")

    def timed_rounds(what: str) -> list[list[tuple[float, float]]]:
        pairs: list[list[tuple[float, float]]] = [[] for _ in contenders]
        order = [k for k in running if contenders[k] is not None]
        rounds = fits.rounds(long_epochs, [order] * config.repeat)
        for done, durations in enumerate(rounds, start=1):
            for k, pair in durations.items():
                pairs[k].append(pair)
            stages.finished(f"{what} {done}/{config.repeat}")
        return pairs

    pairs = timed_rounds("round")
    again = any(
        unstable([t for t, _ in _slopes(contenders[k], pairs[k], long_epochs[k])])
        for k in running
        if contenders[k] is not None
    )
    if again:
        for k, epochs in long_epochs.items():
            long_epochs[k] = SHORT_EPOCHS + AGAIN_GROWTH * (epochs - SHORT_EPOCHS)
        stages.add(config.repeat)
        pairs = timed_rounds("round timed again")
    for k in running:
        rows[k]["timing"] = timing_column(long_epochs[k], fits.quiet_gave_up[k], again)
    return [(pairs[k], long_epochs.get(k, 0)) for k in range(len(contenders))]


def run_matrix(
    config: BenchConfig,
    writer: ResultsWriter,
    run_id: str,
    progress: Callable[[int, int, Cell, dict], None] | None = None,
    only: Collection[Cell] | None = None,
    stages: Callable[[Stage], None] | None = None,
) -> int:
    """Run every cell, or those of ``only`` (a shard, see :mod:`.shard`), group by group
    (see :func:`run_group`), appending each row to ``writer`` as its group finishes;
    return the number of cells run.

    ``progress(done, total, cell, row)`` sees each row as it is written, ``stages`` each
    stage of the run as it finishes (:class:`Stage`: they come while a group runs, its
    rows only at its end).

    Raises
    ------
    KeyboardInterrupt
        On SIGINT or SIGTERM, once the interrupted group's rows are written.
    OrtBenchError
        When a row cannot be written (the files end on the last whole row).
    """
    todo = groups(config, only)
    total = sum(len(group) for group in todo)
    context = {"run_id": run_id, **versions(), **machine()}
    counter = StageCounter(planned_stages(config, only), stages)
    done = 0

    def write(cell: Cell, result: CellResult) -> None:
        nonlocal done
        # the libraries loaded so far: a contender's own load with its first cell
        row = {c: np.nan for c in MEASURED} | context | {"kernels": kernels()} | result.row
        writer.append(row, result.samples, result.loss_curve)
        done += 1
        if progress is not None:
            progress(done, total, cell, row)

    with interruptible() as signals:
        for group in todo:
            counter.group = group[0].group_label
            try:
                results = run_group(group, config, signals.came, counter)
            except Interrupted as e:
                results = e.results
            with signals.deferred():  # a group's rows are written whole
                for cell, result in zip(group, results):
                    write(cell, result)
            if signals.came():
                raise KeyboardInterrupt
    return total


def run_id_now() -> str:
    """A run id from the local time: sortable and readable."""
    return time.strftime("%Y%m%d-%H%M%S")
