"""The commands that need an onnxruntime build: ``bench``, ``ab``, ``merge`` and
``profile``. :mod:`ortbench.cli` imports this module only when one of them runs, so that
``compare`` and ``report`` work where no runtime is installed (see :mod:`ortbench.cli` for
the exit statuses).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from .bench.ab import (
    AB_JSON,
    AB_REPEAT,
    PairedCell,
    SideResult,
    Worker,
    run_ab,
    run_pair_group,
    side_label,
    started,
    write_sides,
)
from .bench.calibration import write_calibration
from .bench.checkouts import DEFAULT_CACHE, checkout
from .bench.contenders import CONTENDERS, Unavailable, make_contender
from .bench.datasets import DATASETS
from .bench.instructions import ROUNDS, client_library, counting_worker, run_count_group
from .bench.matrix import (
    DEVICES,
    QUICK,
    UNSTABLE,
    BenchConfig,
    Cell,
    run_id_now,
    run_matrix,
)
from .bench.merge import merge_runs
from .bench.problems import (
    PROBLEMS,
    default_datasets,
    make_problem,
    parse_hidden,
    problem_name,
    sized_problems,
)
from .bench.shard import Shard, parse_shard, shard_cells, write_shard
from .bench.store import (
    KEYS,
    RESULTS_CSV,
    ResultsWriter,
    create_run_folder,
    read_records,
    usable_folder,
)
from .bench.user_model import USER_LOSSES, UserFiles, load_user_problem
from .cli import (
    EXIT_FAILING,
    EXIT_INTERRUPTED,
    EXIT_NOTHING,
    RUNTIME_COMMANDS,
)
from .errors import OrtBenchError
from .profiling.driver import ProfileRequest, profile
from .progress import Progress
from .report.html import write_index, write_reports
from .report.instruction_verdicts import THRESHOLD as INSTRUCTIONS_THRESHOLD
from .report.paired import AB_MD, ALPHA, ab_comparison, ab_markdown, blocks, min_pvalue
from .report.summary import SUMMARY_MD
from .report.units import format_seconds
from .schema import PER_STEP, SIDE, SIDES


def _names(values: list[str]) -> tuple[str, ...]:
    """Accept ``a b``, ``a,b`` or a mix."""
    return tuple(name for value in values for name in value.split(",") if name)


def _integers(values: list[str]) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in _names(values))
    except ValueError:
        raise OrtBenchError(f"batch sizes must be integers, got {' '.join(values)}") from None


def _progress(start: float):
    """Cells as they finish, with the time left: a bar on a terminal, else one line each."""
    shown: list[Progress] = []

    def report(done: int, total: int, cell: Cell, row: dict) -> None:
        status = row["status"]
        if status == "ok":
            status = f"{format_seconds(row['seconds_per_step'])} per step"
        if not shown:
            shown.append(Progress(total, "ortbench bench", "cell"))
        shown[0].step(f"{cell.label}: {status}", time.perf_counter() - start)

    return report


def _matrix_config(args: argparse.Namespace) -> BenchConfig:
    config = QUICK if args.quick else BenchConfig()
    overrides = {
        "contenders": args.contenders and _names(args.contenders),
        "problems": args.problem and _names(args.problem),
        "datasets": args.dataset and _names(args.dataset),
        "batch_sizes": args.batch_sizes and _integers(args.batch_sizes),
        "devices": args.devices and _names(args.devices),
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


def _shard_option(text: str) -> Shard:
    """``--shard I/N``, checked by argparse (a bad value is one line, exit 2)."""
    try:
        return parse_shard(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _shard(args: argparse.Namespace, config: BenchConfig) -> list[Cell] | None:
    """The cells of ``--shard`` (None without it: the whole matrix)."""
    if args.shard is None:
        if args.shard_timings:
            raise OrtBenchError("--shard-timings balances shards: give --shard I/N too")
        return None
    return shard_cells(config, args.shard, args.shard_timings)


def _start_shard(
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


def _bench(args: argparse.Namespace) -> int:
    config = _matrix_config(args)
    todo = _shard(args, config)
    folder = create_run_folder(args.out, run_id_now())
    start = time.perf_counter()
    print(f"ortbench bench: writing {folder}", file=sys.stderr)
    if not _start_shard(args, folder, config, todo):
        return 0
    try:
        writer = ResultsWriter(folder)
        write_calibration(folder, config.repeat)
        run_matrix(config, writer, folder.name, progress=_progress(start), only=todo)
        write_calibration(folder, config.repeat)
    except KeyboardInterrupt:
        if (folder / RESULTS_CSV).exists():
            write_reports(folder)
        print(f"\nortbench: interrupted: finished cells are kept in {folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(write_reports(folder))
    elapsed = time.perf_counter() - start
    print(
        f"ortbench bench: {folder / SUMMARY_MD} and plots written in {elapsed:.0f}s",
        file=sys.stderr,
    )
    statuses = [record["status"] for record in read_records(folder)]
    if "ok" not in statuses and not any(s.startswith(UNSTABLE) for s in statuses):
        raise OrtBenchError(f"no cell could run ({statuses[0] if statuses else 'no cells'})")
    bad = [s for s in statuses if s.startswith(("failed", UNSTABLE))]
    if bad and not args.keep_going:
        print(
            f"ortbench bench: {len(bad)} cells failed or unstable (see {folder / SUMMARY_MD}); "
            "--keep-going exits 0 on them",
            file=sys.stderr,
        )
        return EXIT_FAILING
    return 0


#: Options of ``bench`` that ``ab`` takes but cannot honour, and why.
AB_REFUSES = {
    "keep_going": "ab's exit status is its verdict",
    "baseline": "ab compares each contender with itself on the other side",
}


def _ab(args: argparse.Namespace) -> int:
    for name, reason in AB_REFUSES.items():
        if getattr(args, name):
            raise OrtBenchError(f"--{name.replace('_', '-')} is for bench only: {reason}")
    if args.threshold <= 0:
        raise OrtBenchError(f"--threshold must be > 0, got {args.threshold}")
    if not 0 <= args.warn <= args.threshold:
        raise OrtBenchError(f"--warn must be between 0 and --threshold, got {args.warn}")
    if args.instructions_threshold <= 0:
        raise OrtBenchError(
            f"--instructions-threshold must be > 0, got {args.instructions_threshold}"
        )
    counting = args.measure == "instructions"
    worker = counting_worker(Path(args.cache)) if counting else Worker
    args.repeat = args.repeat or (ROUNDS if counting else AB_REPEAT)
    if counting and args.repeat < 2:
        raise OrtBenchError(f"--repeat {args.repeat}: counting needs 2 rounds for a spread")
    if not counting and min_pvalue(blocks(args.repeat)) >= ALPHA:
        raise OrtBenchError(
            f"--repeat {args.repeat} is too few pairs for the paired test to reach p < {ALPHA}"
        )
    config = _matrix_config(args)
    todo = _shard(args, config)

    def log(line: str) -> None:
        print(f"ortbench ab: {line}", file=sys.stderr)

    sides = {
        name: checkout(ref, Path(args.cache), log)
        for name, ref in zip(SIDES, (args.base, args.head))
    }
    for name, side in sides.items():
        log(f"{name} {side.label}: {side.tree} with {side.environment}")
    folder = create_run_folder(args.out, run_id_now())
    run_id = folder.name
    log(f"writing {folder}")
    thresholds = (args.threshold, args.warn, args.instructions_threshold)
    settings = {
        "threshold": args.threshold,
        "warn": args.warn,
        "instructions_threshold": args.instructions_threshold,
        "measure": args.measure,  # shards that measured differently do not merge
    }
    if not _start_shard(args, folder, config, todo, settings):
        write_sides(folder, sides)
        return 0
    start = time.perf_counter()

    shown: list[Progress] = []

    def measured(result: SideResult) -> str:
        if result.samples:
            return format_seconds(statistics.median(result.samples))
        if PER_STEP in result.details:
            return f"{result.details[PER_STEP]:,.0f} instructions"
        return result.row["status"]

    def progress(done: int, total: int, paired: PairedCell) -> None:
        times = ", ".join(f"{name} {measured(r)}" for name, r in paired.sides.items())
        if not shown:
            shown.append(Progress(total, "ortbench ab", "cell"))
        shown[0].step(f"{paired.cell.label}: {times}", time.perf_counter() - start)

    labels = tuple(side_label(vars(s)) for s in sides.values())
    try:
        with started(folder, sides, worker) as workers:
            writer = ResultsWriter(folder, keys=[*KEYS, SIDE])
            user = UserFiles.from_options(args)
            run_group = run_count_group if counting else run_pair_group
            run_ab(config, workers, writer, run_id, progress, todo, user, run_group)
    except KeyboardInterrupt:
        if (folder / RESULTS_CSV).exists():  # the verdict on the finished cells
            comparison = ab_comparison(folder, labels, *thresholds)
            (folder / AB_MD).write_text(ab_markdown(comparison), encoding="utf-8")
        print(f"\nortbench: interrupted: finished cells are kept in {folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return _ab_verdict(folder, labels, thresholds, log)


def _ab_verdict(
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
    if comparison.compared == 0:
        log("nothing to compare: no cell ran on both sides")
        return EXIT_NOTHING
    return EXIT_FAILING if comparison.failing else 0


def _merge(args: argparse.Namespace) -> int:
    """Merge the shards' folders, then report as the unsharded command would."""
    folder = create_run_folder(args.out, run_id_now())
    try:
        merged = merge_runs(args.run_dirs, folder)
    except OrtBenchError:
        if not any(folder.iterdir()):  # refused before writing: leave nothing behind
            folder.rmdir()
        raise
    note = merged.machine_note()
    print(f"ortbench merge: {len(args.run_dirs)} shards merged into {folder}", file=sys.stderr)
    if note:
        print(f"ortbench merge: {note}", file=sys.stderr)
    if merged.command == "ab":
        info = json.loads((folder / AB_JSON).read_text(encoding="utf-8"))
        labels = tuple(side_label(info[name]) for name in SIDES)
        settings = merged.settings

        def log(line: str) -> None:
            print(f"ortbench merge: {line}", file=sys.stderr)

        thresholds = (
            settings["threshold"],
            settings["warn"],
            settings.get("instructions_threshold", INSTRUCTIONS_THRESHOLD),
        )
        return _ab_verdict(folder, labels, thresholds, log, note)
    print(write_reports(folder))
    statuses = [record["status"] for record in read_records(folder)]
    if "ok" not in statuses:
        raise OrtBenchError(f"no cell could run ({statuses[0] if statuses else 'no cells'})")
    return 0


