"""A/B runs: BASE and HEAD timed side by side, one worker process per side.

Each side is a git ref or a checkout folder (:mod:`.checkouts`); its worker
(:mod:`.ab_worker`) runs with the side's tree first on the path. The coordinator
prepares each cell on both sides, then alternates their timed fits (A B, B A, A B, ...
see :func:`alternation`), so a drift of the machine lands on
both sides alike and the paired ratios cancel it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import subprocess
import time
from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from ..report.paired import ALPHA, block_ratios, undecided
from ..schema import BASE, FITS, HEAD, POSITIONS, SIDES
from ..training import OrtBenchError
from . import ab_worker, memory, timing
from .checkouts import Checkout
from .interruption import interruptible
from .matrix import BenchConfig, Cell, _problem, _row, cells, data_sizes
from .problems import batch_too_large
from .store import COLUMNS, ResultsWriter
from .timing import SHORT_EPOCHS, TimedFits, slope, step_columns, timing_column
from .user_model import UserFiles

#: Threads of the BLAS and OpenMP pools in a worker unless the environment sets them: the
#: pools' threads spin for a while after each call, and in the idle worker they would take
#: the core the other side's next fit needs.
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: The workers' hash seed unless the environment sets one: both sides' dictionaries and
#: sets then hash alike, a difference between two processes of the same code less.
HASH_SEED = {"PYTHONHASHSEED": "0"}


def alternation(repeat: int) -> list[tuple[str, str]]:
    """The order of the two sides in each of ``repeat`` rounds: A B, B A, A B, ...

    Over two rounds each side's mean position is the same, so a linear drift of the
    machine lands on both alike.
    """
    return [(BASE, HEAD) if k % 2 == 0 else (HEAD, BASE) for k in range(repeat)]


class Side(Protocol):
    """What the coordinator needs from a side: its versions and machine (the row's
    context columns) and an answer to each request."""

    context: dict

    def request(self, command: str, **fields) -> dict: ...


class Worker:
    """A worker process running one side's contenders (:mod:`.ab_worker`).

    Parameters
    ----------
    name : str
        ``BASE`` or ``HEAD``: named in errors.
    side : Checkout
        The tree and interpreter to run.
    log : Path
        The worker's stderr goes there (warnings, tracebacks).
    launcher : sequence of str, optional
        A command that runs the worker's interpreter (valgrind, see :mod:`.instructions`).
    environment : mapping, optional
        Variables that override the environment (by default only the thread pools and
        the hash seed are pinned, where the environment does not set them).
    preexec_fn : callable, optional
        Called in the child before it runs the command (``subprocess.Popen``).
    """

    def __init__(
        self,
        name: str,
        side: Checkout,
        log: Path,
        launcher: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
        preexec_fn: Callable[[], None] | None = None,
    ):
        self.name = name
        self.log = log
        variables = {
            **THREADS,
            **HASH_SEED,
            **os.environ,
            **(environment or {}),
            "PYTHONPATH": str(side.tree),
        }
        source = Path(ab_worker.__file__).read_text(encoding="utf-8")
        with open(log, "ab") as stderr:
            self.process = subprocess.Popen(
                [
                    *launcher,
                    side.python,
                    "-c",
                    source,
                    # the worker measures with these two, whatever the side holds
                    timing.__file__,
                    memory.__file__,
                ],
                cwd=side.tree,
                env=variables,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                preexec_fn=preexec_fn,
            )
        try:
            hello = self.request("hello")
        except BaseException:  # Ctrl-C while it starts (seconds under valgrind): no orphan
            self.process.kill()
            self.process.wait()
            raise
        expected = side.tree / "ortbench"
        if "error" in hello or Path(hello["ortbench"]).resolve() != expected.resolve():
            self.close()
            found = hello.get("error") or hello["ortbench"]
            raise OrtBenchError(
                f"the {name} worker did not import ortbench from {expected}: {found}"
            )
        self.context: dict = hello["context"]

    def request(self, command: str, **fields) -> dict:
        """Send one request and wait for its reply."""
        try:
            self.process.stdin.write(json.dumps({"command": command, **fields}) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except OSError:
            line = ""
        if not line:
            raise OrtBenchError(f"the {self.name} worker stopped: {self._last_log_line()}")
        return json.loads(line)

    def _last_log_line(self) -> str:
        lines = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return f"{lines[-1]} (log: {self.log})" if lines else f"no output (log: {self.log})"

    def end_input(self) -> None:
        """Close the process' input: it exits once it has read everything."""
        if self.process.stdin and not self.process.stdin.closed:
            with contextlib.suppress(OSError):
                self.process.stdin.close()

    def close(self) -> None:
        """End the process: its input closes, it exits; killed if it does not."""
        self.end_input()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@dataclass
