"""``ortbench profile``: profile one contender's training run into a new run folder."""

from __future__ import annotations

import argparse
import json
import sys

from ..bench.checkouts import DEFAULT_CACHE
from ..bench.contenders import CONTENDERS, unavailable_reason
from ..bench.datasets import DATASETS
from ..bench.instructions import client_library
from ..bench.interruption import interruptible
from ..bench.matrix import DEVICES, BenchConfig, run_id_now
from ..bench.problems import (
    PROBLEMS,
    batch_data_sizes,
    default_datasets,
    has_hidden_layers,
    make_problem,
    parse_hidden,
    problem_name,
)
from ..bench.store import create_run_folder, usable_folder
from ..bench.user_model import UserFiles, load_user_problem
from ..errors import OrtBenchError
from ..profiling.driver import ProfileRequest, mark_interrupted, profile
from ..report.html import write_index
from ..schema import PROFILE_JSON
from . import EXIT_INTERRUPTED, RUNTIME_COMMANDS
from .bench import add_own_model_options
from .options import count, fraction

#: The problem profiled without --problem (nor --model).
DEFAULT_PROBLEM = "mlp"


def _request(args: argparse.Namespace) -> ProfileRequest:
    """What to profile: the user's model and data, or a problem (sized by ``--hidden``)."""
    problem = args.problem or DEFAULT_PROBLEM
    dataset = args.dataset or (default_datasets((problem,)) or BenchConfig.datasets)[0]
    user = UserFiles.from_options(args)
    if user is not None:
        load_user_problem(user)
        problem, dataset = user.names
    elif args.hidden:
        (hidden,) = parse_hidden([args.hidden])
        if not has_hidden_layers(problem):
            raise OrtBenchError(f"--hidden sizes the MLP problems, and {problem} is not one")
        problem = problem_name(problem, hidden)
    return ProfileRequest(
        args.contender,
        problem,
        dataset,
        args.batch_size,
        args.epochs,
        args.device,
        args.min_fraction,
        user and user.to_json(),
    )


def run(args: argparse.Namespace) -> int:
    """Profile, write the folder's page and print the profile's summary; 130 when
    interrupted."""
    client = client_library(DEFAULT_CACHE) if args.instructions else None  # before any file
    usable_folder(args.out)
    if args.contender not in CONTENDERS:
        raise OrtBenchError(
            f"unknown contender {args.contender!r}: expected one of {list(CONTENDERS)}"
        )
    request = _request(args)
    sizes = batch_data_sizes(request.problem, request.dataset, args.batch_size)
    problem = make_problem(request.problem, request.dataset, **sizes)
    reason = unavailable_reason(args.contender, problem, args.batch_size, args.device)
    if reason is not None:
        raise OrtBenchError(f"{args.contender} cannot run this cell: {reason}")
    folder = create_run_folder(args.out, run_id_now())
    print(f"ortbench profile: writing {folder}", file=sys.stderr)
    try:
        with interruptible():  # SIGTERM too
            profile_folder = profile(
                request, folder, log=lambda line: print(line, file=sys.stderr), client=client
            )
    except KeyboardInterrupt:
        mark_interrupted(folder / f"profile-{request.contender}", request)
        write_index(folder)
        print(
            f"\nortbench: interrupted: the profilers that finished are kept in {folder}",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    index = write_index(folder)
    print((profile_folder / "profile.md").read_text(encoding="utf-8"))
    print(f"ortbench profile: {index} written", file=sys.stderr)
    info = json.loads((profile_folder / PROFILE_JSON).read_text(encoding="utf-8"))
    if info.get("instructions_problem"):  # asked for and not counted: the run did not do it all
        problem = info["instructions_problem"]
        print(f"ortbench profile: --instructions counted nothing: {problem}", file=sys.stderr)
        return 1
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    """Add ``profile``."""
    parser = commands.add_parser(
        "profile",
        help=RUNTIME_COMMANDS["profile"],
        description="Profile a training run of CONTENDER with cProfile, py-spy and "
        "onnxruntime's profiler; write OUT/<run-id>/profile-CONTENDER/ and index.html.",
    )
    parser.add_argument("contender", metavar="CONTENDER", help=f"of {', '.join(CONTENDERS)}")
    parser.add_argument("--problem", choices=PROBLEMS, help=f"default {DEFAULT_PROBLEM}")
    parser.add_argument("--hidden", metavar="H1,H2", help="the MLP's hidden layers: 256,128")
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        help="default: make_regression (digits_shifted for the network problems)",
    )
    parser.add_argument("--batch-size", type=count, default=15)
    parser.add_argument(
        "--epochs", type=count, help="steady epochs to profile (default: about 2 s of them)"
    )
    parser.add_argument("--device", default="cpu", choices=DEVICES)
    parser.add_argument(
        "--min-fraction",
        type=fraction,
        default=0.001,
        help="cut call-tree nodes below this share",
    )
    parser.add_argument("--out", default="reports", help="parent folder of the run folder")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count the steps' instructions under valgrind's callgrind too (needs valgrind "
        "and a C compiler)",
    )
    add_own_model_options(parser)
    parser.set_defaults(func=run)
