"""py-spy flame graphs of a profiled run, launched as py-spy's child.

Never ``--gil``: onnxruntime releases the GIL inside its runs, which would then vanish from
the profile. py-spy's exit status is its own, so the profiled run proves it finished by
writing a status file; where py-spy is missing or cannot attach (no ptrace rights, a
container without SYS_PTRACE) the caller gets one line saying so, not an exception.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

#: Output files and the py-spy format that writes each.
OUTPUTS = {"flamegraph.svg": "flamegraph", "profile.speedscope.json": "speedscope"}


def find_py_spy() -> str | None:
    """py-spy next to the running interpreter (same environment) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def record(
    command: list[str],
    folder: Path,
    status_file: Path,
    py_spy: str | None = None,
    rate: int = 250,
    timeout: float = 600,
) -> str | None:
    """Record ``command`` (which must write ``status_file`` on success) into ``folder``.

    Returns None when both files were written, else a one-line reason.
    """
    exe = py_spy or find_py_spy()
    if exe is None:
        return "py-spy is not installed (pip install 'py-spy>=0.4.1'): no flame graph"
    for name, fmt in OUTPUTS.items():
        status_file.unlink(missing_ok=True)
        out = folder / name
        try:
            done = subprocess.run(
                [exe, "record", "-o", str(out), "-f", fmt, "-r", str(rate), "--", *command],
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"py-spy could not run: {type(e).__name__}: {e}".splitlines()[0]
        reason = _last_line(done.stderr) or f"exit status {done.returncode}"
        if not status_file.exists():
            return f"the profiled run did not finish under py-spy: {reason}"
        if not out.exists():
            return f"py-spy could not sample the run (permissions? SYS_PTRACE?): {reason}"
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
