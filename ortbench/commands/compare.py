"""``ortbench compare``: judge HEAD's results against BASE's (two asv result files or two
run folders), without a runtime."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..bench.store import usable_file
from ..errors import OrtBenchError
from ..report.compare_page import write_comparison_html
from ..report.paired import refuse_ab_run
from ..report.resultsets import load_result_set
from ..report.verdicts import compare, comparison_markdown
from . import EXIT_FAILING, EXIT_INCONCLUSIVE, EXIT_NOTHING
from .options import add_verdict_options


def run(args: argparse.Namespace) -> int:
    """Write the comparison's markdown (and page); return 1 on a regression or failure, 3
    with nothing to compare, 4 when the machine's drift could explain a regression."""
    if args.out:
        usable_file(args.out)
    if args.html:
        usable_file(args.html, "--html")
    if args.out and args.html and Path(args.out).resolve() == Path(args.html).resolve():
        raise OrtBenchError(f"--out and --html name the same file {args.out}: give two files")
    for path in (args.base, args.head):
        refuse_ab_run(path, "compare two ortbench bench run folders or two asv result files")
    comparison = compare(
        load_result_set(args.base), load_result_set(args.head), args.threshold, args.warn
    )
    for row in comparison.bad_rows:
        print(f"ortbench: bad row left out: {row}", file=sys.stderr)
    if comparison.compared == 0:
        print(
            f"ortbench: nothing to compare: {args.base} and {args.head} share no benchmark",
            file=sys.stderr,
        )
        return EXIT_NOTHING
    text = comparison_markdown(comparison)
    if args.out:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as e:
            raise OrtBenchError(f"cannot write {args.out}: {e.strerror or e}") from None
    if args.html:
        write_comparison_html(comparison, args.html)
    print(text)
    if comparison.inconclusive:
        print("ortbench: inconclusive: re-run with ortbench ab", file=sys.stderr)
        return EXIT_INCONCLUSIVE
    if not comparison.failing and comparison.measured == 0:
        print("ortbench: nothing to compare: no benchmark was measured on both sides",
              file=sys.stderr)  # fmt: skip
        return EXIT_NOTHING
    return EXIT_FAILING if comparison.failing else 0


def add(commands: argparse._SubParsersAction) -> None:
    """Add ``compare``."""
    parser = commands.add_parser(
        "compare",
        help="judge HEAD against BASE",
        description="Compare two asv result files or two ortbench bench run folders and "
        "write a markdown report. Its verdicts are indicative (separate runs): gate on "
        "ortbench ab. Exit 1 when anything regressed or failed, 3 when there is nothing to "
        "compare, 4 when a regression could be the machine's drift (inconclusive).",
    )
    parser.add_argument("base", metavar="BASE")
    parser.add_argument("head", metavar="HEAD")
    add_verdict_options(parser)
    parser.add_argument("--out", help="also write the report to this file")
    parser.add_argument(
        "--html", metavar="FILE", help="also write a page with each cell's samples and verdict"
    )
    parser.set_defaults(func=run)
