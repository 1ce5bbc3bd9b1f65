"""``ortbench bench``: run the comparison matrix into a new run folder and report it. Its
options choose the matrix, for ``ab`` too (see :func:`matrix_config`)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from ..bench.calibration import write_calibration
from ..bench.contenders import CONTENDERS, unavailable_reason
from ..bench.datasets import DATASETS, MIN_SAMPLES
from ..bench.machine import available_devices
from ..bench.matrix import (
    DEVICES,
    QUICK,
    UNSTABLE,
    BenchConfig,
    Cell,
    Stage,
    cells,
    data_sizes,
    planned_stages,
    run_id_now,
    run_matrix,
)
from ..bench.problems import (
    ETA0,
    PROBLEMS,
    default_datasets,
    has_hidden_layers,
    make_problem,
    parse_hidden,
    sized_problems,
)
from ..bench.shard import Shard, parse_shard, shard_cells, write_shard
from ..bench.store import (
    RESULTS_CSV,
    ResultsWriter,
    create_run_folder,
    mark_interrupted,
    read_records,
    write_plan,
)
from ..bench.user_model import USER_LOSSES, UserFiles, load_user_problem
from ..errors import OrtBenchError
from ..progress import Progress
from ..report.html import write_reports
from ..report.summary import SUMMARY_MD
from ..report.units import format_seconds, plural
from . import EXIT_FAILING, EXIT_INTERRUPTED, RUNTIME_COMMANDS
from .options import at_least, count, counts, joined, names

#: Seconds at least between two lines on a group's stages in a log (a cell's row always
#: gets its line).
LINE_EVERY = 10.0


class RunProgress:
    """What ``bench`` shows while it runs: the stages of its groups as they finish (a bar
    on a terminal, else a line at most every :data:`LINE_EVERY` seconds), and a line for
    each cell as its row is written. The time left counts stages, which finish at a
    steady pace, not cells, which finish together at the end of their group.

    Parameters
    ----------
    stages : int
        The stages the run plans (:func:`~ortbench.bench.matrix.planned_stages`).
    clock : callable
        Seconds since the run started.
    stream : file, optional
        Where to write; standard error by default.
    """

    def __init__(self, stages: int, clock: Callable[[], float], stream: TextIO | None = None):
        self.clock = clock
        self.progress = Progress(stages, "ortbench bench", "stage", stream, every=LINE_EVERY)

    def stage(self, stage: Stage) -> None:
        """A stage of a group finished (``run_matrix``'s ``stages``)."""
        self.progress.grow(stage.total - self.progress.total)
        steps = stage.done - self.progress.done
        self.progress.step(f"{stage.group}: {stage.text}", self.clock(), steps)

    def cell(self, done: int, total: int, cell: Cell, row: dict) -> None:
        """The row of a cell was written (``run_matrix``'s ``progress``)."""
        status = row["status"]
        if status == "ok":
            status = f"{format_seconds(row['seconds_per_step'])} per step"
        self.progress.note(f"cell {done}/{total} {cell.label}: {status}", self.clock())


def matrix_config(args: argparse.Namespace) -> BenchConfig:
    """The matrix the options of ``bench`` (or ``ab``) choose, checked; a value given twice
    runs once (a note on stderr says so).

    Raises
    ------
    OrtBenchError
        For a matrix that cannot run.
    """
    config = QUICK if args.quick else BenchConfig()
    overrides = {
        "contenders": args.contenders and joined(args.contenders),
        "problems": args.problem and joined(args.problem),
        "datasets": args.dataset and joined(args.dataset),
        "batch_sizes": args.batch_sizes and joined(args.batch_sizes),
        "devices": args.devices and joined(args.devices),
        "epochs": args.epochs,
        "repeat": args.repeat,
        "n_samples": args.n_samples,
        "n_features": args.n_features,
        "baseline": args.baseline,
    }
    overrides.update(_own_problems(args, overrides["problems"] or config.problems))
    overrides["datasets"] = overrides["datasets"] or default_datasets(overrides["problems"])
    repeated = []
    for name, values in overrides.items():
        if isinstance(values, tuple) and len(set(values)) < len(values):
            repeated.append(f"--{name.replace('_', '-')} {' '.join(map(str, values))}")
            overrides[name] = tuple(dict.fromkeys(values))
    if repeated:
        print(f"ortbench: note: repeated values run once: {'; '.join(repeated)}", file=sys.stderr)
    return replace(config, **{k: v for k, v in overrides.items() if v is not None}).check()


def _own_problems(args: argparse.Namespace, problems: tuple[str, ...]) -> dict:
    """The problems and data sets of ``--model``/``--data`` (checked and loaded before any
    cell runs) or of ``--hidden``; nothing to override without them."""
    user = UserFiles.from_options(args)
    if user is not None:
        problem = load_user_problem(user)
        return {"problems": (problem.name,), "datasets": (problem.dataset,)}
    if args.hidden:
        hidden = parse_hidden(args.hidden)
        if not any(has_hidden_layers(p) for p in problems):
            raise OrtBenchError(
                f"--hidden sizes the MLP problems, and none of {', '.join(problems)} is one: "
                "add --problem mlp"
            )
        return {"problems": sized_problems(problems, hidden)}
    return {}


def check_devices_answer(config: BenchConfig) -> None:
    """Refuse a matrix none of whose devices answers on this machine (one absent among
    others: its rows say so).

    Raises
    ------
    OrtBenchError
        Naming the devices the machine has and what CUDA needs.
    """
    here = available_devices()
    if not set(config.devices) & set(here):
        raise OrtBenchError(
            f"--devices {' '.join(config.devices)}: none answers on this machine, which has "
            f'{", ".join(here)}: CUDA needs the gpu extra (pip install ".[gpu]") and a '
            "device its libraries load on"
        )


def check_some_cell_runs(config: BenchConfig) -> None:
    """Refuse a matrix none of whose cells can run, before its run folder exists.

    A cell cannot run when its batch size is too large for its training rows or its
    contender cannot run it (:func:`~ortbench.bench.contenders.unavailable_reason`, what
    its row would say); the cells are looked at in the run's order until one can.

    Raises
    ------
    OrtBenchError
        Naming the first cell's reason (which says what to change) and how many others
        there are.
    """
    reasons = []
    for cell in cells(config):
        problem = make_problem(cell.problem, cell.dataset, **data_sizes(cell, config))
        reason = unavailable_reason(cell.contender, problem, cell.batch_size, cell.device)
        if reason is None:
            return
        reasons.append(reason)
    first, *others = dict.fromkeys(reasons)
    more = f" (and {plural(len(others), 'other reason')})" if others else ""
    raise OrtBenchError(f"no cell can run: {first}{more}")


def _shard_option(text: str) -> Shard:
    """``--shard I/N``."""
    try:
        return parse_shard(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def shard_todo(args: argparse.Namespace, config: BenchConfig) -> list[Cell] | None:
    """The cells of ``--shard`` (None without it: the whole matrix)."""
    if args.shard is None:
        if args.shard_timings:
            raise OrtBenchError("--shard-timings balances shards: give --shard I/N too")
        return None
    return shard_cells(config, args.shard, args.shard_timings)


def start_shard(
    args: argparse.Namespace,
    folder: Path,
    config: BenchConfig,
    todo: list[Cell] | None,
    settings: dict | None = None,
) -> bool:
    """Record the shard in its folder (``shard.json``); False when it holds no cell."""
    if todo is None:
        return True
    write_shard(folder, args.command, config, args.shard, todo, settings)
    if not todo:
        print(
            f"ortbench {args.command}: shard {args.shard} holds no cell (fewer groups of "
            f"cells than shards); {folder} records it for ortbench merge",
            file=sys.stderr,
        )
    return bool(todo)


def write_run_plan(folder: Path, config: BenchConfig, todo: list[Cell] | None) -> None:
    """Record the cells the run sets out to run, those of ``todo`` (all without it), in
    ``plan.json``: the reports tell the cells an interrupted run never reached from it."""
    only = None if todo is None else set(todo)
    write_plan(folder, [vars(c) for c in cells(config) if only is None or c in only])


def run(args: argparse.Namespace) -> int:
    """Run the matrix and write its reports; 1 when a cell failed or was unstable (0 with
    ``--keep-going``), 130 when interrupted."""
    config = matrix_config(args)
    check_devices_answer(config)
    todo = shard_todo(args, config)
    check_some_cell_runs(config)
    folder = create_run_folder(args.out, run_id_now())
    start = time.perf_counter()
    print(f"ortbench bench: writing {folder}", file=sys.stderr)
    if not start_shard(args, folder, config, todo):
        return 0
    write_run_plan(folder, config, todo)
    try:
        writer = ResultsWriter(folder)
        write_calibration(folder, config.repeat)
        shown = RunProgress(planned_stages(config, todo), lambda: time.perf_counter() - start)
        run_matrix(config, writer, folder.name, shown.cell, todo, shown.stage)
        write_calibration(folder, config.repeat)
    except KeyboardInterrupt:
        mark_interrupted(folder)
        if (folder / RESULTS_CSV).exists():
            print(write_reports(folder))  # as a finished run's, its title saying interrupted
        print(f"\nortbench: interrupted: finished cells are kept in {folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(write_reports(folder))
    elapsed = time.perf_counter() - start
    print(
        f"ortbench bench: {folder / SUMMARY_MD} and plots written in {elapsed:.0f}s",
        file=sys.stderr,
    )
    return cells_status(folder, args.keep_going, "bench")


def cells_status(folder: Path, keep_going: bool, command: str) -> int:
    """The exit status of a finished bench run folder: 1 when a cell failed or was
    unstable (0 with ``keep_going``), else 0.

    Raises
    ------
    OrtBenchError
        When every cell was unavailable (a usage error: nothing could run).
    """
    statuses = [record["status"] for record in read_records(folder)]
    if not any(s == "ok" or s.startswith((UNSTABLE, "failed")) for s in statuses):
        # every cell unavailable once built (a failed cell is a failure: exit 1 below)
        raise OrtBenchError(f"no cell could run ({statuses[0] if statuses else 'no cells'})")
    bad = [s for s in statuses if s.startswith(("failed", UNSTABLE))]
    if bad and not keep_going:
        print(
            f"ortbench {command}: {plural(len(bad), 'cell')} failed or unstable (see "
            f"{folder / SUMMARY_MD}); --keep-going exits 0 on them",
            file=sys.stderr,
        )
        return EXIT_FAILING
    return 0


def add_own_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --data and their options, the same on bench, ab and profile."""
    own = parser.add_argument_group("your own model and data")
    own.add_argument("--model", metavar="FILE.onnx", help="train this ONNX model")
    own.add_argument(
        "--data",
        nargs="+",
        metavar="FILE",
        help="its data: .npz (X, y, sample_weight), X.npy y.npy [w.npy], .csv or .parquet",
    )
    own.add_argument("--target", metavar="COLUMN", help="the target column of .csv/.parquet data")
    own.add_argument("--sample-weight", metavar="COLUMN", help="the sample weights' column")
    own.add_argument("--weights", nargs="+", metavar="NAME", help="initializers to train")
    own.add_argument("--loss", choices=USER_LOSSES, help="training loss (default: log for a "
                     "classifier, else squared_error)")  # fmt: skip
    own.add_argument(
        "--learning-rate",
        type=float,
        metavar="RATE",
        help=f"the SGD learning rate every contender trains it with (default {ETA0})",
    )


def add_bench_only_options(parser: argparse.ArgumentParser, shown: bool = True) -> None:
    """--baseline and --keep-going, which ``bench`` honours; ``ab`` takes them unshown
    (``shown`` False: not in its help) to refuse them in one line."""

    def shown_as(text: str) -> str:
        return text if shown else argparse.SUPPRESS

    parser.add_argument(
        "--baseline", metavar="NAME", help=shown_as("the contender speed-ups are against")
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help=shown_as("exit 0 even when cells failed or were unstable (default: exit 1)"),
    )


def add(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``bench``; return the parser of the options that choose the matrix, which
    ``bench`` and ``ab`` share (each adds its own ``--epochs`` and ``--repeat``, and
    :func:`add_bench_only_options`)."""
    matrix = argparse.ArgumentParser(add_help=False)
    matrix.add_argument(
        "--quick",
        action="store_true",
        help=f"a short run: {', '.join(QUICK.contenders)} on {QUICK.problems[0]} at batch "
        f"sizes {', '.join(map(str, QUICK.batch_sizes))} (other options still apply)",
    )
    matrix.add_argument(
        "--contenders", type=names, nargs="+", metavar="NAME", help=f"of {', '.join(CONTENDERS)}"
    )
    matrix.add_argument(
        "--problem",
        type=names,
        nargs="+",
        metavar="NAME",
        help=f"of {', '.join(PROBLEMS)} (default {' '.join(BenchConfig.problems)})",
    )
    matrix.add_argument(
        "--dataset",
        type=names,
        nargs="+",
        metavar="NAME",
        help=f"of {', '.join(DATASETS)} (default {' '.join(BenchConfig.datasets)}; "
        f"{default_datasets(('cnn',))[0]} when every problem is a network)",
    )
    matrix.add_argument(
        "--batch-sizes",
        type=counts,
        nargs="+",
        metavar="N",
        help=f"default {' '.join(map(str, BenchConfig.batch_sizes))}",
    )
    matrix.add_argument(
        "--devices",
        type=names,
        nargs="+",
        metavar="NAME",
        help=f"of {', '.join(DEVICES)} (default: those this machine has)",
    )
    matrix.add_argument("--hidden", nargs="+", metavar="H1,H2", help="MLP sizes: 50,10 256,128")
    matrix.add_argument(
        "--n-samples", type=at_least(MIN_SAMPLES), metavar="N", help="rows of each data set"
    )
    matrix.add_argument("--n-features", type=count, metavar="N", help="features of generated data")
    add_own_model_options(matrix)
    sharding = matrix.add_argument_group("one matrix over several machines")
    sharding.add_argument(
        "--shard",
        type=_shard_option,
        metavar="I/N",
        help="run the I-th of N parts of the matrix (whole groups of cells, balanced); "
        "ortbench merge joins the N run folders",
    )
    sharding.add_argument(
        "--shard-timings",
        metavar="RUN_DIR",
        help="balance the parts on the cells' times in this earlier run folder (default: "
        "on their number)",
    )
    matrix.add_argument("--out", default="reports", help="parent folder of the run folder")
    bench = commands.add_parser(
        "bench",
        parents=[matrix],
        help=RUNTIME_COMMANDS["bench"],
        description="Run contenders x problems x data sets x batch sizes x devices and write "
        "results.csv, results.jsonl, loss_curves.csv, summary.md and plots into OUT/<run-id>/.",
    )
    bench.add_argument(
        "--epochs",
        type=count,
        help="epochs of the first fit, and how many more the long timed fit runs than the "
        f"short one (default {BenchConfig.epochs})",
    )
    bench.add_argument(
        "--repeat",
        type=count,
        help=f"timing rounds per cell, a short and a long fit each (default {BenchConfig.repeat})",
    )
    add_bench_only_options(bench)
    bench.set_defaults(func=run)
    return matrix
