"""Paired statistics for A/B runs: HEAD's timed fits against BASE's, block by block.

``ortbench ab`` times the fits of one cell alternately on both sides, two rounds making a
block: A B B A, A B B A, ... (:func:`~ortbench.bench.ab.alternation`). Within a block
both sides hold the same mean place, so a linear drift of the machine's speed lands on
both alike, and the ratio of HEAD's fits to BASE's fits in that block is free of it where
the ratio of two medians is not. Blocks share no fit, so their ratios are independent
units: a Wilcoxon signed-rank test of their logarithms against 0 (exact at the counts
used here) gives each cell's p-value. A run tests many cells: the p-values of all its
cells are adjusted together (Benjamini-Hochberg) before any is compared with
:data:`ALPHA`, and the block ratios' median is held against the ``--threshold`` minimum
effect.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy import stats

from ..bench.store import read_plan, read_records
from ..errors import OrtBenchError
from ..schema import (
    BASE,
    FITS,
    HEAD,
    KEYS,
    PER_STEP,
    POSITIONS,
    RESULTS_CSV,
    RESULTS_JSONL,
    SAMPLES,
    SIDE,
)
from .instruction_verdicts import THRESHOLD, instructions_verdict
from .resultsets import COUNT, Measurement
from .units import format_value, plural
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
#: The false discovery rate of a run's time verdicts: a cell's change counts when its
#: p-value, adjusted over every cell of the run (Benjamini-Hochberg), is under it.
ALPHA = 0.02
#: Places in a cell's order of fits that one block spans: two rounds of both sides.
BLOCK = 4
#: The confidence of the interval around a cell's median block ratio that tells ``ab``
#: whether to time the cell further (:func:`undecided`).
INTERVAL_CONFIDENCE = 0.95


def block_ratios(
    sides: Sequence[str], seconds: Sequence[float], positions: Sequence[int]
) -> list[float]:
    """One ratio per block of two rounds (A B B A): HEAD's fits over BASE's.

    Parameters
    ----------
    sides : sequence of str
        ``BASE`` or ``HEAD`` for each timed fit of one cell.
    seconds : sequence of float
        The time of each of those fits. Times that are not positive are left out.
    positions : sequence of int
        Each fit's place in the cell's order of fits (both sides counted): places
        ``4 j`` to ``4 j + 3`` make block ``j``.

    Returns
    -------
    list of float
        For each block, in order, that holds a positive time of both sides: the geometric
        mean of its HEAD times over the geometric mean of its BASE times. A last block of
        one round (an odd number of rounds) counts too.

    Raises
    ------
    ValueError
        When the lengths differ.
    """
    if not len(sides) == len(seconds) == len(positions):
        raise ValueError(f"{len(sides)} sides, {len(seconds)} times, {len(positions)} places")
    logs: dict[int, dict[str, list[float]]] = {}
    for side, t, position in zip(sides, seconds, positions):
        if t > 0:
            logs.setdefault(position // BLOCK, {BASE: [], HEAD: []})[side].append(math.log(t))
    return [
        math.exp(float(np.mean(block[HEAD])) - float(np.mean(block[BASE])))
        for _, block in sorted(logs.items())
        if block[BASE] and block[HEAD]
    ]


@dataclass(frozen=True)
class PairedTest:
    """What the block ratios of one cell say."""

    #: HEAD / BASE, one per block
    ratios: tuple[float, ...]
    #: their median: the change the verdict reports
    ratio: float
    #: two-sided p-value of the signed-rank test of log(ratio) against 0
    pvalue: float
    #: ``pvalue`` adjusted over every cell of the run (itself when tested alone)
    adjusted: float | None = None

    @property
    def significant(self) -> bool:
        return (self.pvalue if self.adjusted is None else self.adjusted) < ALPHA


def paired_test(ratios: Sequence[float]) -> PairedTest:
    """The median ratio and the signed-rank test of the ratios against 1.

    Parameters
    ----------
    ratios : sequence of float
        Independent ratios HEAD / BASE (see :func:`block_ratios`), all positive.

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


def adjusted(tests: Sequence[PairedTest]) -> list[PairedTest]:
    """The tests with their p-values adjusted together for the false discovery rate
    (Benjamini-Hochberg: ``scipy.stats.false_discovery_control``)."""
    if not tests:
        return []
    pvalues = stats.false_discovery_control([t.pvalue for t in tests], method="bh")
    return [replace(t, adjusted=float(p)) for t, p in zip(tests, pvalues)]


def median_interval(ratios: Sequence[float]) -> tuple[float, float]:
    """A distribution-free confidence interval for the median block ratio: two order
    statistics of the ratios, chosen from the binomial distribution of the number of
    ratios under the median (``scipy.stats.quantile_test``), at
    :data:`INTERVAL_CONFIDENCE`. Its bounds are infinite where there are too few ratios
    for an interval of that confidence."""
    if not ratios:
        return -math.inf, math.inf
    test = stats.quantile_test(np.asarray(ratios, dtype=float), q=1.0, p=0.5)
    low, high = test.confidence_interval(INTERVAL_CONFIDENCE)
    return float(np.nan_to_num(low, nan=-math.inf)), float(np.nan_to_num(high, nan=math.inf))


