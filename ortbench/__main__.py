"""The ``ortbench`` command (also ``python -m ortbench``): :func:`ortbench.cli.main`."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run the command line (a command that needs the missing onnxruntime says so in one
    line, exit status 2); 130 with one line when Ctrl-C comes before a command handles it
    (while the libraries load, say).

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
        from .cli import main as run

        return run(argv)
    except KeyboardInterrupt:
        print("ortbench: interrupted", file=sys.stderr)
        return 130
    except ImportError as e:
        # an extension module that Ctrl-C interrupts while it initialises raises
        # ImportError ("initialization failed") from the KeyboardInterrupt
        if not _from_interrupt(e):
            raise
        print("ortbench: interrupted", file=sys.stderr)
        return 130


def _from_interrupt(error: BaseException | None) -> bool:
    """Whether ``error`` was raised while handling a KeyboardInterrupt, or from one."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


if __name__ == "__main__":
    sys.exit(main())
