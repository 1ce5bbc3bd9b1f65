"""Drift between two runs made apart: did the machine, rather than the code, change speed?

Every ``ortbench bench`` run records a calibration (:mod:`ortbench.bench.calibration`):
a numpy matrix product and a one-node onnxruntime loop, each timed ``repeat`` times; only
these machine probes measure drift, never a contender, which the change under test could
move. Comparing two runs, each probe's change is the ratio of its medians, HEAD / BASE.
The calibration moved when a probe's samples differ by a two-sided Mann-Whitney U test
(p < :data:`P_DRIFT`) and by more than :data:`FLOOR`. Then the times are judged normalised
by the calibration (HEAD divided by the geometric mean of the probes' ratios). The machine's
true change may be anything from none to the most drifted probe's: a regression that some
change in that range explains becomes ``drift?``, inconclusive, neither passed nor failed
(``ortbench compare`` exits 4 and asks for ``ortbench ab``), and an improvement that one
explains is not significant. So the correction alone never makes a verdict: two runs of
the same code, the second on a machine whose probes ran faster, do not regress by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from ..schema import MACHINE_PROBES
from .resultsets import Measurement, ResultSet

#: Verdict of a regression that the machine's drift could explain.
DRIFT = "drift?"
#: p-value under which a probe's samples differ.
P_DRIFT = 0.01
#: A probe's change under this is no drift, however significant.
FLOOR = 0.03


@dataclass(frozen=True)
class Drift:
    """How much slower HEAD's run found the machine than BASE's, per probe."""

    #: machine probe -> median HEAD / median BASE
    ratios: dict[str, float]
    #: True when a machine probe changed beyond its noise
    moved: bool

    @property
    def factor(self) -> float:
        """The machine's change: the geometric mean of the machine probes' ratios."""
        logs = [math.log(r) for r in self.ratios.values()]
        return math.exp(sum(logs) / len(logs)) if logs else 1.0

    def describe(self) -> str:
        """One line: whether the machine drifted, by how much, and what was done."""
        probes = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in self.ratios.items())
        if not self.moved:
            return f"Calibration steady (HEAD / BASE: {probes})."
        return (
            f"**Machine drift: the calibration ran {self.factor:.2f}x as long in HEAD as in "
            f"BASE** ({probes}): times are judged divided by {self.factor:.2f}; a "
            f"regression the drift could explain is marked {DRIFT} (inconclusive)."
        )

    def normalise(self, m: Measurement) -> Measurement:
        """A HEAD time measurement divided by the drift factor (others as they are)."""
        if m.unit != "seconds" or m.value is None:
            return m
        f = self.factor
        return replace(
            m,
            value=m.value / f,
            samples=None if m.samples is None else tuple(s / f for s in m.samples),
            ci=None if m.ci is None else (m.ci[0] / f, m.ci[1] / f),
        )

    def explains(self, ratio: float | None, threshold: float) -> bool:
        """Whether a normalised HEAD / BASE ``ratio`` beyond the threshold comes back within
        it at some machine change between none (1) and the most drifted probe's, in the
        direction that would bring it back (the largest for a slowdown, the smallest for a
        speed-up)."""
        if ratio is None:
            return False
        raw = ratio * self.factor
        changes = [1.0, *self.ratios.values()]
        if ratio > 1:
            return raw / max(changes) <= 1 + threshold
        return raw / min(changes) >= 1 / (1 + threshold)


def measure_drift(base: ResultSet, head: ResultSet) -> Drift | None:
    """The drift between two runs' calibrations; None unless both recorded one.

    Parameters
    ----------
    base, head : ResultSet
        The runs, with their ``calibration`` samples.

    Returns
    -------
    Drift or None
        The ratio of each probe both runs timed, and whether the machine moved.
    """
    if not base.calibration or not head.calibration:
        return None
    ratios, moved = {}, False
    for probe in MACHINE_PROBES:
        before, after = base.calibration.get(probe), head.calibration.get(probe)
        if not before or not after:
            continue
        ratios[probe] = float(np.median(after) / np.median(before))
        if abs(math.log(ratios[probe])) > math.log(1 + FLOOR):
            p = stats.mannwhitneyu(before, after, alternative="two-sided").pvalue
            moved = moved or p < P_DRIFT
    if not ratios:
        return None
    return Drift(ratios, moved)
