"""``ortbench ab``: time BASE and HEAD side by side, one worker process each, and judge
HEAD on the paired ratios. It takes ``bench``'s options (its parser is the parent)."""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import sys
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TextIO

from ..bench.ab import (
    AB_REPEAT,
    AB_THRESHOLD,
    AB_WARN,
    MAX_REPEAT_FACTOR,
    PairedCell,
    Sequential,
    SideResult,
    TimeBudget,
    Worker,
    run_ab,
    run_pair_group,
    side_label,
    started,
    timed_together,
    write_sides,
)
from ..bench.checkouts import DEFAULT_CACHE, checkout
from ..bench.instructions import (
    EPOCHS,
    ROUNDS,
    counted_alone,
    counting_worker,
    run_count_group,
)
from ..bench.matrix import BenchConfig, Cell, cells, run_id_now
from ..bench.store import (
    KEYS,
    ResultsWriter,
    create_run_folder,
    mark_interrupted,
    usable_folder,
)
from ..bench.user_model import UserFiles
from ..errors import OrtBenchError
from ..progress import Progress
from ..report.instruction_verdicts import THRESHOLD as INSTRUCTIONS_THRESHOLD
from ..report.paired import AB_MD, ALPHA, ab_comparison, ab_markdown, blocks, min_pvalue
from ..report.units import format_seconds, plural
from ..schema import PER_STEP, SIDE, SIDES
from . import EXIT_FAILING, EXIT_INTERRUPTED, EXIT_NOTHING, RUNTIME_COMMANDS
from .bench import (
    LINE_EVERY,
    add_bench_only_options,
    check_devices_answer,
    matrix_config,
    shard_todo,
    start_shard,
    write_run_plan,
)
from .options import add_verdict_options, count, positive

#: Options of ``bench`` that ``ab`` takes but cannot honour, and why.
AB_REFUSES = {
    "keep_going": "ab's exit status is its verdict",
    "baseline": "ab compares each contender with itself on the other side",
}

#: ``--time-budget`` of ``--quick``: with the imports, the workers' start and the report,
#: a quick run ends within three minutes on a 2-core machine (``docs/benchmarks.md``).
QUICK_TIME_BUDGET = 150.0


def rounds(args: argparse.Namespace) -> int:
    """The rounds per cell and side: ``--repeat``, else the measure's default; enough
    timed rounds for the paired test to reach p < ALPHA, or two counted ones for a spread.

    Raises
    ------
    OrtBenchError
        For too few rounds.
    """
    counting = args.measure == "instructions"
    repeat = args.repeat or (ROUNDS if counting else AB_REPEAT)
    if counting and repeat < 2:
        raise OrtBenchError(f"--repeat must be at least 2 when counting, got {repeat}")
    if not counting and repeat < least_timed_rounds():
        raise OrtBenchError(
            f"--repeat must be at least {least_timed_rounds()}, got {repeat}: too few pairs for "
            f"the paired test to reach p < {ALPHA}"
        )
    return repeat


def least_timed_rounds() -> int:
    """The fewest timed rounds whose blocks let the paired test reach p < ALPHA."""
    return next(n for n in itertools.count(2) if min_pvalue(blocks(n)) < ALPHA)


def ab_config(args: argparse.Namespace) -> BenchConfig:
    """The matrix of ``bench``'s options, with :func:`rounds` rounds and, when counting
    instructions, ``EPOCHS`` epochs unless ``--epochs`` says otherwise.

    Raises
    ------
    OrtBenchError
        For a matrix that cannot run, or too few rounds.
    """
    config = replace(matrix_config(args), repeat=rounds(args))
    check_devices_answer(config)
    if args.measure == "instructions" and args.epochs is None:
        config = replace(config, epochs=EPOCHS)
    if args.measure == "time" and (args.max_repeat or config.repeat) < config.repeat:
        raise OrtBenchError(
            f"--max-repeat must be at least the {config.repeat} rounds of --repeat, "
            f"got {args.max_repeat}"
        )
    return config


def _measured(result: SideResult) -> str:
    """A side's figure in the progress line: its median time or count per step."""
    if result.samples:
        return format_seconds(statistics.median(result.samples))
    if PER_STEP in result.details:
        return f"{result.details[PER_STEP]:,.0f} instructions"
    return result.row["status"]


