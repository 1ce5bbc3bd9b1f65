"""Contenders: the ways to train a problem that ortbench compares, behind one interface."""

from __future__ import annotations

from ...schema import BASELINE
from ...training import OrtBenchError
from ..problems import Problem, batch_too_large
from .base import Contender, Unavailable
from .jax_numpy import JaxNesterov, JaxScan, JaxSGD
from .ort import (
    OrtForwardBackward,
    OrtForwardBackwardNesterov,
    OrtFull,
    OrtPortableForwardBackward,
    OrtPortableFull,
    OrtPortableLoop,
    OrtPortableNesterov,
)
from .pytorch import TorchNesterov, TorchSGD
from .scikit_learn import SklearnMLP, SklearnMLPNesterov, SklearnSGD

CONTENDERS: dict[str, type[Contender]] = {
    c.name: c
    for c in (
        SklearnMLP,
        SklearnMLPNesterov,
        SklearnSGD,
        OrtFull,
        OrtForwardBackward,
        OrtForwardBackwardNesterov,
        OrtPortableForwardBackward,
        OrtPortableFull,
        OrtPortableNesterov,
        TorchSGD,
        TorchNesterov,
        JaxSGD,
        JaxNesterov,
        JaxScan,
        OrtPortableLoop,
    )
}


def make_contender(
    name: str, problem: Problem, batch_size: int, device: str = "cpu", shuffle: bool = True
) -> Contender:
    """The contender ``name`` for one cell; raises :class:`Unavailable` when it cannot run."""
    if name not in CONTENDERS:
        raise OrtBenchError(f"unknown contender {name!r}: expected one of {list(CONTENDERS)}")
    return CONTENDERS[name](problem, batch_size, device, shuffle=shuffle)


def unavailable_reason(name: str, problem: Problem, batch_size: int, device: str) -> str | None:
    """Why contender ``name`` cannot run the cell, found before anything trains: a batch
    size too large for the problem's training rows
    (:func:`~ortbench.bench.problems.batch_too_large`), or the contender's own reason
    (:meth:`Contender.unavailable`); None when it can.

    Parameters
    ----------
    name : str
        One of :data:`CONTENDERS`.
    problem : Problem
        The cell's problem, on the data the cell trains on.
    batch_size : int
        The cell's batch size.
    device : str
        The cell's device.

    Returns
    -------
    str or None
        One line, what the cell's row says after ``unavailable:``.
    """
    return batch_too_large(problem, batch_size) or CONTENDERS[name].unavailable(
        problem, batch_size, device
    )


__all__ = [
    "BASELINE",
    "CONTENDERS",
    "Contender",
    "Unavailable",
    "make_contender",
    "unavailable_reason",
]
