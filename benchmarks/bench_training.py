"""Training benchmarks: epoch time, peak memory, final loss and onnxruntime cost counters.

Every suite runs the contenders of ``ortbench bench`` over contender x problem x batch size x
device; cells a contender cannot run raise NotImplementedError in ``setup`` (asv records
them as skipped).
"""

from __future__ import annotations

import sys

from ortbench.bench.contenders.ort import OrtContender
from ortbench.bench.memory import memory_growth

from .common import PARAM_NAMES, PARAMS, contender

#: Epochs of the fit whose peak memory is measured, and of the fit whose loss is tracked.
SHORT_FIT = 2
TRACKED_FIT = 5
#: Epochs of the fit whose peak memory is compared with its first epoch's.
LONG_FIT = 100


class TimeEpoch:
    """One more training epoch, the model already built and warmed up by a first epoch."""

    params = PARAMS
    param_names = PARAM_NAMES
    timeout = 300

    def setup(self, name, problem, batch_size, device):
        self.contender = contender(name, problem, batch_size, device).fit(1)

    def time_epoch(self, name, problem, batch_size, device):
        self.contender.continue_fit(1)


class PeakMemory:
    """Peak memory of a short fit from scratch (building included)."""

    params = PARAMS
    param_names = PARAM_NAMES
    timeout = 300

    def setup(self, name, problem, batch_size, device):
        self.contender = contender(name, problem, batch_size, device)

    def peakmem_fit(self, name, problem, batch_size, device):
        self.contender.fit(SHORT_FIT)


class MemoryGrowth:
    """Peak memory of a 100-epoch fit over that of its first epoch (1.0: nothing grows per
    step), for the engine's trainers."""

    params = PARAMS
    param_names = PARAM_NAMES
    timeout = 600

    def setup(self, name, problem, batch_size, device):
        if not sys.platform.startswith("linux"):
            raise NotImplementedError("the peak is read from /proc/self (Linux only)")
        self.contender = contender(name, problem, batch_size, device)
        if not isinstance(self.contender, OrtContender):
            raise NotImplementedError(f"{name} is not one of the engine's trainers")

    def track_peak_memory_ratio(self, name, problem, batch_size, device):
        return memory_growth(self.contender, LONG_FIT).ratio

    track_peak_memory_ratio.unit = "ratio"


class FinalLoss:
    """Training loss of the last epoch of a fit from the problem's initial weights."""

    params = PARAMS
    param_names = PARAM_NAMES
    timeout = 300

    def setup(self, name, problem, batch_size, device):
        self.contender = contender(name, problem, batch_size, device)

    def track_final_loss(self, name, problem, batch_size, device):
        return self.contender.fit(TRACKED_FIT).loss_curve_[-1]

    track_final_loss.unit = "loss"


class RuntimeCounters:
    """onnxruntime runs and new OrtValues per training step in steady state (deterministic)."""

    params = PARAMS
    param_names = PARAM_NAMES
    timeout = 300

    def setup(self, name, problem, batch_size, device):
        counts = contender(name, problem, batch_size, device).fit(1).runtime_counts()
        if counts is None:
            raise NotImplementedError(f"{name} runs no onnxruntime session")
        self.counts = counts

    def track_runs_per_step(self, name, problem, batch_size, device):
        return self.counts.runs_per_step

    track_runs_per_step.unit = "count"

    def track_ortvalues_per_step(self, name, problem, batch_size, device):
        return self.counts.ortvalues_per_step

    track_ortvalues_per_step.unit = "count"