class AbProgress:
    """What ``ab`` shows while it runs: a line for each cell as it finishes, with both
    sides' figures (a bar on a terminal), and the rounds of the group it is measuring,
    at most a line every :data:`~ortbench.commands.bench.LINE_EVERY` seconds: a group's
    cells finish together at its end, and a counted cell may take minutes.

    Parameters
    ----------
    total : int
        The cells the run measures.
    clock : callable
        Seconds since the run started.
    stream : file, optional
        Where to write; standard error by default.
    """

    def __init__(self, total: int, clock: Callable[[], float], stream: TextIO | None = None):
        self.clock = clock
        self.progress = Progress(total, "ortbench ab", "cell", stream)
        self.noted = -LINE_EVERY

    def cell(self, done: int, total: int, paired: PairedCell) -> None:
        """A cell finished (``run_ab``'s ``progress``)."""
        figures = ", ".join(f"{name} {_measured(r)}" for name, r in paired.sides.items())
        self.progress.step(f"{paired.cell.label}: {figures}", self.clock())

    def note(self, text: str) -> None:
        """How a group's rounds go (``run_ab``'s ``note``), unless a line was written less
        than :data:`~ortbench.commands.bench.LINE_EVERY` seconds ago."""
        now = self.clock()
        if now - self.noted >= LINE_EVERY:
            self.noted = now
            self.progress.note(text, now)


@dataclass(frozen=True)
class Measuring:
    """How ``ab`` measures the cells for one ``--measure``: the workers it starts, how it
    groups the cells and runs a group, the most rounds a cell gets, and the time budget
    of the extra rounds (timing only)."""

    worker: Callable[..., Worker]
    run_group: Callable[..., list[PairedCell]]
    group_by: Callable[[Cell], Hashable]
    most: int
    budget: TimeBudget | None = None
    sequential: Sequential | None = None


def timed(args: argparse.Namespace, config: BenchConfig, run_cells: int) -> Measuring:
    """Timed fits, cells of a group alternated, the cells whose verdict is still open timed
    further (up to ``--max-repeat`` rounds, within ``--time-budget``)."""
    most = args.max_repeat or MAX_REPEAT_FACTOR * config.repeat
    seconds = args.time_budget or (QUICK_TIME_BUDGET if args.quick else None)
    budget = TimeBudget(seconds, run_cells) if seconds else None
    # the p-values are adjusted over the whole matrix, every shard's cells together
    sequential = Sequential(args.threshold, most, len(cells(config)), budget)
    run_group = functools.partial(run_pair_group, sequential=sequential)
    return Measuring(Worker, run_group, timed_together, most, budget, sequential)


def counted(args: argparse.Namespace, config: BenchConfig, run_cells: int) -> Measuring:
    """Counted fits under callgrind, a cell at a time, ``--repeat`` rounds each (a count
    needs no extra rounds)."""
    worker = counting_worker(Path(args.cache))
    return Measuring(worker, run_count_group, counted_alone, config.repeat)