def _own_problems(args: argparse.Namespace, problems: tuple[str, ...]) -> dict:
    """The problems and data sets of ``--model``/``--data`` (checked and loaded before any
    cell runs) or of ``--hidden``; nothing to override without them."""
    user = UserFiles.from_options(args)
    if user is not None:
        if args.problem or args.dataset or args.hidden or args.n_samples or args.n_features:
            raise OrtBenchError(
                "--model and --data replace --problem, --dataset, --hidden, --n-samples "
                "and --n-features"
            )
        problem = load_user_problem(user)
        return {"problems": (problem.name,), "datasets": (problem.dataset,)}
    if args.hidden:
        hidden = parse_hidden(args.hidden)
        return {"problems": sized_problems(problems, hidden)}
    return {}


def _add_own_model_options(parser: argparse.ArgumentParser) -> None:
    """--model, --data and their options, the same on bench and profile."""
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


def _profile(args: argparse.Namespace) -> int:
    client = client_library(DEFAULT_CACHE) if args.instructions else None  # before any file
    usable_folder(args.out)
    if args.contender not in CONTENDERS:
        raise OrtBenchError(
            f"unknown contender {args.contender!r}: expected one of {list(CONTENDERS)}"
        )
    if args.batch_size < 1 or (args.epochs is not None and args.epochs < 1):
        raise OrtBenchError("--batch-size and --epochs must be >= 1")
    if not 0 <= args.min_fraction < 1:
        raise OrtBenchError(f"--min-fraction must be in [0, 1), got {args.min_fraction}")
    user = UserFiles.from_options(args)
    if user is not None:
        load_user_problem(user)
        args.problem, args.dataset = user.names
    elif args.hidden:
        (hidden,) = parse_hidden([args.hidden])
        args.problem = problem_name(args.problem, hidden)
    request = ProfileRequest(
        args.contender,
        args.problem,
        args.dataset,
        args.batch_size,
        args.epochs,
        args.device,
        args.min_fraction,
        user and user.to_json(),
    )
    try:
        make_contender(
            args.contender, make_problem(args.problem, args.dataset), args.batch_size, args.device
        )
    except Unavailable as e:
        raise OrtBenchError(f"{args.contender} cannot run this cell: {e}") from None
    folder = create_run_folder(args.out, run_id_now())
    print(f"ortbench profile: writing {folder}", file=sys.stderr)
    try:
        profile_folder = profile(
            request, folder, log=lambda line: print(line, file=sys.stderr), client=client
        )
    except KeyboardInterrupt:
        write_index(folder)
        print(f"\nortbench: interrupted: what was profiled is kept in {folder}", file=sys.stderr)
        return EXIT_INTERRUPTED
    index = write_index(folder)
    print((profile_folder / "profile.md").read_text(encoding="utf-8"))
    print(f"ortbench profile: {index} written", file=sys.stderr)
    return 0


