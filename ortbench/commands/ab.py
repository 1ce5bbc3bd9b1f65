"""``ortbench ab``: time BASE and HEAD side by side, one worker process each, and judge
HEAD on the paired ratios. It takes ``bench``'s options (its parser is the parent)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..bench.ab import AB_REPEAT, PairedCell, run_ab, side_label, started, write_sides
from ..bench.checkouts import DEFAULT_CACHE, checkout
from ..bench.matrix import run_id_now
from ..bench.store import KEYS, RESULTS_CSV, ResultsWriter, create_run_folder
from ..bench.user_model import UserFiles
from ..errors import OrtBenchError
from ..progress import Progress
from ..report.paired import AB_MD, ALPHA, ab_comparison, ab_markdown, blocks, min_pvalue
from ..report.units import format_seconds
from ..schema import SIDE, SIDES
from . import EXIT_FAILING, EXIT_INTERRUPTED, EXIT_NOTHING, RUNTIME_COMMANDS
from .bench import matrix_config, shard_todo, start_shard
from .options import add_verdict_options, count

#: Options of ``bench`` that ``ab`` takes but cannot honour, and why.
AB_REFUSES = {
    "keep_going": "ab's exit status is its verdict",
    "baseline": "ab compares each contender with itself on the other side",
}


def paired_rounds(text: str) -> int:
    """``--repeat`` of ``ab``: enough rounds for the paired test to reach p < ALPHA."""
    repeat = count(text)
    if min_pvalue(blocks(repeat)) >= ALPHA:
        least = next(n for n in range(repeat, 100 * repeat) if min_pvalue(blocks(n)) < ALPHA)
        raise argparse.ArgumentTypeError(
            f"must be at least {least}, got {text}: too few pairs for the paired test to "
            f"reach p < {ALPHA}"
        )
    return repeat


def _progress(start: float):
    """Cells as they finish, both sides' median times, with the time left."""
    shown: list[Progress] = []

    def report(done: int, total: int, paired: PairedCell) -> None:
        times = ", ".join(
            f"{name} {format_seconds(statistics.median(r.samples)) if r.samples else r.row['status']}"
            for name, r in paired.sides.items()
        )
        if not shown:
            shown.append(Progress(total, "ortbench ab", "cell"))
        shown[0].step(f"{paired.cell.label}: {times}", time.perf_counter() - start)

    return report


def run(args: argparse.Namespace) -> int:
    """Run the matrix on both sides and judge HEAD: 1 on a regression or failure, 3 when no
    cell ran on both sides, 130 when interrupted."""
    for name, reason in AB_REFUSES.items():
        if getattr(args, name):
            raise OrtBenchError(f"--{name.replace('_', '-')} is for bench only: {reason}")
    config = matrix_config(args)
    todo = shard_todo(args, config)

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
    settings = {"threshold": args.threshold, "warn": args.warn}
    if not start_shard(args, folder, config, todo, settings):
        write_sides(folder, sides)
        return 0
    progress = _progress(time.perf_counter())
    labels = tuple(side_label(vars(s)) for s in sides.values())
    try:
        with started(folder, sides) as workers:
            writer = ResultsWriter(folder, keys=[*KEYS, SIDE])
            user = UserFiles.from_options(args)
            run_ab(config, workers, writer, folder.name, progress, todo, user)
    except KeyboardInterrupt:
        if (folder / RESULTS_CSV).exists():  # the verdict on the finished cells
            comparison = ab_comparison(folder, labels, args.threshold, args.warn)
            (folder / AB_MD).write_text(ab_markdown(comparison), encoding="utf-8")
        print(f"\nortbench: interrupted: finished cells are kept in {folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return verdict(folder, labels, args.threshold, args.warn, log)


def verdict(
    folder: Path,
    labels: tuple[str, ...],
    threshold: float,
    warn: float,
    log: Callable[[str], None],
    note: str = "",
) -> int:
    """Judge an A/B run folder from all its rows at once, write and print ``ab.md``
    (``note`` as its last paragraph) and return the exit status."""
    comparison = ab_comparison(folder, labels, threshold, warn)
    text = ab_markdown(comparison) + (f"\n{note}\n" if note else "")
    (folder / AB_MD).write_text(text, encoding="utf-8")
    print(text)
    if comparison.compared == 0:
        log("nothing to compare: no cell ran on both sides")
        return EXIT_NOTHING
    return EXIT_FAILING if comparison.failing else 0


def add(commands: argparse._SubParsersAction, bench: argparse.ArgumentParser) -> None:
    """Add ``ab``, with the options of ``bench`` (its parent parser)."""
    parser = commands.add_parser(
        "ab",
        parents=[bench],  # bench's options choose the matrix
        conflict_handler="resolve",
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
        type=paired_rounds,
        default=AB_REPEAT,
        help="timing rounds per cell and side (%(default)s)",
    )
    add_verdict_options(parser)
    parser.add_argument(
        "--cache", default=str(DEFAULT_CACHE), help="exported trees and virtualenvs (%(default)s)"
    )
    parser.set_defaults(func=run)