def run(args: argparse.Namespace) -> int:
    """Run the matrix on both sides and judge HEAD: 1 on a regression or failure, 3 when no
    cell ran on both sides, 130 when interrupted."""
    for name, reason in AB_REFUSES.items():
        if getattr(args, name):
            raise OrtBenchError(f"--{name.replace('_', '-')} is for bench only: {reason}")
    config = ab_config(args)
    todo = shard_todo(args, config)
    run_cells = len(cells(config)) if todo is None else len(todo)
    measuring = (counted if args.measure == "instructions" else timed)(args, config, run_cells)
    usable_folder(args.out)  # before the checkouts, which take a while

    def log(line: str) -> None:
        print(f"ortbench ab: {line}", file=sys.stderr)

    sides = {
        name: checkout(ref, Path(args.cache), log)
        for name, ref in zip(SIDES, (args.base, args.head))
    }
    for name, side in sides.items():
        log(f"{name} {side.label}: {side.tree} with {side.environment}")
    folder = create_run_folder(args.out, run_id_now())
    log(f"writing {folder}")
    thresholds = (args.threshold, args.warn, args.instructions_threshold)
    settings = {
        "threshold": args.threshold,
        "warn": args.warn,
        "instructions_threshold": args.instructions_threshold,
        "measure": args.measure,  # shards that measured differently do not merge
        "max_repeat": measuring.most,
    }
    if not start_shard(args, folder, config, todo, settings):
        write_sides(folder, sides)
        return 0
    write_run_plan(folder, config, todo)
    started_at = time.perf_counter()
    progress = AbProgress(run_cells, lambda: time.perf_counter() - started_at)
    labels = tuple(side_label(vars(s)) for s in sides.values())
    if measuring.budget is not None:
        measuring.budget.begin()  # the budget counts from the workers' start
    under = " under valgrind" if args.measure == "instructions" else ""
    progress.note(f"starting the workers of both sides{under}")
    try:
        with started(folder, sides, measuring.worker) as workers:
            writer = ResultsWriter(folder, keys=[*KEYS, SIDE])
            user = UserFiles.from_options(args)
            run_group, group_by = measuring.run_group, measuring.group_by
            run_ab(
                config,
                workers,
                writer,
                folder.name,
                progress.cell,
                todo,
                user,
                run_group,
                group_by,
                progress.note,
            )
    except KeyboardInterrupt:
        mark_interrupted(folder)  # ab.md says so, and lists the cells not run
        comparison = ab_comparison(folder, labels, *thresholds)
        text = ab_markdown(comparison)
        (folder / AB_MD).write_text(text, encoding="utf-8")
        print(text)  # as a finished run's, its heading saying it was interrupted
        print(f"\nortbench: interrupted: finished cells are kept in {folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    notes = []
    budget = measuring.budget
    if budget is not None and budget.stopped:
        notes.append(
            f"The time budget ({budget.seconds:g} s, --time-budget) ended the extra rounds of "
            f"{budget.stopped} cell(s) whose verdict was still open: their verdicts rest on "
            "the blocks timed by then."
        )
    sequential = measuring.sequential
    if sequential is not None and sequential.capped:
        notes.append(
            f"{plural(sequential.capped, 'cell')} reached --max-repeat ({sequential.max_rounds} "
            "rounds) with their verdict still open (the interval of their median ratio holds "
            "the threshold): a larger --max-repeat can decide them."
        )
    note = " ".join(notes)
    return verdict(folder, labels, thresholds, log, note)


def verdict(
    folder: Path,
    labels: tuple[str, ...],
    thresholds: tuple[float, float, float],
    log: Callable[[str], None],
    note: str = "",
) -> int:
    """Judge an A/B run folder from all its rows at once (``thresholds``: threshold, warn
    and instructions threshold), write and print ``ab.md`` (``note`` as its last
    paragraph) and return the exit status."""
    comparison = ab_comparison(folder, labels, *thresholds)
    text = ab_markdown(comparison) + (f"\n{note}\n" if note else "")
    (folder / AB_MD).write_text(text, encoding="utf-8")
    print(text)
    if comparison.failing:
        return EXIT_FAILING
    if comparison.measured == 0:
        log(f"nothing to compare: no cell was measured on both sides (see {AB_MD})")
        return EXIT_NOTHING
    return 0


def add(commands: argparse._SubParsersAction, matrix: argparse.ArgumentParser) -> None:
    """Add ``ab``, with the options of ``bench`` that choose the matrix (its parent)."""
    parser = commands.add_parser(
        "ab",
        parents=[matrix],  # bench's options that choose the matrix
        help=RUNTIME_COMMANDS["ab"],
        description="Run the matrix on two git refs or checkout folders, one worker process "
        "each, their timed fits alternated (A B B A ...); judge each cell on the paired "
        "ratios HEAD / BASE. Writes OUT/<run-id>/ with a side column and ab.md. Exit 1 when "
        "anything regressed or failed.",
    )
    parser.add_argument("base", metavar="BASE", help="git ref or checkout folder")
    parser.add_argument("head", metavar="HEAD", help="git ref or checkout folder")
    parser.add_argument(
        "--repeat",
        type=count,
        help=f"rounds per cell and side (default {AB_REPEAT}, at least {least_timed_rounds()}; "
        f"{ROUNDS} when counting instructions, at least 2)",
    )
    parser.add_argument(
        "--epochs",
        type=count,
        help="epochs of the first fit, and how many more the long fit runs than the short "
        f"one (default {BenchConfig.epochs}; {EPOCHS} when counting instructions)",
    )
    parser.add_argument(
        "--time-budget",
        type=positive,
        metavar="SECONDS",
        help="start no extra rounds (see --max-repeat) that would end later than this many "
        "seconds from the start of the workers; each group of cells gets a share in proportion to "
        f"its cells (default {QUICK_TIME_BUDGET:g} with --quick, else no limit)",
    )
    parser.add_argument(
        "--max-repeat",
        type=count,
        help="rounds per cell and side at most: a cell whose verdict is still open after "
        "--repeat rounds is timed further, four rounds at a time, up to this many (default "
        f"{MAX_REPEAT_FACTOR} times --repeat; --repeat's value: no further rounds)",
    )
    add_verdict_options(parser, AB_THRESHOLD, AB_WARN)
    parser.add_argument(
        "--cache",
        default=str(DEFAULT_CACHE),
        help="exported trees, virtualenvs and the callgrind client (%(default)s)",
    )
    parser.add_argument(
        "--measure",
        choices=("time", "instructions"),
        default="time",
        help="time the fits, or count their instructions under valgrind's callgrind "
        f"(needs valgrind and a C compiler; {ROUNDS} rounds unless --repeat, {EPOCHS} epoch "
        "between the short and the long fit unless --epochs)",
    )
    parser.add_argument(
        "--instructions-threshold",
        type=positive,
        default=INSTRUCTIONS_THRESHOLD,
        help=f"relative change of instructions per step that counts ({INSTRUCTIONS_THRESHOLD})",
    )
    add_bench_only_options(parser, shown=False)  # refused by run, in one line (AB_REFUSES)
    parser.set_defaults(func=run)