def add_bench(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``bench`` to the command line's commands; its parser is ``ab``'s parent."""
    bench = commands.add_parser(
        "bench",
        help=RUNTIME_COMMANDS["bench"],
        description="Run contenders x problems x data sets x batch sizes x devices and write "
        "results.csv, results.jsonl, loss_curves.csv, summary.md and plots into OUT/<run-id>/.",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help=f"a short run: {', '.join(QUICK.contenders)} on {QUICK.problems[0]} at batch "
        f"sizes {', '.join(map(str, QUICK.batch_sizes))} (other options still apply)",
    )
    bench.add_argument(
        "--contenders", nargs="+", metavar="NAME", help=f"of {', '.join(CONTENDERS)}"
    )
    bench.add_argument("--problem", nargs="+", metavar="NAME", help=f"of {', '.join(PROBLEMS)}")
    bench.add_argument("--dataset", nargs="+", metavar="NAME", help=f"of {', '.join(DATASETS)}")
    bench.add_argument("--batch-sizes", nargs="+", metavar="N")
    bench.add_argument(
        "--devices",
        nargs="+",
        metavar="NAME",
        help=f"of {', '.join(DEVICES)} (default: those this machine has)",
    )
    bench.add_argument(
        "--epochs",
        type=int,
        help="epochs of the first fit, and how many more the long timed fit runs than the "
        f"short one (default {BenchConfig.epochs})",
    )
    bench.add_argument(
        "--repeat",
        type=int,
        help=f"timing rounds per cell, a short and a long fit each (default {BenchConfig.repeat})",
    )
    bench.add_argument("--hidden", nargs="+", metavar="H1,H2", help="MLP sizes: 50,10 256,128")
    bench.add_argument("--n-samples", type=int, metavar="N", help="rows of each data set")
    bench.add_argument("--n-features", type=int, metavar="N", help="features of generated data")
    bench.add_argument("--baseline", metavar="NAME", help="the contender speed-ups are against")
    _add_own_model_options(bench)
    sharding = bench.add_argument_group("one matrix over several machines")
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
    bench.add_argument("--out", default="reports", help="parent folder of the run folder")
    bench.add_argument(
        "--keep-going",
        action="store_true",
        help="exit 0 even when cells failed or were unstable (default: exit 1)",
    )
    bench.set_defaults(func=_bench)
    return bench


def add_ab(commands: argparse._SubParsersAction, bench: argparse.ArgumentParser) -> None:
    """Add ``ab``, with the options of ``bench`` (its parent parser)."""
    ab = commands.add_parser(
        "ab",
        parents=[bench],  # bench's options choose the matrix
        conflict_handler="resolve",
        help=RUNTIME_COMMANDS["ab"],
        description="Run the matrix on two git refs or checkout folders, one worker process "
        "each, their timed fits alternated (A B B A ...); judge each cell on the paired "
        "ratios HEAD / BASE. Writes OUT/<run-id>/ with a side column and ab.md. Exit 1 when "
        "anything regressed or failed.",
    )
    ab.add_argument("base", metavar="BASE", help="git ref or checkout folder")
    ab.add_argument("head", metavar="HEAD", help="git ref or checkout folder")
    ab.add_argument(
        "--repeat",
        type=int,
        help=f"rounds per cell and side (default {AB_REPEAT}; {ROUNDS} when counting instructions)",
    )
    ab.add_argument(
        "--threshold", type=float, default=0.10, help="relative change that counts (0.10)"
    )
    ab.add_argument("--warn", type=float, default=0.05, help="relative slowdown that warns (0.05)")
    ab.add_argument(
        "--cache",
        default=str(DEFAULT_CACHE),
        help="exported trees, virtualenvs and the callgrind client (%(default)s)",
    )
    ab.add_argument(
        "--measure",
        choices=("time", "instructions"),
        default="time",
        help="time the fits, or count their instructions under valgrind's callgrind "
        f"(needs valgrind and a C compiler; {ROUNDS} rounds unless --repeat)",
    )
    ab.add_argument(
        "--instructions-threshold",
        type=float,
        default=INSTRUCTIONS_THRESHOLD,
        help=f"relative change of instructions per step that counts ({INSTRUCTIONS_THRESHOLD})",
    )
    ab.set_defaults(func=_ab)


def add_merge(commands: argparse._SubParsersAction) -> None:
    """Add ``merge``."""
    merging = commands.add_parser(
        "merge",
        help=RUNTIME_COMMANDS["merge"],
        description="Check that the run folders of bench or ab --shard I/N hold every cell "
        "of one matrix once (same command, matrix, versions and sides), merge them into "
        "OUT/<run-id>/ and write the report and exit status the unsharded run would "
        "(summary.md and plots, or ab.md).",
    )
    merging.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="one per shard")
    merging.add_argument("--out", default="reports", help="parent folder of the merged folder")
    merging.set_defaults(func=_merge)


def add_profile(commands: argparse._SubParsersAction) -> None:
    """Add ``profile``."""
    profiling = commands.add_parser(
        "profile",
        help=RUNTIME_COMMANDS["profile"],
        description="Profile a training run of CONTENDER with cProfile, py-spy and "
        "onnxruntime's profiler; write OUT/<run-id>/profile-CONTENDER/ and index.html.",
    )
    profiling.add_argument("contender", metavar="CONTENDER", help=f"of {', '.join(CONTENDERS)}")
    profiling.add_argument("--problem", default="mlp", choices=PROBLEMS)
    profiling.add_argument("--hidden", metavar="H1,H2", help="the MLP's hidden layers: 256,128")
    profiling.add_argument("--dataset", default="make_regression", choices=DATASETS)
    profiling.add_argument("--batch-size", type=int, default=15)
    profiling.add_argument(
        "--epochs", type=int, help="steady epochs to profile (default: about 2 s of them)"
    )
    profiling.add_argument("--device", default="cpu", choices=DEVICES)
    profiling.add_argument(
        "--min-fraction", type=float, default=0.001, help="cut call-tree nodes below this share"
    )
    profiling.add_argument("--out", default="reports", help="parent folder of the run folder")
    profiling.add_argument("--instructions", action="store_true", help="count the steps' instructions under valgrind's callgrind too (needs valgrind and a C compiler)")  # fmt: skip
    _add_own_model_options(profiling)
    profiling.set_defaults(func=_profile)
