"""Contenders: the ways to train a problem that ortbench compares, behind one interface."""

from __future__ import annotations

from ...schema import BASELINE
from ...training import OrtBenchError
from ..problems import Problem
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


__all__ = ["BASELINE", "CONTENDERS", "Contender", "Unavailable", "make_contender"]