class SideResult:
    """One side of one cell: its row, its timed fits and their places in the cell's order."""

    row: dict
    samples: list[float] = field(default_factory=list)
    overheads: list[float] = field(default_factory=list)
    #: each round's long fit, seconds per step (what the paired verdict compares)
    fits: list[float] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    loss_curve: list[float] = field(default_factory=list)
    #: further fields of the row's JSON line (the instruction counts)
    details: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.row["status"] == "ok"


@dataclass
class PairedCell:
    """A cell run on both sides."""

    cell: Cell
    sides: dict[str, SideResult]


@dataclass(frozen=True)
class CellSpec:
    """Everything a worker needs to build a cell's problem and contender, sent whole.

    The hidden layers' sizes are part of the problem's name (``mlp-256-128``); ``user``
    holds the files and options of ``--model``/``--data`` (their target and weight
    columns, trained initializers and loss), None for a built-in problem.
    """

    contender: str
    problem: str
    dataset: str
    batch_size: int
    device: str
    n_samples: int | None = None
    n_features: int | None = None
    user: UserFiles | None = None

    @classmethod
    def of(cls, cell: Cell, config: BenchConfig, user: UserFiles | None = None) -> CellSpec:
        """The spec of a cell of the matrix, on the data ``bench`` sizes for it."""
        return cls(**vars(cell), **data_sizes(cell, config), user=user)

    def to_json(self) -> dict:
        """The spec as JSON values (what the worker is sent)."""
        return json.loads(json.dumps(asdict(self)))


def prepare_group(
    group: list[Cell], config: BenchConfig, sides: dict[str, Side], user: UserFiles | None
) -> list[PairedCell]:
    """Build, fit once and score every cell of ``group`` on each side, on the data ``bench``
    sizes for it. The sides prepare at once, each from a thread of its own (a worker
    answers one request at a time): building and first fits take seconds, and nothing is
    timed meanwhile."""
    rows, specs = [], []
    for cell in group:
        problem = _problem(cell, config)
        row = _row(cell, config, problem)
        reason = batch_too_large(problem, cell.batch_size)
        if reason is not None:
            row["status"] = f"unavailable: {reason}"
        rows.append(row)
        specs.append(CellSpec.of(cell, config, user).to_json())

    def prepare(side: Side) -> list[SideResult]:
        results = []
        for cell, row, spec in zip(group, rows, specs):
            if row["status"] != "ok":
                results.append(SideResult(dict(row)))
                continue
            reply = side.request("prepare", key=cell.label, cell=spec, epochs=config.epochs)
            if "error" in reply:
                reply = {"status": f"failed: {reply['error']}"}
            results.append(SideResult({**row, **reply}))
        return results

    with ThreadPoolExecutor(max_workers=len(sides)) as pool:
        prepared = {name: pool.submit(prepare, side) for name, side in sides.items()}
    return [
        PairedCell(cell, {name: future.result()[k] for name, future in prepared.items()})
        for k, cell in enumerate(group)
    ]


#: Rounds added at a time to the cells still undecided (two blocks of A B B A).
EXTRA_ROUNDS = 4
#: ``ab``'s budget of rounds per cell and side, unless ``--max-repeat`` says otherwise:
#: this many times ``--repeat``.
MAX_REPEAT_FACTOR = 3


