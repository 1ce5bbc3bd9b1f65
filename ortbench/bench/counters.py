"""Deterministic cost counters: onnxruntime runs and OrtValues allocated per training step.

Timings are noisy; these counts are not. While :func:`count_runtime` is active, every epoch
the trainer runs (``BaseTrainer._run_epoch``) is watched: the run methods and OrtValue
factories of the onnxruntime classes the engine reads from its one adapter module
(:mod:`ortbench.training.runtime.capi`) are replaced, for the duration of that epoch only, by
wrappers that count

- runs: each call that runs a graph or an optimizer step;
- OrtValues: each OrtValue created from Python (``OrtValue.ortvalue_from_*``) and each
  output a run put in the vector it was given where no buffer of that address was before.
  Outputs written into preallocated, bound buffers cost nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..training.runtime import capi

#: onnxruntime classes and their methods that run a graph or an optimizer step.
RUN_METHODS = {
    "InferenceSession": (
        "run",
        "run_with_iobinding",
        "run_with_ort_values",
        "run_with_ortvaluevector",
    ),
    "TrainingAgent": ("run_forward", "run_backward"),
    "Module": (
        "train_step",
        "train_step_with_ort_values",
        "eval_step",
        "eval_step_with_ort_values",
    ),
    "Optimizer": ("optimizer_step",),
}
#: Static methods of ``OrtValue`` that create one.
FACTORIES = (
    "ortvalue_from_numpy",
    "ortvalue_from_shape_and_type",
    "ortvalue_from_numpy_with_onnx_type",
)


@dataclass
class RuntimeCounts:
    """Totals over the counted epochs."""

    steps: int = 0
    runs: int = 0
    ortvalues: int = 0

    @property
    def runs_per_step(self) -> float:
        return self.runs / self.steps

    @property
    def ortvalues_per_step(self) -> float:
        return self.ortvalues / self.steps


def _addresses(vector: capi.OrtValueVector) -> list[int]:
    return [vector[i].data_ptr() for i in range(len(vector))]


def _counting_run(run, counts: RuntimeCounts):
    def counted(self, *args, **kwargs):
        vectors = [a for a in args if isinstance(a, capi.OrtValueVector)]
        before = [_addresses(v) for v in vectors]
        result = run(self, *args, **kwargs)
        counts.runs += 1
        for vector, old in zip(vectors, before):
            counts.ortvalues += sum(a not in old for a in _addresses(vector))
        return result

    return counted


def _counting_factory(factory, counts: RuntimeCounts):
    def counted(*args, **kwargs):
        counts.ortvalues += 1
        return factory(*args, **kwargs)

    return staticmethod(counted)


def _patch(counts: RuntimeCounts) -> list[Callable[[], None]]:
    """Install the counting wrappers; return the functions that restore the originals."""
    patches = [
        (getattr(capi, owner), name, _counting_run)
        for owner, names in RUN_METHODS.items()
        if not capi.missing((owner,))  # the training classes, on a plain build
        for name in names
    ]
    patches += [(capi.OrtValue, name, _counting_factory) for name in FACTORIES]
    restores = []
    for cls, name, wrap in patches:
        original = cls.__dict__.get(name)
        if original is None:
            continue
        target = original.__func__ if isinstance(original, staticmethod) else original
        setattr(cls, name, wrap(target, counts))
        restores.append(lambda cls=cls, name=name, original=original: setattr(cls, name, original))
    return restores


@contextlib.contextmanager
def count_runtime(trainer) -> Iterator[RuntimeCounts]:
    """Count onnxruntime runs and new OrtValues in the epochs ``trainer`` fits in the block."""
    counts = RuntimeCounts()
    run_epoch = trainer._run_epoch

    def counted_epoch(loader):
        restores = _patch(counts)
        try:
            return run_epoch(loader)
        finally:
            for restore in restores:
                restore()
            counts.steps += len(loader)

    trainer._run_epoch = counted_epoch
    try:
        yield counts
    finally:
        del trainer._run_epoch
