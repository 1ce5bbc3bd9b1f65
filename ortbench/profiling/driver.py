"""``ortbench profile``: profile one contender's training run with every profiler.

The profilers look at the steady epochs that follow the build and a warm-up epoch
(onnxruntime's profiler at the first of them only). Writes into ``<out>/profile-<contender>/``: ``calltree.txt`` and
``calltree.json`` (cProfile over the window), ``calltree-build.txt`` and
``calltree-build.json`` (cProfile over the build and the warm-up epoch), ``hotspots.md``,
``steps.md``, ``operators.csv``/``operators.md`` and the raw traces in ``onnxruntime/``
(onnxruntime's profiler), ``flamegraph.svg`` and ``profile.speedscope.json`` (py-spy),
``profile.json`` (what was profiled, and why a flame graph is missing when it is) and
``profile.md``, which says what ran and what could not. With the compiled callgrind client
(``--instructions``), the first steady epochs are also counted under callgrind:
``callgrind.out.steps`` and the tables of ``instructions.md``. The trainers carry no
profiling code: onnxruntime's profiler is switched on when their sessions are built.
"""

from __future__ import annotations

import gc
import json
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..bench.contenders import make_contender
from ..bench.contenders.base import Contender
from ..bench.contenders.ort import OrtContender
from ..bench.instructions import WARM_FITS, count_here
from ..bench.matrix import BenchConfig, Cell
from ..bench.problems import batch_data_sizes, make_problem
from ..bench.timing import SHORT_EPOCHS
from ..bench.user_model import UserFiles
from ..errors import OrtBenchError
from ..report.units import plural
from ..schema import EPOCH_LOOP, MIN_FLAME_SAMPLES, PER_STEP, PROFILE_JSON
from ..training.runtime.sessions import profiled_sessions
from . import ort_profile, pyspy
from .callgrind import instructions_markdown, read_instructions
from .calltree import CallTree, profile_call
from .hotspots import hotspots_markdown
from .steps import steps_markdown

#: Epochs fitted before the profiled window: the build and the first epoch's one-time costs
#: stay out of the steady profiles (they get their own call tree).
WARMUP_EPOCHS = 1
#: Without ``epochs``, the profiled window lasts about this long (unprofiled), so py-spy
#: gathers several hundred samples whatever a step costs.
WINDOW_SECONDS = 2.0
MIN_EPOCHS, MAX_EPOCHS = 3, 5000
#: onnxruntime's profiler writes several events per node run: its window stops after the
#: first epochs holding this many steps, which keeps its traces to a few megabytes.
RUNTIME_STEPS = 500
#: The callgrind file of ``--instructions``: its name is one that KCachegrind's file
#: dialog lists.
CALLGRIND_FILE = "callgrind.out.steps"
#: The callgrind worker's folder in the profile's folder (its log and counts).
CALLGRIND_WORK = "callgrind"


@dataclass
class ProfileRequest:
    """One cell to profile; ``epochs=None`` chooses enough epochs for a stable picture."""

    contender: str
    problem: str = "mlp"
    dataset: str = "make_regression"
    batch_size: int = 15
    epochs: int | None = None
    device: str = "cpu"
    min_fraction: float = 0.001
    #: a user's model and data (``UserFiles.to_json``), None for a built-in problem
    user: str | None = None


