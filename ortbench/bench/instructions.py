"""Instructions per training step counted by callgrind (``ab --measure instructions``).

Each side's worker (:mod:`.ab_worker`) runs under ``valgrind --tool=callgrind
--instr-atstart=no``: nothing is counted until the worker switches instrumentation on,
which it does through callgrind's client requests once a cell is built, for the cell's
counted fits; callgrind's counts are zeroed right before each fit and dumped under a label
right after it. Instrumentation stays on between the fits of a cell: each switch makes
valgrind translate again the code that runs next (its cost: ``docs/benchmarks.md``).
The client requests are four C functions compiled once from valgrind's ``callgrind.h``
into the cache and loaded with ctypes (:func:`client_library`).

Per cell and side, after the cell is built, fitted once and fitted :data:`WARM_FITS`
times more, counts dropped (bytecode specialised, caches and lazy set-up warm), every
round counts a short fit (``SHORT_EPOCHS`` epochs) and a long one (``epochs`` more,
:data:`EPOCHS` by default): the slope between them is the count per step, free of what a
fit pays once, as the time protocol does.

What moves the counts is pinned: ``PYTHONHASHSEED=0``; the garbage collector's counts are
zeroed before each counted fit (by a collection); each worker is bound to one CPU (the
two sides' to two, so that they count at once), so onnxruntime sizes its intra-op pool to the one thread that calls it (no pool thread spins
between kernels, and spinning would be counted), and BLAS/OpenMP pools get one thread;
glibc's allocator gets one arena, fixed mmap and trim thresholds, not thresholds that
move with the sizes freed so far, and per-thread caches of freed small blocks without a
limit, so that a small block freed and allocated again in each step takes the cache's short
path whatever the heap's history.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ..errors import OrtBenchError
from ..schema import BASE, PER_FIT, PER_STEP, SIDES, SPREAD
from ..schema import INSTRUCTION_SAMPLES as SAMPLES
from .ab import THREADS, SideResult, Worker, prepare_group
from .checkouts import Checkout
from .matrix import BenchConfig, Cell
from .timing import SHORT_EPOCHS
from .user_model import UserFiles

#: The client requests the worker calls: instrumentation on, off, the counts zeroed, and a
#: dump of the counts since the last zero or dump under a label.
CLIENT_SOURCE = """\
#include <valgrind/callgrind.h>
void ortbench_count_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void ortbench_count_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void ortbench_count_zero(void) { CALLGRIND_ZERO_STATS; }
void ortbench_count_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""
#: What to install, named in the one-line refusal.
INSTALL = "install valgrind and a C compiler (Debian/Ubuntu: apt-get install valgrind gcc)"
#: The environment of a counting worker: what would otherwise move its counts.
PINNED = {
    **THREADS,
    "PYTHONHASHSEED": "0",
    "GLIBC_TUNABLES": "glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=131072"
    ":glibc.malloc.trim_threshold=131072:glibc.malloc.tcache_count=65535",
}
#: Counting rounds per cell and side unless ``--repeat`` says otherwise: the counts differ
#: between rounds by far less than a change worth a verdict, so a few show the spread.
ROUNDS = 3
#: Epochs of the first fit, and how many more the long counted fit runs than the short one,
#: unless ``--epochs`` says otherwise: the counts of a fit repeat to a few in ten
#: thousand, so the steps of one epoch between the two fits give the count per step.
EPOCHS = 1
#: Fits counted and dropped before the counted ones, after the first fit: Python
#: specialises a function's bytecode after it has run a few times, so the first rounds'
#: counts per step are off; from the fourth fit on they hold (``docs/benchmarks.md``).
WARM_FITS = 3


def client_library(cache: Path) -> Path:
    """The compiled client requests, built once into ``cache``.

    Parameters
    ----------
    cache : Path
        Folder of the library (named after its source, so an edit rebuilds it).

    Returns
    -------
    Path
        The shared library.

    Raises
    ------
    OrtBenchError
        When valgrind, its header or a C compiler is missing (one line naming what to
        install).
    """
    if shutil.which("valgrind") is None:
        raise OrtBenchError(f"counting instructions needs valgrind on the PATH: {INSTALL}")
    compiler = os.environ.get("CC", "cc")
    if shutil.which(compiler) is None:
        raise OrtBenchError(f"counting instructions needs a C compiler ({compiler}): {INSTALL}")
    digest = hashlib.sha256(CLIENT_SOURCE.encode()).hexdigest()[:12]
    library = cache / f"callgrind-client-{digest}.so"
    if library.exists():
        return library
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        built = Path(work) / library.name
        compiled = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O1", "-x", "c", "-", "-o", str(built)],
            input=CLIENT_SOURCE,
            capture_output=True,
            text=True,
        )
        if compiled.returncode != 0:
            lines = compiled.stderr.strip().splitlines()
            missing = "callgrind.h" in compiled.stderr
            what = "valgrind's header valgrind/callgrind.h" if missing else "a working C compiler"
            raise OrtBenchError(
                f"counting instructions needs {what} ({lines[0] if lines else 'no output'}): "
                f"{INSTALL}"
            )
        built.replace(library)
    return library


