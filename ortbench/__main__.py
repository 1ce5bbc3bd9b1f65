"""The ``ortbench`` command (also ``python -m ortbench``): :func:`ortbench.cli.main`, or one
line naming the extras when no onnxruntime build is installed."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line; exit status 2 with one line on stderr when onnxruntime is
    missing, 130 with one line when Ctrl-C comes before a command handles it (while the
    libraries load, say).

    Parameters
    ----------
    argv : list of str, optional
        The command's arguments; ``sys.argv[1:]`` when None.

    Returns
    -------
    int
        The command's exit status.
    """
    # every import, this package's own included, runs inside the handler: a Ctrl-C that
    # lands while one loads would otherwise end the process by SIGINT (status -2)
    try:
        from .install import MissingRuntimeError

        try:
            from .cli import main as run
        except MissingRuntimeError as e:
            print(f"ortbench: error: {e}", file=sys.stderr)
            return 2
        return run(argv)
    except KeyboardInterrupt:
        print("ortbench: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