def profile(request: ProfileRequest, out: Path, log=print, client: Path | None = None) -> Path:
    """Run every profiler over ``request``; return the profile folder.

    Parameters
    ----------
    request : ProfileRequest
        The cell to profile.
    out : Path
        The run folder; the profile goes into ``out/profile-<contender>/``.
    log : callable
        Receives one line per stage.
    client : Path, optional
        The compiled callgrind client requests
        (:func:`ortbench.bench.instructions.client_library`): with it, the steps of
        onnxruntime's window are counted under callgrind too (:func:`_instruction_profile`).

    Returns
    -------
    Path
        The profile folder.
    """
    sizes = batch_data_sizes(request.problem, request.dataset, request.batch_size)
    problem = make_problem(request.problem, request.dataset, **sizes)
    folder = out / f"profile-{request.contender}"
    folder.mkdir(parents=True, exist_ok=True)

    def contender():
        return make_contender(request.contender, problem, request.batch_size, request.device)

    per_epoch = problem.steps_per_epoch(request.batch_size)
    stages = 4 if client is None else 5
    log(f"[1/{stages}] timing steps without a profiler")
    plain = contender().fit(WARMUP_EPOCHS)
    threads = _chosen_threads(plain)
    epoch_seconds = min(plain.time_fit(1) for _ in range(MIN_EPOCHS))  # the least disturbed
    epochs = request.epochs or steady_epochs(epoch_seconds)
    runtime_epochs = min(epochs, math.ceil(RUNTIME_STEPS / per_epoch))
    # the onnxruntime window's epochs without a profiler, timed as the profiled ones are
    plain_seconds = min(plain.time_fit(runtime_epochs) for _ in range(MIN_EPOCHS)) / (
        runtime_epochs * per_epoch
    )
    del plain
    rows = len(problem.data.X_train)
    info = {
        **asdict(request),
        "epochs": epochs,
        "warmup_epochs": WARMUP_EPOCHS,
        "training_rows": rows,
    }
    notes = [
        f"# Profile of {request.contender}",
        "",
        f"{request.problem} on {request.dataset} ({rows} training rows), "
        f"batch size {request.batch_size}, "
        f"{request.device}: {epochs} epoch{'s' * (epochs != 1)} of {per_epoch} steps profiled "
        f"after the build and {WARMUP_EPOCHS} warm-up epoch.",
        "",
    ]

    def save() -> None:  # after each profiler: an interrupted profile keeps its notes
        (folder / PROFILE_JSON).write_text(json.dumps(info, indent=1), encoding="utf-8")
        (folder / "profile.md").write_text("\n".join(notes) + "\n", encoding="utf-8")

    log(
        f"[2/{stages}] cProfile over the build, then over {epochs} steady epoch{'s' * (epochs != 1)}"
    )
    cell = contender()
    build = CallTree.from_stats(profile_call(lambda: cell.fit(WARMUP_EPOCHS)), request.min_fraction)
    stats = profile_call(lambda: cell.continue_fit(epochs))
    tree = CallTree.from_stats(stats, request.min_fraction)
    for name, calls in (("calltree", tree), ("calltree-build", build)):
        (folder / f"{name}.txt").write_text(calls.to_text(), encoding="utf-8")
        (folder / f"{name}.json").write_text(
            json.dumps(calls.to_json(), indent=1), encoding="utf-8"
        )
    (folder / "hotspots.md").write_text(hotspots_markdown(stats), encoding="utf-8")
    save()

    log(f"[3/{stages}] onnxruntime's profiler over the first steady epochs")
    notes.append(
        _runtime_profile(
            lambda: _on_threads(contender(), threads),
            per_epoch,
            runtime_epochs,
            plain_seconds,
            folder / "onnxruntime",
            folder,
        )
    )
    # torch, JAX and scikit-learn contenders run no session: their page says nothing of it
    info["runtime_sessions"] = any((folder / "onnxruntime").glob("*.json"))
    save()

    log(f"[4/{stages}] py-spy over the same window")
    command = [
        sys.executable,
        "-m",
        "ortbench.profiling.workload",
        request.contender,
        request.problem,
        request.dataset,
        str(request.batch_size),
        str(epochs),
        request.device,
        str(WARMUP_EPOCHS),
        *([request.user] if request.user else []),
    ]
    info["flamegraph_problem"] = pyspy.record(command, folder)
    if info["flamegraph_problem"]:
        notes.append(f"py-spy: no flame graph: {info['flamegraph_problem']}")
    else:
        notes.append(_flame_graph_note(folder / "flamegraph.svg", info))
    save()

    if client is not None:
        log(f"[5/5] callgrind over a fit of {SHORT_EPOCHS + runtime_epochs} epochs after a warm-up")
        notes.append(_instruction_profile(request, runtime_epochs, client, folder, info))
        save()
    return folder


def _flame_graph_note(svg: Path, info: dict) -> str:
    """The note's line on py-spy's flame graph: its samples and the share of them under
    the trainers' epoch loop, or that they are too few to read (into ``info`` too)."""
    count = info["flamegraph_samples"] = pyspy.samples(svg)
    if count < MIN_FLAME_SAMPLES:
        return (
            f"py-spy: flamegraph.svg, profile.speedscope.json; only {plural(count, 'sample')}, "
            f"too few to read: profile more epochs (--epochs)."
        )
    share = pyspy.share_under(svg, EPOCH_LOOP)
    info["epoch_loop_share"] = share or None  # None: not one of ortbench's trainers
    under = f"; {share:.0%} of them under the epoch loop (`{EPOCH_LOOP}`)" if share else ""
    return f"py-spy: flamegraph.svg ({count} samples){under}, profile.speedscope.json."


def _chosen_threads(cell: Contender) -> tuple[int | None, ...]:
    """The intra-op threads the engine's trainer of ``cell`` chose (``intra_op_threads_``),
    as a one-value tuple; empty for any other contender."""
    return (cell.trainer.intra_op_threads_,) if isinstance(cell, OrtContender) else ()


