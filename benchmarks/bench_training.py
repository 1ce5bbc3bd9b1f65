"""Training benchmarks: epoch time, peak memory, final loss and onnxruntime cost counters.

Every suite runs the contenders of ``ortbench bench`` (all of them, or the engine's where
it measures the engine) over problem x batch size x device; cells a contender cannot run
raise NotImplementedError in ``setup`` (asv records them as skipped).
"""

from __future__ import annotations

import sys

from ortbench.bench.memory import memory_growth
from ortbench.bench.networks import NETWORKS
from ortbench.bench.problems import sized_problems

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
    against torch, their peer."""

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
