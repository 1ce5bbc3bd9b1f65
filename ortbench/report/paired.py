"""Paired statistics for A/B runs: each HEAD fit against the BASE fits timed next to it.

``ortbench ab`` times the fits of one cell alternately on both sides (A B B A A B ...).
A drift of the machine's speed then moves neighbouring fits alike, so the ratio of a
HEAD fit to its neighbouring BASE fits is free of it where the ratio of two medians is
not. The verdict rests on those ratios: a Wilcoxon signed-rank test of their logarithms
against 0 (exact at the repeat counts used here, where it can decide from 10 pairs on)
and their median against the ``--threshold`` minimum effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

from ..bench.ab import BASE, FITS, HEAD, POSITIONS, SIDE
from ..bench.store import KEYS, SAMPLES, read_records
from ..training import OrtBenchError
from .resultsets import COUNT, Measurement
from .significance import P_THRESHOLD
from .units import format_value
from .verdicts import (
    FAILED,
    IMPROVED,
    NOT_SIGNIFICANT,
    ORDER,
    REGRESSED,
    UNCHANGED,
    WARNING,
    Comparison,
    Verdict,
    escape_cell,
    judge,
)

#: The report an A/B run folder holds.
AB_MD = "ab.md"
#: Two-sided p-value of the signed-rank test under which the ratios differ from 1: the
#: level of ``compare``'s tests.
ALPHA = P_THRESHOLD


def neighbour_ratios(sides: Sequence[str], seconds: Sequence[float]) -> list[float]:
    """The ratio of each HEAD fit to its neighbouring BASE fits.

    Parameters
    ----------
    sides : sequence of str
        ``BASE`` or ``HEAD`` for each timed fit of one cell, in the order they ran.
    seconds : sequence of float
        The time of each of those fits. Times that are not positive (a slope lost in the
        noise) are left out.

    Returns
    -------
    list of float
        For each HEAD fit in order, its time over the geometric mean of the nearest BASE
        fit before it and the nearest after it (only one of them at either end); empty
        when a side has no positive time.

    Raises
    ------
    ValueError
        When the lengths differ.
    """
    if len(sides) != len(seconds):
        raise ValueError(f"{len(sides)} sides for {len(seconds)} times")
    kept = [(side, t) for side, t in zip(sides, seconds) if t > 0]
    sides, seconds = [side for side, _ in kept], [t for _, t in kept]
    base = [k for k, side in enumerate(sides) if side == BASE]
    if not base:
        return []
    ratios = []
    for k, side in enumerate(sides):
        if side != HEAD:
            continue
        before = [j for j in base if j < k][-1:]
        after = [j for j in base if j > k][:1]
        logs = [math.log(seconds[j]) for j in before + after]
        ratios.append(seconds[k] / math.exp(sum(logs) / len(logs)))
    return ratios


@dataclass(frozen=True)
class PairedTest:
    """What the paired ratios of one cell say."""

    #: HEAD / neighbouring BASE, one per HEAD fit
    ratios: tuple[float, ...]
    #: their median: the change the verdict reports
    ratio: float
    #: two-sided p-value of the signed-rank test of log(ratio) against 0
    pvalue: float

    @property
    def significant(self) -> bool:
        return self.pvalue < ALPHA


def paired_test(ratios: Sequence[float]) -> PairedTest:
    """The median ratio and the signed-rank test of the ratios against 1.

    Parameters
    ----------
    ratios : sequence of float
        Paired ratios HEAD / BASE (see :func:`neighbour_ratios`), all positive.

    Returns
    -------
    PairedTest
        p-value 1 when no ratio differs from 1.
    """
    logs = np.log(np.asarray(ratios, dtype=float))
    if not np.any(logs):
        return PairedTest(tuple(ratios), 1.0, 1.0)
    pvalue = float(stats.wilcoxon(logs, alternative="two-sided").pvalue)
    return PairedTest(tuple(ratios), float(np.exp(np.median(logs))), pvalue)


def min_pvalue(n: int) -> float:
    """The smallest two-sided p-value the exact signed-rank test reaches with ``n`` pairs."""
    return 2 / 2**n


def paired_verdict(test: PairedTest, threshold: float, warn: float) -> str:
    """As ``compare`` decides on a significant change: regressed beyond ``threshold``,
    warning beyond ``warn``, improved faster beyond ``warn``; not significant when the
    median ratio is beyond the threshold but the test cannot tell it from noise;
    unchanged otherwise."""
    beyond = test.ratio > 1 + threshold or test.ratio < 1 / (1 + threshold)
    if not test.significant:
        return NOT_SIGNIFICANT if beyond else UNCHANGED
    if beyond:
        return REGRESSED if test.ratio > 1 else IMPROVED
    if test.ratio > 1 + warn:
        return WARNING
    return IMPROVED if test.ratio < 1 / (1 + warn) else UNCHANGED


def _measurement(record: dict, name: str, unit: str) -> Measurement:
    status = record["status"]
    if status != "ok":
        return Measurement(None if status.startswith("failed") else math.nan, unit)
    value = record.get(name)
    samples = record.get(SAMPLES) if unit == "seconds" else None
    return Measurement(
        math.nan if value is None else float(value), unit, tuple(samples) if samples else None
    )


def _cell_verdicts(params: str, base: dict, head: dict, threshold: float, warn: float):
    """Counters first (exact), then the time per step (paired)."""
    verdicts = []
    for name in ("runs_per_step", "ortvalues_per_step"):
        before, after = _measurement(base, name, COUNT), _measurement(head, name, COUNT)
        if before.skipped and after.skipped:
            continue
        verdicts.append(Verdict(name, params, before, after, *judge(before, after, 0, 0)))
    before = _measurement(base, "seconds_per_step", "seconds")
    after = _measurement(head, "seconds_per_step", "seconds")
    if before.skipped and after.skipped:
        return verdicts
    if before.failed or after.failed or before.skipped or after.skipped or not after.samples:
        judged = judge(before, after, threshold, warn)
        verdicts.append(Verdict("seconds_per_step", params, before, after, *judged))
        return verdicts
    fits = sorted(
        (position, record[SIDE], seconds)
        for record in (base, head)
        for position, seconds in zip(record[POSITIONS], record[FITS])
    )
    ratios = neighbour_ratios([f[1] for f in fits], [f[2] for f in fits])
    if not ratios:
        note = "no positive time on one side: lost in the noise"
        verdicts.append(
            Verdict("seconds_per_step", params, before, after, NOT_SIGNIFICANT, None, note)
        )
        return verdicts
    test = paired_test(ratios)
    verdict = paired_verdict(test, threshold, warn)
    note = f"paired p={test.pvalue:.2g}"
    verdicts.append(Verdict("seconds_per_step", params, before, after, verdict, test.ratio, note))
    return verdicts


def ab_comparison(
    folder: str | Path,
    labels: tuple[str, str] = (BASE, HEAD),
    threshold: float = 0.10,
    warn: float = 0.05,
) -> Comparison:
    """The verdicts of an A/B run folder: counters exactly, times on paired ratios.

    Parameters
    ----------
    folder : str or Path
        A run folder written by ``ortbench ab`` (rows with a ``side`` column).
    labels : (str, str)
        How the report names BASE and HEAD.
    threshold, warn : float
        The minimum relative change that regresses (or improves), and that warns.

    Returns
    -------
    Comparison
        Counter verdicts first, then times; each group in the report's order.

    Raises
    ------
    OrtBenchError
        When the folder is not an A/B run folder.
    """
    by_cell: dict[str, dict[str, dict]] = {}
    for record in read_records(folder):
        if record.get(SIDE) not in (BASE, HEAD):
            raise OrtBenchError(f"{folder} is not an ortbench ab run folder (no {SIDE} column)")
        params = ", ".join(f"{k}={record[k]}" for k in KEYS)
        by_cell.setdefault(params, {})[record[SIDE]] = record
    verdicts = []
    for params, sides in by_cell.items():
        if len(sides) == 2:
            verdicts += _cell_verdicts(params, sides[BASE], sides[HEAD], threshold, warn)
    verdicts.sort(key=lambda v: (v.benchmark == "seconds_per_step", ORDER.index(v.verdict)))
    return Comparison(*labels, threshold, warn, verdicts)


def _table(verdicts: list[Verdict]) -> list[str]:
    lines = [
        "| verdict | measure | parameters | BASE | HEAD | ratio |",
        "|---|---|---|---:|---:|---:|",
    ]
    for v in verdicts:
        ratio = "n/a" if v.ratio is None else f"{v.ratio:.2f}"
        verdict = f"**{v.verdict}**" if v.verdict in (FAILED, REGRESSED) else v.verdict
        note = f" ({v.note})" if v.note else ""
        lines.append(
            f"| {escape_cell(verdict + note)} | {v.benchmark} | {escape_cell(v.params)} "
            f"| {_value(v.before)} | {_value(v.after)} | {ratio} |"
        )
    return lines


def _value(m: Measurement | None) -> str:
    if m is None:
        return "-"
    return "failed" if m.failed else format_value(m.value, m.unit)


def _section(title: str, verdicts: list[Verdict]) -> list[str]:
    flagged = [v for v in verdicts if v.verdict != UNCHANGED]
    unchanged = [v for v in verdicts if v.verdict == UNCHANGED]
    lines = ["", f"### {title}"]
    if flagged:
        lines += ["", *_table(flagged)]
    if unchanged:
        lines += ["", f"<details><summary>{len(unchanged)} unchanged</summary>", ""]
        lines += [*_table(unchanged), "", "</details>"]
    return lines


def ab_markdown(comparison: Comparison) -> str:
    """The A/B report: counters (exact) first, then times judged on paired ratios."""
    counts = comparison.counts()
    tally = ", ".join(f"{counts[v]} {v}" for v in ORDER if counts[v])
    headline = "Regressions found" if comparison.failing else "No regression"
    counters = [v for v in comparison.verdicts if v.benchmark != "seconds_per_step"]
    times = [v for v in comparison.verdicts if v.benchmark == "seconds_per_step"]
    lines = [
        f"## A/B benchmarks: {headline}",
        "",
        f"BASE: {comparison.base}  ",
        f"HEAD: {comparison.head}",
        "",
        f"{tally or 'nothing compared'}.",
    ]
    if counters:
        lines += _section(
            "Counters: onnxruntime runs and new OrtValues per step (any increase regresses)",
            counters,
        )
    lines += _section("Time per step", times)
    lines += [
        "",
        "Timed fits alternate between the sides (A B B A ...). BASE, HEAD: median time per "
        "step, slope between a short and a long fit. Ratio: the median over HEAD's long fits "
        "of each one's time over its neighbouring BASE long fits. A change counts when the "
        f"signed-rank test of those ratios gives p < {ALPHA} and the ratio is beyond "
        f"{comparison.threshold:.0%}; warnings are significant slowdowns beyond "
        f"{comparison.warn:.0%}, improvements significant speed-ups beyond "
        f"{comparison.warn:.0%}.",
    ]
    return "\n".join(lines) + "\n"
