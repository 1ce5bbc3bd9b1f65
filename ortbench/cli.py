"""The ``ortbench`` command: ``bench`` runs the comparison matrix, ``compare`` judges two runs,
``ab`` times two checkouts side by side, ``merge`` joins the shards of one run,
``profile`` profiles one contender, ``report`` writes a run folder's ``index.html``. Each
command is a module of :mod:`ortbench.commands`; this one builds the parser and runs the
command.

Exit status: 0 success; 1 ``compare``, ``ab`` or ``merge`` (of ``ab`` shards) found a
regression or a failure, or a ``bench`` cell failed or was unstable (``--keep-going``: 0); 2
bad input, an unusable output or a write error (one line on stderr), shards ``merge``
refuses, or a ``bench`` run in which no cell could run (every cell unavailable); 3
``compare`` or ``ab`` had nothing to compare; 4 ``compare`` found a regression that the
machine's drift between the runs could explain, and nothing worse (inconclusive); 130
interrupted (SIGINT or SIGTERM).
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections.abc import Callable

from . import __version__
from .commands import EXIT_USAGE, RUNTIME_COMMANDS, compare, report
from .errors import OrtBenchError
from .install import MissingRuntimeError


def _one_line_warnings() -> Callable[..., None]:
    """A ``warnings.showwarning`` that shows a command's warning as one line, without the
    source file and line Python's own format gives, and each message once: every
    contender of a run reads the same model, each from its own code (the filters'
    "once" forgets what it showed when a library's ``catch_warnings`` block ends)."""
    shown: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if str(message) not in shown:
            shown.add(str(message))
            print(f"ortbench: warning: {message}", file=file or sys.stderr)

    return show


class _Parser(argparse.ArgumentParser):
    """Reports a bad argument in one line, exit status 2."""

    def error(self, message: str):
        # argparse names the option of a refused value: "argument --x: must be ..."
        message = re.sub(r"^argument (\S+): must ", r"\1 must ", message)
        self.exit(EXIT_USAGE, f"ortbench: error: {message} (see {self.prog} --help)\n")


def _parser(runtime: bool = True) -> argparse.ArgumentParser:
    """The command line's parser; with ``runtime`` False, the commands of
    :data:`~ortbench.commands.RUNTIME_COMMANDS` are there by name only (their modules are
    not imported, their options not parsed).

    Raises
    ------
    MissingRuntimeError
        With ``runtime`` True, when no onnxruntime build is installed.
    """
    if runtime:
        from .commands import ab, bench, merge, profile
    parser = _Parser(
        prog="ortbench", description="Benchmark training with onnxruntime against its peers."
    )
    parser.add_argument("--version", action="version", version=f"ortbench {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    def named(name: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=RUNTIME_COMMANDS[name], add_help=False)

    matrix = bench.add(commands) if runtime else named("bench")
    compare.add(commands)
    if runtime:
        ab.add(commands, matrix)
        merge.add(commands)
        profile.add(commands)
    else:
        for name in ("ab", "merge", "profile"):
            named(name)
    report.add(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line (``ortbench bench``, ``profile``, ``report``, ``compare``...).

    Parameters
    ----------
    argv : list of str
        The arguments after the program name; by default ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status (see the module's docstring): 0 success (``--help`` too); 1 a
        regression, a failure or an unstable cell; 2 bad input (one line on stderr); 3
        nothing to compare; 4 inconclusive; 130 interrupted.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # only the commands that need a runtime load it: compare and report run without
        parser = _parser(runtime=bool(argv) and argv[0] in RUNTIME_COMMANDS)
    except MissingRuntimeError as e:
        print(f"ortbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(argv)
        if "check" in args:  # what one option's type cannot see: --warn against --threshold
            args.check(args)
    except SystemExit as e:  # a refused value (one line) or --help
        return e.code
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warnings()
            return args.func(args)
    except OrtBenchError as e:
        print(f"ortbench: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:  # a report that cannot be written: disk full, read-only folder
        print(f"ortbench: error: cannot write {e.filename}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