@dataclass
class TimeBudget:
    """The seconds from ``start`` after which no extra rounds start (``--time-budget``).

    Each group of cells may spend its share of them, in proportion to its cells, with
    what the groups before it left: its extra rounds end by :meth:`deadline`. ``stopped``
    counts the cells whose verdict was still open when their group's share ran out;
    ``clock`` is what tells the time.
    """

    seconds: float
    cells: int
    clock: Callable[[], float] = time.perf_counter
    begun: int = 0
    stopped: int = 0

    def __post_init__(self) -> None:
        self.begin()

    def begin(self) -> None:
        """Count the seconds from now."""
        self.start = self.clock()

    def deadline(self, cells: int) -> float:
        """When the extra rounds of the next group, of ``cells`` cells, must end."""
        self.begun += cells
        return self.start + self.seconds * min(self.begun / max(self.cells, 1), 1.0)


@dataclass
class Sequential:
    """Sequential sampling: after ``--repeat`` rounds, the cells whose verdict is still
    open (:func:`~ortbench.report.paired.undecided` at ``threshold``, for a run of
    ``cells`` cells) are timed :data:`EXTRA_ROUNDS` rounds more, again and again, up to
    ``max_rounds`` in all, and while ``budget`` has time for them: a group starts further
    rounds only when, at the pace of its first ``--repeat`` rounds, they end by its
    :meth:`TimeBudget.deadline`."""

    threshold: float
    max_rounds: int
    cells: int = 1
    budget: TimeBudget | None = None
    #: cells whose verdict was still open when they reached ``max_rounds``
    capped: int = 0

    def more(self, paired: PairedCell) -> bool:
        """Whether ``paired`` needs more rounds: both sides timed, its verdict open."""
        if not all(result.ok and result.fits for result in paired.sides.values()):
            return False
        fits = [
            (name, seconds, position)
            for name, result in paired.sides.items()
            for seconds, position in zip(result.fits, result.positions)
        ]
        level = ALPHA / max(self.cells, 1)
        return undecided(block_ratios(*zip(*fits)), self.threshold, level)


def timed_together(cell: Cell) -> tuple[str, str, str, int]:
    """What the cells that :func:`run_pair_group` times in one group share: problem, data
    set, device and batch size (they differ by contender only)."""
    return cell.problem, cell.dataset, cell.device, cell.batch_size