def _on_threads(cell: Contender, threads: tuple[int | None, ...]) -> Contender:
    """``cell`` set to build its sessions on ``threads`` (:func:`_chosen_threads`).

    Between :data:`~ortbench.training.estimators.params.ONE_THREAD_WORK` and
    :data:`~ortbench.training.estimators.params.TIMED_THREADS_WORK`, a fit builds its
    sessions twice and times a few batches on each before training: those runs are not
    steps, and the session left aside would write a profile under the same label. Under
    onnxruntime's profiler the trainer builds once, on the threads the first fit chose."""
    if threads:
        cell.intra_op_threads = threads[0]
    return cell


def mark_interrupted(folder: Path, request: ProfileRequest) -> None:
    """Say in the profile folder that a signal stopped the profile: ``profile.json`` gets
    ``"interrupted": true`` (made from the request if no profiler finished) and
    ``profile.md`` a line, so that the page and ``ortbench report`` tell it from a whole
    profile."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / PROFILE_JSON
    info = json.loads(path.read_text(encoding="utf-8")) if path.exists() else asdict(request)
    path.write_text(json.dumps(info | {"interrupted": True}, indent=1), encoding="utf-8")
    notes = folder / "profile.md"
    text = notes.read_text(encoding="utf-8") if notes.exists() else (
        f"# Profile of {request.contender}\n\n"
    )  # fmt: skip
    notes.write_text(
        text + "Interrupted (Ctrl-C or SIGTERM): the profilers not listed above did not run.\n",
        encoding="utf-8",
    )


def steady_epochs(epoch_seconds: float) -> int:
    """Epochs that fill :data:`WINDOW_SECONDS`, within [MIN_EPOCHS, MAX_EPOCHS].

    Parameters
    ----------
    epoch_seconds : float
        The time of one epoch without a profiler.

    Returns
    -------
    int
        The default number of profiled epochs.
    """
    enough = math.ceil(WINDOW_SECONDS / epoch_seconds) if epoch_seconds > 0 else MAX_EPOCHS
    return min(max(enough, MIN_EPOCHS), MAX_EPOCHS)


def _runtime_profile(
    contender, per_epoch: int, epochs: int, plain_seconds: float, traces: Path, folder: Path
) -> str:
    """Profile the steady window with onnxruntime's profiler; write steps and operators."""
    with profiled_sessions(traces):
        cell = contender()
        cell.fit(WARMUP_EPOCHS)
        start = time.perf_counter()
        cell.continue_fit(epochs)
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
    warm, window = WARMUP_EPOCHS * per_epoch, epochs * per_epoch
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
    profiles, them = plural(len(files), "session profile"), "it" if len(files) == 1 else "them"
    return f"onnxruntime: {profiles} in onnxruntime/ (open {them} in Perfetto)"


def _instruction_profile(
    request: ProfileRequest, epochs: int, client: Path, folder: Path, info: dict
) -> str:
    """Count ``epochs`` epochs after the build and warm-up under callgrind, in a worker of
    ``ab --measure instructions`` (:func:`~ortbench.bench.instructions.count_here`): keep
    its callgrind file as ``callgrind.out.steps``, write its tables into
    ``instructions.md`` and the count per step into ``info``; return the note's line."""
    cell = Cell(request.contender, request.problem, request.dataset, request.batch_size,
                request.device)  # fmt: skip
    config = BenchConfig(contenders=(cell.contender,), epochs=epochs, repeat=1)
    user = request.user and UserFiles.from_json(request.user)
    work = folder / CALLGRIND_WORK  # kept when the count fails: the error names its log
    work.mkdir()
    try:
        (result,), dump = count_here([cell], config, client, work, user)
    except OrtBenchError as e:
        result, problem = None, str(e)
    else:
        problem = None if result.ok else result.row["status"]
    if problem:
        info["instructions_problem"] = problem
        return f"callgrind: no count: {problem}"
    kept = folder / CALLGRIND_FILE
    shutil.move(dump, kept)
    shutil.rmtree(work)
    long_epochs = SHORT_EPOCHS + epochs
    steps = long_epochs * result.row["steps"] // epochs
    per_step = result.details[PER_STEP]
    info["instructions_per_step"] = per_step
    counted = read_instructions(kept)
    title = (
        f"One fit of {long_epochs} epochs after the build and {WARM_FITS} warm-up fits, "
        f"counted under callgrind ({CALLGRIND_FILE}: KCachegrind or callgrind_annotate "
        "open it)."
    )
    (folder / "instructions.md").write_text(
        instructions_markdown(counted, steps, per_step, title), encoding="utf-8"
    )
    return f"callgrind: {CALLGRIND_FILE}, instructions.md; {per_step:,.0f} instructions per step."