def undecided(ratios: Sequence[float], threshold: float, level: float) -> bool:
    """Whether a cell's verdict on a regression is still open: the confidence interval of
    its median block ratio (:func:`median_interval`) holds ``1 + threshold``, so more
    blocks could move the median to either side of it; or the median is beyond it and
    the signed-rank test's p-value is not under ``level`` yet. ``ab`` times such cells
    further, up to its budget of rounds (sequential sampling). Improvements do not extend
    a run: a gate is for slowdowns.

    Parameters
    ----------
    ratios : sequence of float
        The cell's block ratios HEAD / BASE.
    threshold : float
        The relative slowdown that regresses.
    level : float
        The p-value that makes the slowdown count whatever the run's other cells give:
        :data:`ALPHA` over the number of cells the run tests (the Benjamini-Hochberg
        adjustment multiplies a p-value by at most that number).
    """
    low, high = median_interval(ratios)
    if low <= 1 + threshold <= high:
        return True
    return low > 1 + threshold and paired_test(ratios).pvalue >= level


def min_pvalue(n: int) -> float:
    """The smallest two-sided p-value the exact signed-rank test reaches with ``n`` units."""
    return 2 / 2**n


def blocks(repeat: int) -> int:
    """The independent units (blocks, see :func:`block_ratios`) of ``repeat`` rounds."""
    return math.ceil(repeat * 2 / BLOCK)


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
    """Counters first (exact), then the time per step: a verdict, or the cell's paired test
    with its measurements when the verdict waits for the run's adjustment."""
    verdicts = []
    for name in ("runs_per_step", "ortvalues_per_step"):
        before, after = _measurement(base, name, COUNT), _measurement(head, name, COUNT)
        if before.skipped and after.skipped:
            continue
        verdicts.append(Verdict(name, params, before, after, *judge(before, after, 0, 0)))
    before = _measurement(base, "seconds_per_step", "seconds")
    after = _measurement(head, "seconds_per_step", "seconds")
    if before.skipped and after.skipped:
        return verdicts, None
    if before.failed or after.failed or before.skipped or after.skipped or not after.samples:
        judged = judge(before, after, threshold, warn)
        verdicts.append(Verdict("seconds_per_step", params, before, after, *judged))
        return verdicts, None
    fits = [
        (record[SIDE], seconds, position)
        for record in (base, head)
        for position, seconds in zip(record[POSITIONS], record[FITS])
    ]
    ratios = block_ratios(*zip(*fits)) if fits else []
    if not ratios:
        note = "no positive time on one side: lost in the noise"
        verdicts.append(
            Verdict("seconds_per_step", params, before, after, NOT_SIGNIFICANT, None, note)
        )
        return verdicts, None
    return verdicts, (params, before, after, paired_test(ratios))


