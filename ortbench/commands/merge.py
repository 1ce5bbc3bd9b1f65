"""``ortbench merge``: join the run folders of one run's shards, then report as the
unsharded command would."""

from __future__ import annotations

import argparse
import json
import shutil
import sys

from ..bench.ab import AB_JSON, side_label
from ..bench.matrix import run_id_now
from ..bench.merge import merge_runs
from ..bench.store import create_run_folder
from ..errors import OrtBenchError
from ..report.html import write_reports
from ..report.instruction_verdicts import THRESHOLD as INSTRUCTIONS_THRESHOLD
from ..schema import SIDES
from . import RUNTIME_COMMANDS
from .ab import verdict
from .bench import cells_status


def run(args: argparse.Namespace) -> int:
    """Merge the shards' folders into a new one and write its reports (``ab.md`` and its
    verdict for ``ab`` shards)."""
    folder = create_run_folder(args.out, run_id_now())
    try:
        merged = merge_runs(args.run_dirs, folder)
    except OrtBenchError:
        shutil.rmtree(folder)  # its own new folder: a refused merge leaves nothing behind
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
        return verdict(folder, labels, thresholds, log, note)
    print(write_reports(folder))
    return cells_status(folder, args.keep_going, "merge")


def add(commands: argparse._SubParsersAction) -> None:
    """Add ``merge``."""
    parser = commands.add_parser(
        "merge",
        help=RUNTIME_COMMANDS["merge"],
        description="Check that the run folders of bench or ab --shard I/N hold every cell "
        "of one matrix once (same command, matrix, versions and sides), merge them into "
        "OUT/<run-id>/ and write the report and exit status the unsharded run would "
        "(summary.md and plots, or ab.md).",
    )
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="one per shard")
    parser.add_argument("--out", default="reports", help="parent folder of the merged folder")
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="bench shards: exit 0 even when cells failed or were unstable (default: exit 1)",
    )
    parser.set_defaults(func=run)
