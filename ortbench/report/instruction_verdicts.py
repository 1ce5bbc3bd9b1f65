"""The verdict of ``ab --measure instructions`` on one cell: a threshold on the ratio.

Instruction counts do not move with the machine's load: the same fit counts the same
instructions to a few in ten thousand (the rounds' spread, which each row records). A
change beyond the threshold is therefore a change of the code, not noise, provided the
threshold stands well above that spread: when either side's spread reaches half the
threshold, the cell is not judged on it ("not significant").
"""

from __future__ import annotations

import math

from ..schema import PER_STEP, SPREAD
from .resultsets import Measurement
from .verdicts import IMPROVED, NOT_SIGNIFICANT, REGRESSED, UNCHANGED, Verdict, judge

#: The relative change of instructions per step that regresses (or improves) by default.
THRESHOLD = 0.005
#: The unit of the measure, as reports print it.
UNIT = "instructions"


def _measurement(record: dict) -> Measurement:
    status = record["status"]
    if status != "ok":
        return Measurement(None if status.startswith("failed") else math.nan, UNIT)
    value = record.get(PER_STEP)
    return Measurement(math.nan if value is None else float(value), UNIT)


def instructions_verdict(params: str, base: dict, head: dict, threshold: float) -> Verdict | None:
    """HEAD's instructions per step against BASE's.

    Parameters
    ----------
    params : str
        The cell, as the report names it.
    base, head : dict
        The cell's JSON line on each side.
    threshold : float
        The relative change that regresses (ratio above ``1 + threshold``) or improves
        (below ``1 / (1 + threshold)``).

    Returns
    -------
    Verdict or None
        None when neither side counted instructions (a run that timed its fits, or a cell
        that failed on both sides before its count: its time per step says it failed).
    """
    if PER_STEP not in base and PER_STEP not in head:
        return None  # a run that timed its fits; or a cell failed on both sides before
    before, after = _measurement(base), _measurement(head)
    if before.skipped and after.skipped:
        return None
    if before.failed or after.failed or before.skipped or after.skipped:
        return Verdict(PER_STEP, params, before, after, *judge(before, after, 0, 0))
    ratio = after.value / before.value
    spread = max(base[SPREAD], head[SPREAD])
    beyond = ratio > 1 + threshold or ratio < 1 / (1 + threshold)
    note = f"{ratio - 1:+.2%}, rounds spread {spread:.2%}"
    if spread >= threshold / 2:
        verdict = NOT_SIGNIFICANT if beyond else UNCHANGED
        note += f", over half the threshold {threshold:.2%}: count longer fits, --epochs"
    elif beyond:
        verdict = REGRESSED if ratio > 1 else IMPROVED
    else:
        verdict = UNCHANGED
    return Verdict(PER_STEP, params, before, after, verdict, ratio, note)
