"""The ``ortbench`` command: ``bench`` runs the comparison matrix, ``compare`` judges two runs,
``ab`` times two checkouts side by side, ``merge`` joins the shards of one run,
``profile`` profiles one contender, ``report`` writes a run folder's ``index.html``.

Exit status: 0 success; 1 ``compare``, ``ab`` or ``merge`` (of ``ab`` shards) found a
regression or a failure, or a ``bench`` cell failed or was unstable (``--keep-going``: 0); 2
bad input, an unusable output or a write error (one line on stderr), shards ``merge``
refuses, or a ``bench`` run in which no cell could run; 3 ``compare`` or ``ab`` had nothing
to compare; 4 ``compare`` found a regression that the machine's drift between the runs
could explain, and nothing worse (inconclusive); 130 interrupted (SIGINT or SIGTERM).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .bench.store import RESULTS_CSV, is_run_folder, read_results, usable_file
from .errors import OrtBenchError
from .install import MissingRuntimeError
from .report.compare_page import write_comparison_html
from .report.html import write_index
from .report.resultsets import load_result_set
from .report.verdicts import compare, comparison_markdown

EXIT_FAILING = 1
EXIT_USAGE = 2
EXIT_NOTHING = 3
EXIT_INCONCLUSIVE = 4
EXIT_INTERRUPTED = 130

#: The commands that need an onnxruntime build (:mod:`ortbench.runtime_commands`, imported
#: only when one of them runs), with their help lines.
RUNTIME_COMMANDS = {
    "bench": "run the comparison matrix",
    "ab": "time BASE and HEAD side by side and judge HEAD",
    "merge": "join the run folders of one run's shards",
    "profile": "profile one contender's training run",
}


def _report(args: argparse.Namespace) -> int:
    folder = Path(args.run_dir)
    if not folder.is_dir():
        raise OrtBenchError(f"no run folder at {folder}")
    if not is_run_folder(folder):
        raise OrtBenchError(
            f"{folder} is not an ortbench run folder (no results.csv, no profile): "
            "give a folder that ortbench bench or ortbench profile wrote"
        )
    index = write_index(folder)
    if (folder / RESULTS_CSV).exists():
        for row in read_results(folder).attrs["bad_rows"]:
            print(f"ortbench: bad row left out: {folder / RESULTS_CSV} {row}", file=sys.stderr)
    print(index)
    return 0


def _compare(args: argparse.Namespace) -> int:
    if args.threshold <= 0:
        raise OrtBenchError(f"--threshold must be > 0, got {args.threshold}")
    if not 0 <= args.warn <= args.threshold:
        raise OrtBenchError(f"--warn must be between 0 and --threshold, got {args.warn}")
    if args.out:
        usable_file(args.out)
    if args.html:
        usable_file(args.html, "--html")
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
    return EXIT_FAILING if comparison.failing else 0


class _Parser(argparse.ArgumentParser):
    """Reports a bad argument in one line, exit status 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"ortbench: error: {message} (see {self.prog} --help)\n")


def _parser(runtime: bool = True) -> argparse.ArgumentParser:
    """The command line's parser; with ``runtime`` False, the commands of
    :data:`RUNTIME_COMMANDS` are there by name only (their options are not parsed).

    Raises
    ------
    MissingRuntimeError
        With ``runtime`` True, when no onnxruntime build is installed.
    """
    if runtime:
        from . import runtime_commands as run
    parser = _Parser(
        prog="ortbench", description="Benchmark training with onnxruntime against its peers."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def named(name: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=RUNTIME_COMMANDS[name], add_help=False)

    bench = run.add_bench(commands) if runtime else named("bench")

    comparison = commands.add_parser(
        "compare",
        help="judge HEAD against BASE",
        description="Compare two asv result files or two ortbench bench run folders and "
        "write a markdown report. Its verdicts are indicative (separate runs): gate on "
        "ortbench ab. Exit 1 when anything regressed or failed, 3 when there is nothing to "
        "compare, 4 when a regression could be the machine's drift (inconclusive).",
    )
    comparison.add_argument("base", metavar="BASE")
    comparison.add_argument("head", metavar="HEAD")
    comparison.add_argument(
        "--threshold", type=float, default=0.10, help="relative change that counts (0.10)"
    )
    comparison.add_argument(
        "--warn", type=float, default=0.05, help="relative slowdown that warns (0.05)"
    )
    comparison.add_argument("--out", help="also write the report to this file")
    comparison.add_argument(
        "--html", metavar="FILE", help="also write a page with each cell's samples and verdict"
    )
    comparison.set_defaults(func=_compare)

    if runtime:
        run.add_ab(commands, bench)
        run.add_merge(commands)
        run.add_profile(commands)
    else:
        for name in ("ab", "merge", "profile"):
            named(name)

    reporting = commands.add_parser(
        "report",
        help="write index.html for a run folder",
        description="Turn a run folder of ortbench bench or profile into index.html and "
        "summary.md (self-contained: everything it shows lives in the folder).",
    )
    reporting.add_argument("run_dir", metavar="RUN_DIR")
    reporting.set_defaults(func=_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line (``ortbench bench``, ``profile``, ``report``, ``compare``).

    Parameters
    ----------
    argv : list of str, optional
        The arguments after the program name; by default ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status (see the module's docstring): 0 success; 1 a regression, a
        failure or an unstable cell; 2 bad input (one line on stderr); 3 nothing to
        compare; 4 inconclusive; 130 interrupted.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # only the commands that need a runtime load it: compare and report run without
        parser = _parser(runtime=bool(argv) and argv[0] in RUNTIME_COMMANDS)
    except MissingRuntimeError as e:
        print(f"ortbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except OrtBenchError as e:
        print(f"ortbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:  # a report that cannot be written: disk full, read-only folder
        print(f"ortbench: error: cannot write {e.filename}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