def run_pair_group(
    group: list[Cell],
    config: BenchConfig,
    sides: dict[str, Side],
    user: UserFiles | None = None,
    note: Callable[[str], None] | None = None,
    sequential: Sequential | None = None,
) -> list[PairedCell]:
    """Run cells that differ only by contender on both sides, timed fits alternated.

    Every cell is prepared (built, fitted once, scored) on both sides from its
    :class:`CellSpec`, and the length of its long fits sized on both by the protocol of
    :mod:`.timing` (``epochs`` or more epochs more than the short fit, enough to outlast
    it by :data:`~.timing.MIN_EXTRA_SECONDS` on each side; the same on both). Then each
    round times a short fit (``SHORT_EPOCHS`` epochs) of every cell on both sides, then a
    long one, as ``bench`` does. The sides take turns in the order
    ``alternation(repeat)[k]`` in round ``k``. A round's sample of a side is the slope
    between its two fits: the time per step without what a fit pays once. A side whose
    cell failed or could not run is skipped; a fit that breaks marks it failed. With
    ``sequential``, the cells whose verdict is still open get further rounds, in the same
    alternation, until it closes or the budget is spent (:class:`Sequential`). ``note``,
    where given, hears of each round as it ends (``"<group>: round 3/10"``).

    Returns
    -------
    list of PairedCell
        One per cell of the group, in order; each side's samples in the order they ran,
        with their places in the cell's order of samples (both sides counted).
    """
    results = prepare_group(group, config, sides, user)

    def fit(key: tuple[int, str], epochs: int) -> tuple[float, bool] | None:
        k, name = key
        result = results[k].sides[name]
        if not result.ok:
            return None
        reply = sides[name].request("time", key=results[k].cell.label, epochs=epochs)
        if "error" in reply:
            result.row["status"] = f"failed: {reply['error']}"
            return None
        return reply["seconds"], bool(reply.get("quiet_wait_gave_up"))

    fits = TimedFits(fit)
    long_epochs = {}
    for k in range(len(results)):
        epochs = fits.long_epochs([(k, BASE), (k, HEAD)], config.epochs)
        long_epochs.update({(k, BASE): epochs, (k, HEAD): epochs})
        for result in results[k].sides.values():
            if result.ok:
                result.row["timing"] = timing_column(epochs)

    def time_rounds(first: int, count: int, keys: list[int]) -> None:
        """Rounds ``first`` to ``first + count - 1`` of the cells ``keys``."""
        orders = [
            [(k, name) for k in keys for name in order]
            for order in alternation(first + count)[first:]
        ]
        planned = max(first + count, config.repeat)
        for k_round, durations in enumerate(fits.rounds(long_epochs, orders), first + 1):
            if note is not None:
                note(f"{group[0].group_label}: round {k_round}/{planned}")
            for (k, name), (short, long) in durations.items():
                result = results[k].sides[name]
                steps = result.row["steps"] // config.epochs
                epochs = long_epochs[k, name]
                per_step, per_fit = slope(short, long, SHORT_EPOCHS * steps, epochs * steps)
                result.positions.append(sum(len(r.samples) for r in results[k].sides.values()))
                result.samples.append(per_step)
                result.overheads.append(per_fit)
                result.fits.append(long / (epochs * steps))

    budget = sequential.budget if sequential is not None else None
    clock = budget.clock if budget is not None else time.perf_counter
    deadline = budget.deadline(len(results)) if budget is not None else math.inf
    begun = clock()
    time_rounds(0, config.repeat, list(range(len(results))))
    per_round = (clock() - begun) / (config.repeat * len(results))
    done = config.repeat
    while sequential is not None and done < sequential.max_rounds:
        keys = [k for k, paired in enumerate(results) if sequential.more(paired)]
        if not keys:
            break
        count = min(EXTRA_ROUNDS, sequential.max_rounds - done)
        if budget is not None and clock() + per_round * count * len(keys) > deadline:
            budget.stopped += len(keys)
            break
        time_rounds(done, count, keys)
        done += count
    if sequential is not None and done >= sequential.max_rounds:
        sequential.capped += sum(sequential.more(paired) for paired in results)
    for k, paired in enumerate(results):
        for name, result in paired.sides.items():
            if not result.ok:
                continue
            result.row["timing"] = timing_column(long_epochs[k, name], fits.quiet_gave_up[k, name])
            reply = sides[name].request("finish", key=paired.cell.label)
            result.loss_curve = reply.pop("loss_curve", [])
            result.row.update(reply)
    return results


#: Timed fits per side and cell unless ``--repeat`` says otherwise: 12 blocks of two
#: rounds, enough for the signed-rank test to decide once its p-values are adjusted over
#: the cells of a run (see :func:`ortbench.report.paired.min_pvalue`); the cells whose
#: verdict is still open then get more (:class:`Sequential`).
AB_REPEAT = 24
#: ``ab``'s defaults of ``--threshold`` and ``--warn``: a paired run within one machine
#: resolves smaller changes than ``compare`` of two separate runs (measured rates:
#: ``docs/benchmarks.md``).
AB_THRESHOLD, AB_WARN = 0.03, 0.02
#: What ``ab.json`` in an A/B run folder holds: each side's ref, commit, tree, environment.
AB_JSON = "ab.json"


def _side_row(paired: PairedCell, name: str, context: dict, run_id: str) -> dict:
    result = paired.sides[name]
    row = dict.fromkeys(COLUMNS, np.nan) | context | result.row
    row.update(run_id=run_id, side=name)
    if result.ok and result.samples:
        row.update(step_columns(result.samples, result.overheads))
    return row


def write_sides(folder: Path, sides: dict[str, Checkout]) -> None:
    """Record each side's ref, commit, tree and environment in ``folder/ab.json``."""
    info = {name: {**vars(side), "tree": str(side.tree)} for name, side in sides.items()}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / AB_JSON).write_text(json.dumps(info, indent=1), encoding="utf-8")