def _one_cpu(index: int) -> None:
    """Bind the process about to start to one CPU: the ``index``-th of those it may use,
    counted round, so that the two sides' workers get a CPU each where there are two."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[index % len(allowed)]})


def totals(dump: Path) -> tuple[str, int]:
    """The label and the instruction count of one callgrind dump file."""
    label, count = "", None
    with open(dump, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("desc: Trigger: Client Request: "):
                label = line.split(": ", 3)[-1].strip()
            elif line.startswith("totals:"):
                count = int(line.split()[1])
    if count is None:
        raise OrtBenchError(f"{dump} is not a callgrind dump: no totals line")
    return label, count


class CountingWorker(Worker):
    """A side's worker under callgrind, counting the fits it is asked to count.

    Parameters
    ----------
    name : str
        ``BASE`` or ``HEAD``.
    side : Checkout
        The tree and interpreter to run.
    log : Path
        The worker's stderr (valgrind's own messages included).
    client : Path
        The compiled client requests (:func:`client_library`).
    """

    def __init__(self, name: str, side: Checkout, log: Path, client: Path):
        self.client = client
        # absolute: valgrind runs in the side's tree, not in this process' directory
        self.dumps = log.absolute().with_name(f"callgrind-{name}.out")
        self._dumped = 0
        launcher = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={self.dumps}",
        ]
        super().__init__(
            name,
            side,
            log,
            launcher=launcher,
            environment=PINNED,
            preexec_fn=functools.partial(_one_cpu, SIDES.index(name)),
        )

    @property
    def last_dump(self) -> Path:
        """The callgrind file of the last counted fit (callgrind numbers them from 1)."""
        return Path(f"{self.dumps}.{self._dumped}")

    def warm(self, key: str) -> None:
        """Fit cell ``key`` :data:`WARM_FITS` times as a counted fit runs, counts dropped."""
        for _ in range(WARM_FITS):
            self.count(key, SHORT_EPOCHS)

    def count(self, key: str, epochs: int) -> int:
        """The instructions of one fit of ``epochs`` epochs of cell ``key``.

        Raises
        ------
        OrtBenchError
            When the fit failed (its error) or its dump is missing.
        """
        label = f"{key} epochs={epochs} #{self._dumped + 1}"
        reply = self.request("count", key=key, epochs=epochs, label=label, client=str(self.client))
        if "error" in reply:
            raise OrtBenchError(reply["error"])
        self._dumped += 1
        dump = self.last_dump
        if not dump.exists():
            raise OrtBenchError(f"callgrind wrote no {dump.name}: is the worker under valgrind?")
        found, count = totals(dump)
        if found != label:
            raise OrtBenchError(f"{dump} holds the counts of {found!r}, not of {label!r}")
        return count


def counting_worker(cache: Path) -> Callable[[str, Checkout, Path], CountingWorker]:
    """What ``started`` makes the workers with for ``--measure instructions``: valgrind and
    the client requests checked (the client built into ``cache``) first.

    Raises
    ------
    OrtBenchError
        As :func:`client_library`.
    """
    return functools.partial(CountingWorker, client=client_library(cache))


def per_step(short: int, long: int, short_steps: int, long_steps: int) -> tuple[float, float]:
    """Instructions per step and per fit from the counts of a short and a long fit."""
    step = (long - short) / (long_steps - short_steps)
    return step, short - step * short_steps


def counted_alone(cell: Cell) -> Cell:
    """The group of a counted cell in ``run_ab``: itself. Counts do not move with the
    machine, so nothing is gained by preparing cells together, and each cell's rows are
    written, and shown, as it ends."""
    return cell


def run_count_group(
    group: list[Cell],
    config: BenchConfig,
    sides: dict[str, CountingWorker],
    user: UserFiles | None = None,
    note: Callable[[str], None] | None = None,
) -> list:
    """Count the instructions per step of cells on both sides.

    Every cell is prepared (built, fitted once, scored) on both sides. Then each side, at
    the same time as the other, warms each cell (:meth:`CountingWorker.warm`) and counts
    ``config.repeat`` rounds of a short fit (``SHORT_EPOCHS`` epochs) and a long one
    (``config.epochs`` more); the slope between them is the round's count per step. The
    rows get the median count per step, the rounds' counts and their spread (see
    :data:`PER_STEP`); a fit that breaks marks that side's cell failed. ``note``, where
    given, hears when the building and the counting start and how each side's rounds end:
    under valgrind a round of a large cell takes minutes.

    Returns
    -------
    list of PairedCell
        One per cell of the group, in order.
    """
    if note is not None:
        note(f"{group[0].group_label}: building and fitting once under valgrind, both sides")
    results = prepare_group(group, config, sides, user)
    long_epochs = SHORT_EPOCHS + config.epochs

    def count_side(name: str) -> None:
        """Warm and count every cell of the group on one side, then finish them."""
        worker = sides[name]
        for paired in results:
            result = paired.sides[name]
            if not result.ok:
                continue
            label = paired.cell.label
            steps = result.row["steps"] // config.epochs
            result.row["timing"] = f"instructions: slope of {SHORT_EPOCHS} and {long_epochs} epochs"
            steps_per_fit, fits = [], []
            try:
                worker.warm(label)
                for k in range(1, config.repeat + 1):
                    short = worker.count(label, SHORT_EPOCHS)
                    long = worker.count(label, long_epochs)
                    step, fit = per_step(short, long, SHORT_EPOCHS * steps, long_epochs * steps)
                    steps_per_fit.append(step)
                    fits.append(fit)
                    if note is not None:
                        note(
                            f"{label}: {name} round {k}/{config.repeat}: {step:,.0f} instructions per step"
                        )
            except OrtBenchError as e:
                result.row["status"] = f"failed: {e}"
                continue
            median = float(np.median(steps_per_fit))
            result.details = {
                PER_STEP: median,
                SAMPLES: steps_per_fit,
                SPREAD: (max(steps_per_fit) - min(steps_per_fit)) / median,
                PER_FIT: float(np.median(fits)),
            }
        for paired in results:
            result = paired.sides[name]
            if result.ok:
                reply = worker.request("finish", key=paired.cell.label)
                result.loss_curve = reply.pop("loss_curve", [])
                result.row.update(reply)

    # counts do not move with the machine's load: the sides count at once, each worker
    # on a CPU of its own (see CountingWorker). On Ctrl-C the caller does not wait for a
    # count to end: it closes the workers, and the threads end with them.
    if note is not None and any(r.ok for paired in results for r in paired.sides.values()):
        note(
            f"{group[0].group_label}: counting {config.repeat} rounds of a {SHORT_EPOCHS}- and "
            f"a {long_epochs}-epoch fit under callgrind, both sides at once"
        )
    pool = ThreadPoolExecutor(max_workers=len(sides))
    try:
        for counted in [pool.submit(count_side, name) for name in sides]:
            counted.result()
    finally:
        pool.shutdown(wait=False)
    return results


def count_here(
    group: list[Cell],
    config: BenchConfig,
    client: Path,
    folder: Path,
    user: UserFiles | None = None,
) -> tuple[list[SideResult], Path]:
    """Count the instructions per step of cells with the ortbench running this, in one
    worker under callgrind (what ``profile --instructions`` and the asv suite count).

    Parameters
    ----------
    group : list of Cell
        The cells, counted one after the other in the one worker.
    config : BenchConfig
        Their epochs (the long fit's, beyond the short one's) and rounds (``repeat``).
    client : Path
        The compiled client requests (:func:`client_library`).
    folder : Path
        Where the worker's log and callgrind files go.
    user : UserFiles, optional
        A user's model and data, for cells of a user's problem.

    Returns
    -------
    list of SideResult, Path
        Each cell's row and counts (as :func:`run_count_group` makes them), and the
        callgrind file of the last counted fit: the long fit of the last cell's last round.
    """
    package = Path(__file__).resolve().parents[1]
    here = Checkout("this tree", package.parent, sys.executable, "this interpreter")
    worker = CountingWorker(BASE, here, folder / "worker.log", client)
    try:
        counted = run_count_group(group, config, {BASE: worker}, user)
    finally:
        worker.close()
    return [paired.sides[BASE] for paired in counted], worker.last_dump
