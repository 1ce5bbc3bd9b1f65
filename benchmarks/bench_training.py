"""Training benchmarks: epoch time, peak memory, final loss and onnxruntime cost counters.

Every suite runs the contenders of ``ortbench bench`` (all of them, or the engine's where
it measures the engine) over problem x batch size x device; cells a contender cannot run
raise NotImplementedError in ``setup`` (asv records them as skipped).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ortbench.bench.instructions import EPOCHS, ROUNDS, client_library, count_here
from ortbench.bench.matrix import BenchConfig, Cell
from ortbench.bench.memory import memory_growth
from ortbench.bench.networks import NETWORKS
from ortbench.bench.problems import sized_problems
from ortbench.errors import OrtBenchError
from ortbench.schema import PER_STEP

from .common import ENGINE_CONTENDERS, PARAM_NAMES, ContenderSuite, Settled, contender

#: The network problems and the batch sizes they are timed at.
NETWORK_PROBLEMS = list(NETWORKS)
NETWORK_BATCH_SIZES = [16, 256]
#: Epochs of the fit whose peak memory is measured, and of the fit whose loss is tracked.
SHORT_FIT = 2
TRACKED_FIT = 5
#: Epochs of the fit whose peak memory is compared with its first epoch's.
LONG_FIT = 100


class TimeEpoch(ContenderSuite, Settled):
    """One more training epoch, the model already built and warmed up by a first epoch."""

    def setup(self, name, problem, batch_size, device):
        super().setup(name, problem, batch_size, device)
        self.contender.fit(1)
        self.settle()

    def time_epoch(self, name, problem, batch_size, device):
        self.contender.continue_fit(1)


class TimeNetworkEpoch(TimeEpoch):
    """The same on the network problems (cnn, transformer on the digit images): the engine
    against torch and JAX, its peers there."""

    problems = NETWORK_PROBLEMS
    batch_sizes = NETWORK_BATCH_SIZES


class PeakMemory(ContenderSuite):
    """Peak memory of a short fit from scratch (building included)."""

    def peakmem_fit(self, name, problem, batch_size, device):
        self.contender.fit(SHORT_FIT)


class MemoryGrowth(ContenderSuite):
    """Peak memory of a 100-epoch fit over that of its first epoch (1.0: nothing grows per
    step), for the engine's trainers."""

    contenders = ENGINE_CONTENDERS
    timeout = 600

    def setup(self, name, problem, batch_size, device):
        if not sys.platform.startswith("linux"):
            raise NotImplementedError("the peak is read from /proc/self (Linux only)")
        super().setup(name, problem, batch_size, device)

    def track_peak_memory_ratio(self, name, problem, batch_size, device):
        return memory_growth(self.contender, LONG_FIT).ratio

    track_peak_memory_ratio.unit = "ratio"


class FinalLoss(ContenderSuite):
    """Training loss of the last epoch of a fit from the problem's initial weights."""

    def track_final_loss(self, name, problem, batch_size, device):
        return self.contender.fit(TRACKED_FIT).loss_curve_[-1]

    track_final_loss.unit = "loss"


class RuntimeCounters(ContenderSuite):
    """onnxruntime runs and new OrtValues per training step in steady state (deterministic),
    for the engine's trainers."""

    contenders = ENGINE_CONTENDERS

    def setup(self, name, problem, batch_size, device):
        super().setup(name, problem, batch_size, device)
        self.counts = self.contender.fit(1).runtime_counts()

    def track_runs_per_step(self, name, problem, batch_size, device):
        return self.counts.runs_per_step

    track_runs_per_step.unit = "count"

    def track_ortvalues_per_step(self, name, problem, batch_size, device):
        return self.counts.ortvalues_per_step

    track_ortvalues_per_step.unit = "count"


#: The thread settings ``ThreadChoice`` compares, by the name asv shows.
THREAD_SETTINGS = {"one": 1, "pool": None, "auto": "auto"}
#: The regression MLP at the three sizes of the speed targets (docs/benchmarks.md).
THREAD_PROBLEMS = list(sized_problems(("mlp",), ((50, 10), (256, 128), (512, 256))))
THREAD_PARAM_NAMES = [*PARAM_NAMES[:3], "threads"]
THREAD_PARAMS = [
    ["ort-full", "ort-fwbw"],
    THREAD_PROBLEMS,
    [1, 16, 256, 1024],
    list(THREAD_SETTINGS),
]


class ThreadChoice(Settled):
    """One more epoch of the engine's trainers on one intra-op thread, on onnxruntime's
    pool (every core) and with ``'auto'``, on the regression MLP at three sizes: what
    ``intra_op_threads='auto'`` should pick at each size (CPU only)."""

    params = THREAD_PARAMS
    param_names = THREAD_PARAM_NAMES
    timeout = 300

    def setup(self, name, problem, batch_size, threads):
        self.contender = contender(name, problem, batch_size, "cpu")
        self.contender.intra_op_threads = THREAD_SETTINGS[threads]
        self.contender.fit(1)
        self.settle()

    def time_epoch(self, name, problem, batch_size, threads):
        self.contender.continue_fit(1)


#: The cells whose instructions per step are counted: the engine's forward/backward
#: trainer on both backends, at batch 15 on the default problem.
INSTRUCTION_CELLS = [
    Cell(name, "mlp", "make_regression", 15, "cpu") for name in ("ort-fwbw", "ort-portable-fwbw")
]
INSTRUCTION_PARAMS = [[cell.contender for cell in INSTRUCTION_CELLS]]
INSTRUCTION_PARAM_NAMES = ["contender"]
#: Epochs of the long counted fit beyond the short one, and rounds per cell: ab's.
INSTRUCTION_CONFIG = BenchConfig(epochs=EPOCHS, repeat=ROUNDS)


class Instructions:
    """Instructions per training step of a few cells, counted under valgrind's callgrind
    as ``ab --measure instructions`` counts them (deterministic: the median of its rounds).

    All cells are counted in one worker by ``setup_cache`` (about 25 s to start it under
    valgrind, under 30 s per cell); without valgrind or a C compiler, or where a
    cell cannot run, ``setup`` raises NotImplementedError with the reason.
    """

    params = INSTRUCTION_PARAMS
    param_names = INSTRUCTION_PARAM_NAMES
    timeout = 1200

    def setup_cache(self) -> dict[str, float | str]:
        with tempfile.TemporaryDirectory() as work:
            try:
                client = client_library(Path(work))
                results, _ = count_here(INSTRUCTION_CELLS, INSTRUCTION_CONFIG, client, Path(work))
            except OrtBenchError as e:
                return {cell.contender: str(e) for cell in INSTRUCTION_CELLS}
        return {
            cell.contender: result.details[PER_STEP] if result.ok else result.row["status"]
            for cell, result in zip(INSTRUCTION_CELLS, results)
        }

    def setup(self, counts: dict[str, float | str], name: str) -> None:
        if isinstance(counts[name], str):
            raise NotImplementedError(counts[name])

    def track_instructions_per_step(self, counts: dict[str, float | str], name: str) -> float:
        return counts[name]

    track_instructions_per_step.unit = "instructions"