def side_label(side: dict) -> str:
    """How a report names a side of ``ab.json``: its ref and commit (else its folder)."""
    return f"{side['label']} ({side['commit'][:8] if side['commit'] else side['tree']})"


@contextlib.contextmanager
def started(
    folder: Path,
    sides: dict[str, Checkout],
    worker: Callable[[str, Checkout, Path], Worker] = Worker,
) -> Iterator[dict[str, Worker]]:
    """One worker per side, made by ``worker``, logging into ``folder`` (where
    ``ab.json`` records the sides); the workers end with the block. They start together,
    each from its own thread: a side's imports take seconds, on a core of their own."""
    write_sides(folder, sides)
    workers: dict[str, Worker] = {}
    try:
        with ThreadPoolExecutor(max_workers=len(sides)) as pool:
            starting = {
                name: pool.submit(worker, name, side, folder / f"worker-{name}.log")
                for name, side in sides.items()
            }
        for name, future in starting.items():
            if future.exception() is None:
                workers[name] = future.result()
        for future in starting.values():
            future.result()  # the first side that failed to start says why
        yield workers
    finally:
        for worker in workers.values():  # every side exits at once, not one after the other
            worker.end_input()
        for worker in workers.values():
            worker.close()


def run_ab(
    config: BenchConfig,
    sides: dict[str, Side],
    writer: ResultsWriter,
    run_id: str,
    progress: Callable[[int, int, PairedCell], None] | None = None,
    only: Collection[Cell] | None = None,
    user: UserFiles | None = None,
    run_group: Callable[..., list] = run_pair_group,
    group_by: Callable[[Cell], Hashable] = timed_together,
    note: Callable[[str], None] | None = None,
) -> int:
    """Run every cell of the matrix on both sides, group by group (see
    :func:`run_pair_group`), and append both sides' rows as each group finishes.

    Parameters
    ----------
    config : BenchConfig
        The matrix, epochs and repeat.
    sides : dict
        ``BASE`` and ``HEAD`` sides (workers).
    writer : ResultsWriter
        Writes the run folder; its keys include ``side``. Each JSON line also holds the
        places of its timed fits in the cell's order of fits (``fit_positions``).
    run_id : str
        The ``run_id`` column.
    progress : callable, optional
        Called with (cells done, cells, cell) as each cell finishes.
    only : collection of Cell, optional
        Run these cells of the matrix only (a shard, see :mod:`.shard`).
    user : UserFiles, optional
        The files of ``--model``/``--data``: each side's worker loads them itself.
    run_group : callable, optional
        What runs a group of cells on both sides: the timed fits (:func:`run_pair_group`),
        or the counted ones (:func:`.instructions.run_count_group`).
    group_by : callable, optional
        What the cells of a group share: consecutive cells of the matrix with the same key
        go to ``run_group`` together (:func:`timed_together`, or each cell alone).
    note : callable, optional
        Handed to ``run_group``, which tells it how a group's rounds go while its cells
        are not done yet (a line of text each).

    Returns
    -------
    int
        The number of cells run.

    Raises
    ------
    OrtBenchError
        When a worker stops.
    KeyboardInterrupt
        On SIGINT or SIGTERM; the rows of the groups that finished are written.
    """
    if set(sides) != set(SIDES):
        raise ValueError(f"sides must be {SIDES}, got {sorted(sides)}")
    todo = [cell for cell in cells(config.check()) if only is None or cell in only]
    done = 0
    with interruptible() as signals:
        for _, group in itertools.groupby(todo, key=group_by):
            results = run_group(list(group), config, sides, user, note)
            with signals.deferred():  # a group's rows are written whole
                for paired in results:
                    for name, result in paired.sides.items():
                        row = _side_row(paired, name, sides[name].context, run_id)
                        details = {POSITIONS: result.positions, FITS: result.fits}
                        details.update(result.details)
                        writer.append(row, result.samples, result.loss_curve, **details)
            if signals.came():
                raise KeyboardInterrupt
            for paired in results:
                done += 1
                if progress is not None:
                    progress(done, len(todo), paired)
    return len(todo)
