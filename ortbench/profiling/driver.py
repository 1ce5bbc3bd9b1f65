"""``ortbench profile``: profile one contender's training run with every profiler.

Writes into ``<out>/profile-<contender>/``:
``calltree.txt`` and ``calltree.json`` (cProfile), ``hotspots.md``, ``steps.md``,
``operators.csv``/``operators.md`` and the raw traces in ``onnxruntime/`` (onnxruntime's
profiler), ``flamegraph.svg`` and ``profile.speedscope.json`` (py-spy), and
``profile.md``, which says what ran and what could not. The trainers carry no profiling
code: onnxruntime's profiler is switched on when their sessions are built.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..bench.contenders import make_contender
from ..bench.problems import make_problem
from ..training.runtime import profiled_sessions
from . import ort_profile, pyspy
from .calltree import CallTree, profile_call
from .hotspots import hotspots_markdown
from .steps import steps_markdown

#: Epochs fitted before the profiled window; their runs are left out of the tables.
WARMUP_EPOCHS = 1


@dataclass
class ProfileRequest:
    """One cell to profile."""

    contender: str
    problem: str = "mlp"
    dataset: str = "make_regression"
    batch_size: int = 15
    epochs: int = 3
    device: str = "cpu"
    min_fraction: float = 0.001
    #: a user's model and data (``UserFiles.to_json``), None for a built-in problem
    user: str | None = None


def profile(request: ProfileRequest, out: Path, log=print) -> Path:
    """Run every profiler over ``request``; return the profile folder."""
    problem = make_problem(request.problem, request.dataset)
    folder = out / f"profile-{request.contender}"
    folder.mkdir(parents=True, exist_ok=True)

    def contender():
        return make_contender(request.contender, problem, request.batch_size, request.device)

    notes = [
        f"# Profile of {request.contender}",
        "",
        f"{request.problem} on {request.dataset}, batch size {request.batch_size}, "
        f"{request.epochs} epochs, {request.device}.",
        "",
    ]
    log(f"[1/3] cProfile over a fit of {request.epochs} epochs")
    stats = profile_call(lambda: contender().fit(request.epochs))
    tree = CallTree.from_stats(stats, request.min_fraction)
    (folder / "calltree.txt").write_text(tree.to_text(), encoding="utf-8")
    (folder / "calltree.json").write_text(json.dumps(tree.to_json(), indent=1), encoding="utf-8")
    (folder / "hotspots.md").write_text(hotspots_markdown(stats), encoding="utf-8")

    log("[2/3] onnxruntime's profiler over a window after warm-up")
    notes.append(_runtime_profile(contender, problem, request, folder / "onnxruntime", folder))

    log("[3/3] py-spy")
    status = folder / "workload.status"
    command = [
        sys.executable,
        "-m",
        "ortbench.profiling.workload",
        request.contender,
        request.problem,
        request.dataset,
        str(request.batch_size),
        str(request.epochs),
        request.device,
        str(status),
        *([request.user] if request.user else []),
    ]
    problem_text = pyspy.record(command, folder, status)
    status.unlink(missing_ok=True)
    notes.append(
        f"py-spy: {problem_text}"
        if problem_text
        else "py-spy: flamegraph.svg, profile.speedscope.json"
    )
    (folder / "profile.md").write_text("\n".join(notes) + "\n", encoding="utf-8")
    return folder


def _runtime_profile(contender, problem, request, traces: Path, folder: Path) -> str:
    """Profile a window of steps with onnxruntime's profiler; write steps and operators."""
    plain = contender().fit(WARMUP_EPOCHS)
    plain_seconds = plain.seconds_per_step(request.epochs)
    del plain
    with profiled_sessions(traces):
        cell = contender()
        cell.fit(WARMUP_EPOCHS)
        start = time.perf_counter()
        cell.continue_fit(request.epochs)
        elapsed = time.perf_counter() - start
        del cell
        gc.collect()  # a session writes its profile when it is destroyed
    files = sorted(traces.glob("*.json"))
    if not files:
        (folder / "steps.md").write_text(
            "# Where a step goes\n\nThis contender runs no onnxruntime session.\n",
            encoding="utf-8",
        )
        return "onnxruntime: this contender runs no onnxruntime session"
    per_epoch = problem.steps_per_epoch(request.batch_size)
    warm, window = WARMUP_EPOCHS * per_epoch, request.epochs * per_epoch
    counts = ort_profile.run_times(files)
    skip = {label: len(d) * warm // (warm + window) for label, d in counts.items()}
    times = ort_profile.run_times(files, skip)
    (folder / "steps.md").write_text(
        steps_markdown(times, window, elapsed / window * 1e6, plain_seconds * 1e6),
        encoding="utf-8",
    )
    table = ort_profile.operator_table(files, skip)
    table.to_csv(folder / "operators.csv", index=False)
    text = [
        "# onnxruntime operators",
        "",
        f"Kernel time over the {window} steps after warm-up, all sessions.",
        "",
        "## By operator type",
        "",
        ort_profile.markdown_table(ort_profile.by_operator_type(table)),
        "",
        "## By node",
        "",
        ort_profile.markdown_table(table),
    ]
    (folder / "operators.md").write_text("\n".join(text) + "\n", encoding="utf-8")
    return f"onnxruntime: {len(files)} session profiles in onnxruntime/ (open them in Perfetto)"
