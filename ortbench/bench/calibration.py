"""The calibration: fixed workloads every bench run times, so that two runs made apart can
tell a slower machine from slower code.

Two probes of the machine alone, timed like the cells of a group: each is prepared once,
then, on the settled heap of the timing protocol (:func:`.timing.settled_heap`), each of
``repeat`` rounds gives every probe one untimed warm-up and one timed run, in turn. No
contender is a probe: the change under test could move it.

- ``numpy-matmul``: one float32 matrix product, 256 x 256 by 256 x 256, on one BLAS
  thread (a pool of threads on a busy machine measures contention more than speed);
- ``ort-one-node``: 200 runs of a one-node onnxruntime graph (:func:`one_matmul_graph`)
  through IOBinding on one thread, the cost that dominates small training steps.

``calibration.json`` in the run folder holds each probe's samples (seconds per product,
per graph run), taken before and after the run's cells. ``ortbench compare`` reads it (:mod:`ortbench.report.drift`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from threadpoolctl import threadpool_limits

from ..schema import CALIBRATION_JSON, NUMPY_PROBE, ORT_PROBE
from ..training.graphs.builder import GraphBuilder
from ..training.runtime.capi import Binding, make_session
from ..training.runtime.devices import cpu_scalar
from ..training.runtime.sessions import session_options
from .store import read_calibration
from .timing import settled_heap

_SIZE = 256
_ORT_RUNS = 200
_ORT_SIZE = 32


def one_matmul_graph(size: int) -> onnx.ModelProto:
    """One MatMul node.

    Inputs: ``X`` (float32, size x size). Outputs: ``Y = X @ W`` (float32, size x size),
    ``W`` a constant.
    """
    g = GraphBuilder("calibration")
    x = g.input("X", [size, size])
    y = g.op("MatMul", x, g.const(np.eye(size, dtype=np.float32)), name="Y")
    g.output(y, [size, size])
    return g.to_model()


def _numpy_probe() -> Callable[[], float]:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((_SIZE, _SIZE), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)

    def run() -> float:
        with threadpool_limits(1, user_api="blas"):
            start = time.perf_counter()
            np.matmul(a, b, out=out)
            return time.perf_counter() - start

    return run


class _OrtLoop:
    """Runs of the one-node graph over bound buffers it keeps alive (the OrtValues view them)."""

    def __init__(self):
        model = one_matmul_graph(_ORT_SIZE).SerializeToString()
        self.binding = Binding(make_session(model, session_options(1), ["CPUExecutionProvider"]))
        self.buffers = [np.ones((_ORT_SIZE, _ORT_SIZE), dtype=np.float32) for _ in range(2)]
        self.values = [cpu_scalar(b) for b in self.buffers]
        self.binding.bind_input("X", self.values[0])
        self.binding.bind_output("Y", self.values[1])

    def __call__(self) -> float:
        start = time.perf_counter()
        for _ in range(_ORT_RUNS):
            self.binding.run()
        return (time.perf_counter() - start) / _ORT_RUNS


def calibrate(repeat: int) -> dict[str, list[float]]:
    """Time the probes, interleaved, ``repeat`` times each.

    Parameters
    ----------
    repeat : int
        Timed runs per probe.

    Returns
    -------
    dict
        Probe name -> its ``repeat`` times (seconds per product or graph run).
    """
    probes = {NUMPY_PROBE: _numpy_probe(), ORT_PROBE: _OrtLoop()}
    samples: dict[str, list[float]] = {name: [] for name in probes}
    with settled_heap():
        for _ in range(repeat):
            for name, run in probes.items():
                run()  # warm-up, as a cell's timed fit follows one untimed epoch
                samples[name].append(run())
    return samples


def write_calibration(folder: str | Path, repeat: int) -> None:
    """Calibrate and add the samples to ``calibration.json`` in a run folder.

    A run calibrates before and after its cells, so that a change of the machine's speed
    during the run shows in the spread rather than hiding in one moment.
    """
    samples = read_calibration(folder) or {}
    for name, times in calibrate(repeat).items():
        samples[name] = samples.get(name, []) + times
    Path(folder, CALIBRATION_JSON).write_text(json.dumps(samples, indent=1), encoding="utf-8")
