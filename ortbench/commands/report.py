"""``ortbench report``: write a run folder's plots, ``summary.md`` and ``index.html`` again
from its results, read once, without a runtime."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bench.store import is_run_folder
from ..errors import OrtBenchError
from ..report.html import INDEX_HTML, write_reports
from ..report.paired import refuse_ab_run
from ..report.resultsets import load_result_set
from ..schema import RESULTS_CSV


def run(args: argparse.Namespace) -> int:
    """Write the reports, name each bad row of ``results.csv`` on stderr, print the page's
    path."""
    folder = Path(args.run_dir)
    if not folder.is_dir():
        raise OrtBenchError(f"no run folder at {folder}")
    if not is_run_folder(folder):
        raise OrtBenchError(
            f"{folder} is not an ortbench run folder (no results.csv, no profile): "
            "give a folder that ortbench bench or ortbench profile wrote"
        )
    refuse_ab_run(folder, "ortbench report draws the runs of ortbench bench and profile")
    results = load_result_set(folder, measurements=False)
    write_reports(results)
    index = folder / INDEX_HTML
    for row in [] if results.table is None else results.table.attrs["bad_rows"]:
        print(f"ortbench: bad row left out: {folder / RESULTS_CSV} {row}", file=sys.stderr)
    print(index)
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    """Add ``report``."""
    parser = commands.add_parser(
        "report",
        help="write index.html for a run folder",
        description="Turn a run folder of ortbench bench or profile into its plots, "
        "summary.md and index.html, written again from its results (self-contained: "
        "everything the page shows lives in the folder).",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.set_defaults(func=run)
