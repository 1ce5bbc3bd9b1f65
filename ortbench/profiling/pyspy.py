"""py-spy flame graphs of the steady part of a training run.

The profiled command runs in its own process and follows a small protocol on its standard
streams: it prints ``ready`` once it has built its model and run its warm-up, waits for a
line on its standard input, runs the part to profile, prints ``done`` and exits. py-spy
attaches to it (``record --pid``) between ``ready`` and that line and is stopped at
``done``, so the flame graph holds the steady epochs only, not imports, model building or
the interpreter's exit.

Never ``--gil``: onnxruntime releases the GIL inside its runs, which would then vanish from
the profile. Where py-spy is missing or cannot attach (no ptrace rights, a container without
SYS_PTRACE) the caller gets one line saying so, not an exception.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.etree import ElementTree

#: Output files and the py-spy format that writes each.
OUTPUTS = {"flamegraph.svg": "flamegraph", "profile.speedscope.json": "speedscope"}
READY, DONE = "ready", "done"
INSTALL = "pip install -r requirements.txt (or pip install py-spy)"
#: The namespaces of the flame graph's elements and of its frames' sample attributes
#: (``fg:x``, the frame's first sample, and ``fg:w``, its samples).
_SVG, _FG = "{http://www.w3.org/2000/svg}", "{http://github.com/jonhoo/inferno}"


def find_py_spy() -> str | None:
    """py-spy next to the running interpreter (same environment) or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


def record(
    command: list[str],
    folder: Path,
    py_spy: str | None = None,
    rate: int = 250,
    timeout: float = 600,
) -> str | None:
    """Record ``command``'s profiled part into ``flamegraph.svg`` and ``profile.speedscope.json``.

    Parameters
    ----------
    command : list of str
        A command that follows the protocol of this module (``ready``, a line on its
        standard input, ``done``). It runs once per output file.
    folder : Path
        Where the two files go.
    py_spy : str, optional
        The py-spy executable; by default the one of this environment or on PATH.
    rate : int
        Samples per second.
    timeout : float
        Seconds one profiled run may take.

    Returns
    -------
    str or None
        None when both files were written, else a one-line reason.
    """
    exe = py_spy or find_py_spy()
    if exe is None:
        return f"py-spy is not installed: {INSTALL}"
    for name, fmt in OUTPUTS.items():
        out = folder / name
        out.unlink(missing_ok=True)
        problem = _record_once(exe, command, out, fmt, rate, timeout)
        if problem:
            return problem
    return None


def _record_once(
    exe: str, command: list[str], out: Path, fmt: str, rate: int, timeout: float
) -> str | None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryFile("w+") as errors:
        run = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
        )
        try:
            if run.stdout.readline().strip() != READY:
                run.wait(timeout)
                errors.seek(0)
                reason = _last_line(errors.read()) or f"exit status {run.returncode}"
                return f"the profiled run failed before its steady part: {reason}"
            try:
                # the flame graph's title is py-spy's command line: no path of this machine
                # --idle: a thread waiting (JAX for its compiled step) spends the step too
                arguments = f"py-spy record --pid {run.pid} -o {out.name} -f {fmt} -r {rate} --idle"
                spy = subprocess.Popen(
                    arguments.split(),
                    executable=exe,
                    cwd=out.parent,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            except OSError as e:
                return f"py-spy could not run: {type(e).__name__}: {e}".splitlines()[0]
            if not spy.stdout.readline().startswith("py-spy> Sampling"):
                _, spy_errors = spy.communicate(timeout=timeout)
                reason = _last_line(spy_errors) or f"exit status {spy.returncode}"
                return f"py-spy could not attach to the run (ptrace rights? SYS_PTRACE?): {reason}"
            run.stdin.write("go\n")
            run.stdin.flush()
            finished = run.stdout.readline().strip() == DONE
            if finished:  # stop sampling now: the interpreter's shutdown is no training
                spy.send_signal(signal.SIGINT)
            run.wait(timeout)
            _, spy_errors = spy.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"the profiled run took more than {timeout:.0f} s"
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        if not finished:
            errors.seek(0)
            reason = _last_line(errors.read()) or f"exit status {run.returncode}"
            return f"the profiled run did not finish under py-spy: {reason}"
        if not out.exists():
            reason = _last_line(spy_errors) or f"exit status {spy.returncode}"
            return f"py-spy wrote no {out.name}: {reason}"
    return None


def _frames(svg: Path) -> list[tuple[str, int, int]]:
    """The frames of a py-spy flame graph: (function, first sample, samples), the
    function without its class (py-spy names methods ``Class.method``)."""
    frames = []
    for group in ElementTree.parse(svg).getroot().iter(f"{_SVG}g"):
        title, rect = group.find(f"{_SVG}title"), group.find(f"{_SVG}rect")
        if title is None or rect is None or rect.get(f"{_FG}w") is None:
            continue
        name = title.text.split(" (", 1)[0].rsplit(".", 1)[-1]
        frames.append((name, int(rect.get(f"{_FG}x")), int(rect.get(f"{_FG}w"))))
    return frames


def samples(svg: Path) -> int:
    """How many samples a py-spy flame graph holds."""
    return max((start + width for _, start, width in _frames(svg)), default=0)


def share_under(svg: Path, function: str) -> float:
    """Share of the samples of a py-spy flame graph whose stack holds ``function``.

    Parameters
    ----------
    svg : Path
        A ``flamegraph.svg`` py-spy wrote: the graph the share describes.
    function : str
        A function or method name (a method matches in any class).

    Returns
    -------
    float
        Samples under ``function`` over all samples (0 if none).
    """
    frames = _frames(svg)
    total = max((start + width for _, start, width in frames), default=0)
    under, reached = 0, 0  # the samples' union: a recursive call's frames nest
    for _, start, width in sorted(f for f in frames if f[0] == function):
        under += max(start + width - max(start, reached), 0)
        reached = max(reached, start + width)
    return under / total if total else 0.0


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