def refuse_ab_run(path: str | Path, instead: str) -> None:
    """Refuse an A/B run folder where a command reads the run of one side (``compare``,
    ``report``): its rows come two per cell, BASE's and HEAD's.

    Parameters
    ----------
    path : str or Path
        What the command was given; anything but an A/B run folder passes.
    instead : str
        What the command reads, for the error line.

    Raises
    ------
    OrtBenchError
        When ``path`` is a run folder whose ``results.csv`` has a ``side`` column: one line
        naming its verdict (``ab.md``) and ``instead``.
    """
    folder = Path(path)
    try:
        with open(folder / RESULTS_CSV, encoding="utf-8", newline="") as f:
            sided = SIDE in next(csv.reader(f), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return  # not a run folder, or one whose reader says what is wrong with it
    if sided:
        raise OrtBenchError(
            f"{folder} is an ortbench ab run (a row per cell and side): its verdict is in "
            f"{folder / AB_MD}; {instead}"
        )


def ab_comparison(
    folder: str | Path,
    labels: tuple[str, str] = (BASE, HEAD),
    threshold: float = 0.10,
    warn: float = 0.05,
    instructions_threshold: float = THRESHOLD,
) -> Comparison:
    """The verdicts of an A/B run folder: counters exactly, times on block ratios,
    instruction counts on a threshold (:mod:`.instruction_verdicts`).

    Parameters
    ----------
    folder : str or Path
        A run folder written by ``ortbench ab`` (rows with a ``side`` column).
    labels : (str, str)
        How the report names BASE and HEAD.
    threshold, warn : float
        The minimum relative change that regresses (or improves), and that warns.
    instructions_threshold : float
        The relative change of instructions per step that regresses (or improves).

    Returns
    -------
    Comparison
        Counter verdicts first, then times; each group in the report's order. The times'
        p-values are adjusted over every cell of the folder together. Where the folder's
        plan says a signal stopped the run, it is ``interrupted`` and names the planned
        cells that have no row (``not_run``).

    Raises
    ------
    OrtBenchError
        When the folder is not an A/B run folder.
    """
    plan = read_plan(folder)
    stopped_early = plan is not None and not Path(folder, RESULTS_JSONL).exists()
    records = [] if stopped_early else read_records(folder)
    by_cell: dict[str, dict[str, dict]] = {}
    for record in records:
        if record.get(SIDE) not in (BASE, HEAD):
            raise OrtBenchError(f"{folder} is not an ortbench ab run folder (no {SIDE} column)")
        params = ", ".join(f"{k}={record[k]}" for k in KEYS)
        by_cell.setdefault(params, {})[record[SIDE]] = record
    verdicts, tested = [], []
    for params, sides in by_cell.items():
        if len(sides) == 2:
            decided, pending = _cell_verdicts(params, sides[BASE], sides[HEAD], threshold, warn)
            verdicts += decided
            counted = instructions_verdict(params, sides[BASE], sides[HEAD], instructions_threshold)
            if counted is not None:
                verdicts.append(counted)
            if pending is not None:
                tested.append(pending)
    tests = adjusted([test for *_, test in tested])
    for (params, before, after, _), test in zip(tested, tests):
        verdict = paired_verdict(test, threshold, warn)
        note = (
            f"paired p={test.pvalue:.2g}, adjusted {test.adjusted:.2g}, {len(test.ratios)} blocks"
        )
        verdicts.append(
            Verdict("seconds_per_step", params, before, after, verdict, test.ratio, note)
        )
    verdicts.sort(key=lambda v: (v.benchmark == "seconds_per_step", ORDER.index(v.verdict)))
    comparison = Comparison(*labels, threshold, warn, verdicts)
    if plan is not None:
        comparison.not_run = [
            ", ".join(f"{k}={cell[k]}" for k in KEYS) for cell in plan.unreached(records)
        ]
        # a signal after the last cell (while the run wrote its files) cut nothing short
        comparison.interrupted = plan.interrupted and bool(comparison.not_run)
    return comparison


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


#: How the report explains the instruction verdicts.
INSTRUCTIONS_NOTE = (
    "Instructions counted by callgrind in the training steps only. BASE, HEAD: median "
    "instructions per step over the rounds, slope between a short and a long fit. A change "
    "counts when the ratio HEAD / BASE is beyond the threshold and each side's spread over "
    "its rounds is under half of it."
)


def _headline(comparison: Comparison) -> str:
    """The report's verdict; an interrupted run's says so first, and gives no verdict of
    "No regression": the cells it did not run could hold one."""
    found = comparison.headline
    if not comparison.interrupted:
        return found
    stopped = f"Interrupted, {plural(len(comparison.not_run), 'cell')} not run"
    return f"{stopped}: regressions found" if comparison.failing else f"{stopped}: no verdict"


def _not_run(comparison: Comparison) -> list[str]:
    """The section naming the planned cells the run never reached."""
    if not comparison.not_run:
        return []
    return ["", "### Cells not run", "", *(f"- {cell}" for cell in comparison.not_run)]


def ab_markdown(comparison: Comparison) -> str:
    """The A/B report: counters (exact) first, then times judged on paired ratios; an
    interrupted run's heading says so, and the cells it did not run come first."""
    counts = comparison.counts()
    tally = ", ".join(f"{counts[v]} {v}" for v in ORDER if counts[v])
    headline = _headline(comparison)
    counters = [v for v in comparison.verdicts if v.benchmark not in ("seconds_per_step", PER_STEP)]
    times = [v for v in comparison.verdicts if v.benchmark == "seconds_per_step"]
    counted = [v for v in comparison.verdicts if v.benchmark == PER_STEP]
    lines = [
        f"## A/B benchmarks: {headline}",
        "",
        f"BASE: {comparison.base}  ",
        f"HEAD: {comparison.head}",
        "",
        f"{tally or 'nothing compared'}.",
        *_not_run(comparison),
    ]
    if counters:
        lines += _section(
            "Counters: onnxruntime runs and new OrtValues per step (any increase regresses)",
            counters,
        )
    if counted:
        lines += _section("Instructions per step (callgrind)", counted)
        lines += ["", INSTRUCTIONS_NOTE]
    if times or not counted:
        lines += _section("Time per step", times)
        lines += [
            "",
            "Timed fits alternate between the sides in blocks of two rounds (A B B A). BASE, "
            "HEAD: median time per step, slope between a short and a long fit. Ratio: the median "
            "over the blocks of HEAD's long fits over BASE's long fits in the block. A change "
            "counts when the signed-rank test of those ratios, its p-value adjusted over every "
            f"cell of the run (Benjamini-Hochberg), gives p < {ALPHA} and the ratio is beyond "
            f"{comparison.threshold:.0%}; warnings are significant slowdowns beyond "
            f"{comparison.warn:.0%}, improvements significant speed-ups beyond "
            f"{comparison.warn:.0%}.",
        ]
    return "\n".join(lines) + "\n"
