"""Regression verdicts between two result sets, and their markdown report.

A change counts only when it is statistically significant (see :mod:`.significance`) and
beyond the threshold, as ``asv compare`` decides. Verdicts:

- regressed: significantly slower (larger) by more than the threshold, or a counter grew;
- drift?: regressed on times normalised by the machine's drift between the runs, but
  within the threshold at a machine change between none and the most drifted calibration
  probe's (:mod:`.drift`): inconclusive, to be re-run side by side with ``ortbench ab``;
- failed: errored in HEAD, or measured in BASE and errored, unavailable or absent in HEAD;
- warning: significantly slower by more than ``warn`` but not by more than the threshold;
- not significant: beyond the threshold but within the noise, or a speed-up the machine's
  drift explains;
- improved: significantly faster (smaller) by more than ``warn``, a counter fell, or
  errored in BASE and measured in HEAD;
- missing: measured in HEAD only, unavailable in BASE, not run on a side (its run was
  interrupted before the cell) and not errored in HEAD, or timed as unstable on a side
  (its slopes spread beyond what a time per step can be read from);
- unchanged: anything else measured on both sides.

Cells skipped on both sides (setup raised NotImplementedError, "unavailable"), or in the
only side they appear in, are left out, and so are the counters of a cell an interrupted
run did not measure unless the other side did (its time says it did not run). Only regressed and failed fail a CI job; drift?
leaves the comparison inconclusive. Two runs made apart are each one process: their
verdicts are indicative, and ``ortbench ab`` (both sides timed together) is the gate.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .drift import DRIFT, Drift, measure_drift
from .resultsets import INTERRUPTED, Measurement, ResultSet
from .significance import P_THRESHOLD, is_significant
from .units import format_value, plural

REGRESSED = "regressed"
FAILED = "failed"
WARNING = "warning"
NOT_SIGNIFICANT = "not significant"
IMPROVED = "improved"
MISSING = "missing"
UNCHANGED = "unchanged"
#: The line of a report whose BASE and HEAD are one run folder.
SAME_RUN = "BASE and HEAD are the same run (one run id): the run is compared with itself."
#: What a comparison of two runs can tell, said under its tally.
INDICATIVE = (
    "Indicative: BASE and HEAD are separate runs, each one process with its own model "
    "builds, so their samples show less of the run-to-run spread than two runs have. "
    "Gate a merge on `ortbench ab`, which times both sides side by side."
)
#: Report order: what needs attention first.
ORDER = (FAILED, REGRESSED, DRIFT, WARNING, NOT_SIGNIFICANT, IMPROVED, MISSING, UNCHANGED)


@dataclass(frozen=True)
class Verdict:
    """The decision on one (benchmark, parameters) pair."""

    benchmark: str
    params: str
    before: Measurement | None
    after: Measurement | None
    verdict: str
    ratio: float | None = None
    note: str = ""


@dataclass
class Comparison:
    """Every verdict between BASE and HEAD, with the settings that decided them."""

    base: str
    head: str
    threshold: float
    warn: float
    verdicts: list[Verdict]
    #: the machine's drift between the runs, when both recorded a calibration
    drift: Drift | None = None
    #: rows of either side left out, never judged (one line each, file and line number)
    bad_rows: list[str] = field(default_factory=list)
    #: BASE and HEAD are one run folder: a run compared with itself
    same_run: bool = False
    #: a signal stopped the run (an A/B run: its ``plan.json`` says so)
    interrupted: bool = False
    #: the planned cells the run never reached, ``key=value, ...`` each (an A/B run)
    not_run: list[str] = field(default_factory=list)

    def counts(self) -> Counter:
        return Counter(v.verdict for v in self.verdicts)

    @property
    def failing(self) -> bool:
        """True when anything regressed or failed: CI should fail."""
        counts = self.counts()
        return bool(counts[REGRESSED] or counts[FAILED])

    @property
    def inconclusive(self) -> bool:
        """True when nothing fails but a regression could be the machine's drift."""
        return not self.failing and bool(self.counts()[DRIFT])

    @property
    def compared(self) -> int:
        """How many pairs appear on both sides."""
        return sum(v.before is not None and v.after is not None for v in self.verdicts)

    @property
    def measured(self) -> int:
        """How many pairs both sides measured (not errored, skipped or not run)."""
        return sum(v.ratio is not None for v in self.verdicts)

    @property
    def head_column(self) -> str:
        """The heading of HEAD's column: its times as judged, divided by the drift factor
        where the machine moved."""
        if self.drift is None or not self.drift.moved:
            return "HEAD"
        return f"HEAD, times ÷ {self.drift.factor:.2f} (drift)"

    @property
    def headline(self) -> str:
        """The report's verdict in a few words."""
        if self.failing:
            return "Regressions found"
        if self.inconclusive:
            return "Inconclusive: a slowdown the machine's drift could explain"
        return "No regression" if self.measured else "Nothing measured on both sides"


def _ratio(before: float, after: float) -> float:
    if before == 0:
        return 1.0 if after == 0 else math.inf
    return after / before


def judge(
    before: Measurement, after: Measurement, threshold: float, warn: float
) -> tuple[str, float | None, str]:
    """Verdict, ratio (after / before) and a note for one pair measured on both sides."""
    if after.failed:
        return FAILED, None, f"errored in {'both' if before.failed else 'HEAD'}{_why(after)}"
    if before.interrupted or after.interrupted:
        return MISSING, None, _interrupted(before, after)
    if before.unstable or after.unstable:
        sides = "both" if before.unstable and after.unstable else ""
        sides = sides or ("HEAD" if after.unstable else "BASE")
        return MISSING, None, f"unstable in {sides}: its time per step could not be read"
    if before.failed and after.skipped:
        return MISSING, None, "errored in BASE, could not run in HEAD"
    if before.failed:
        return IMPROVED, None, "errored in BASE only"
    if after.skipped:
        return FAILED, None, "unavailable in HEAD"
    if before.skipped:
        return MISSING, None, "could not run in BASE"
    ratio = _ratio(before.value, after.value)
    if before.counter or after.counter:
        if after.value > before.value:
            return REGRESSED, ratio, "counter increased"
        return (IMPROVED if after.value < before.value else UNCHANGED), ratio, ""
    significant = is_significant(before, after)
    note = "no statistics: decided on the threshold alone" if significant is None else ""
    if ratio > 1 + threshold or ratio < 1 / (1 + threshold):
        if significant is False:
            return NOT_SIGNIFICANT, ratio, "within the noise"
        return (REGRESSED if ratio > 1 else IMPROVED), ratio, note
    if significant is not False and ratio > 1 + warn:
        return WARNING, ratio, note
    if significant is not False and ratio < 1 / (1 + warn):
        return IMPROVED, ratio, note
    return UNCHANGED, ratio, ""


def _why(m: Measurement) -> str:
    """The reason of an error, as the note goes on (its first 120 characters)."""
    if not m.error:
        return ""
    return f": {m.error[:120]}{'...' if len(m.error) > 120 else ''}"


def _interrupted(before: Measurement, after: Measurement) -> str:
    """The note of a pair that a side's interrupted run never measured."""
    if before.interrupted and after.interrupted:
        return "not run: interrupted in both"
    return f"not run: interrupted in {'HEAD' if after.interrupted else 'BASE'}"


def judge_one_side(before: Measurement | None, after: Measurement | None) -> tuple[str, None, str]:
    """Verdict, no ratio, and a note for a pair present on one side only (not skipped)."""
    if after is None:
        if before.failed or before.interrupted:
            how = "errored" if before.failed else "not run: interrupted"
            return MISSING, None, f"{how} in BASE, absent from HEAD"
        return FAILED, None, "absent from HEAD"
    if after.failed:
        return FAILED, None, f"errored in HEAD, absent from BASE{_why(after)}"
    if after.interrupted:
        return MISSING, None, "not run: interrupted in HEAD, absent from BASE"
    return MISSING, None, "only in HEAD"


def _left_out(before: Measurement | None, after: Measurement | None) -> bool:
    """Whether a pair is no verdict: skipped wherever it appears, or a counter no side
    measured where a side's run was interrupted before the cell (the counter may not apply
    to the contender at all; the cell's time says it did not run)."""
    present = [m for m in (before, after) if m is not None]
    if all(m.skipped for m in present):
        return True
    return (
        present[0].counter
        and any(m.interrupted for m in present)
        and not any(m.measured for m in present)
    )


def compare(
    base: ResultSet, head: ResultSet, threshold: float = 0.10, warn: float = 0.05
) -> Comparison:
    """Judge every benchmark of either result set (times normalised when the machine
    drifted between the runs, see :mod:`.drift`)."""
    drift = measure_drift(base, head)
    moved = drift is not None and drift.moved
    verdicts = []
    left_out = base.left_out | head.left_out
    for key in sorted(set(base.measurements) | set(head.measurements)):
        if key[1] in left_out:
            continue
        before, after = base.measurements.get(key), head.measurements.get(key)
        if _left_out(before, after) or _may_be_bad(key[1], before, after, base, head):
            continue
        if moved and after is not None:  # HEAD's times as judged, shown so too
            after = drift.normalise(after)
        if before is None or after is None:
            verdicts.append(Verdict(*key, before, after, *judge_one_side(before, after)))
            continue
        verdict, ratio, note = judge(before, after, threshold, warn)
        explained = moved and not after.counter and drift.explains(ratio, threshold)
        if explained and verdict == REGRESSED:
            verdict = DRIFT
        elif explained and verdict == IMPROVED and ratio is not None:
            verdict, note = NOT_SIGNIFICANT, "within the machine's drift"
        verdicts.append(Verdict(*key, before, after, verdict, ratio, note))
    # counters are exact: their verdicts come first, then the timings'
    verdicts.sort(key=lambda v: (not (v.before or v.after).counter, ORDER.index(v.verdict)))
    bad_rows = base.bad_rows + head.bad_rows
    same = _same_folder(base.folder, head.folder) or (
        base.folder is not None and head.folder is not None and base.label == head.label
    )
    return Comparison(base.label, head.label, threshold, warn, verdicts, drift, bad_rows, same)


def _may_be_bad(
    params: str,
    before: Measurement | None,
    after: Measurement | None,
    base: ResultSet,
    head: ResultSet,
) -> bool:
    """Whether a side lacks the pair and a bad row of that side that lacks a key may be
    its cell: not judged, as the cell of a bad row that has every key."""
    return (after is None and head.may_hold(params)) or (before is None and base.may_hold(params))


def _same_folder(base: Path | None, head: Path | None) -> bool:
    """Whether BASE and HEAD were read from one run folder (a copy of it has its run id:
    its label)."""
    return base is not None and head is not None and os.path.samefile(base, head)


def measurement_text(m: Measurement | None) -> str:
    """A side's measurement as a report shows it: a value with its unit, ``failed``,
    ``interrupted``, ``n/a`` (skipped) or ``-`` (absent)."""
    if m is None:
        return "-"
    if m.failed:
        return "failed"
    if m.interrupted:
        return INTERRUPTED
    return format_value(m.value, m.unit)


def escape_cell(text: str) -> str:
    """``text`` as one markdown table cell: pipes escaped, line breaks as spaces."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _line(v: Verdict) -> str:
    ratio = "n/a" if v.ratio is None else f"{v.ratio:.2f}"
    verdict = f"**{v.verdict}**" if v.verdict in (FAILED, REGRESSED) else v.verdict
    note = f" ({v.note})" if v.note else ""
    return (
        f"| {escape_cell(verdict + note)} | `{escape_cell(v.benchmark)}` "
        f"| {escape_cell(v.params or '-')} | {measurement_text(v.before)} | {measurement_text(v.after)} | {ratio} |"
    )


def _drift_method(drift: Drift | None) -> str:
    """The method's line on the machine's drift (a drift that moved the times is the
    report's first line instead)."""
    if drift is None:
        return "No calibration on both sides: machine drift not checked."
    return "Machine drift: see the first line." if drift.moved else drift.describe()


def comparison_markdown(comparison: Comparison) -> str:
    """A report that reads as a pull-request comment and as a CI artifact."""
    counts = comparison.counts()
    tally = ", ".join(f"{counts[v]} {v}" for v in ORDER if counts[v])
    headline = comparison.headline
    drift = comparison.drift
    lines = [drift.describe()] if drift is not None and drift.moved else []
    same = ["", SAME_RUN] if comparison.same_run else []
    lines += [
        f"## Benchmarks: {headline}",
        "",
        f"BASE: {comparison.base}  ",
        f"HEAD: {comparison.head}",
        *same,
        "",
        f"{tally or 'nothing compared'}.",
        "",
        *([] if comparison.same_run else [INDICATIVE, ""]),
        f"A change counts when it is statistically significant (p < {P_THRESHOLD}: "
        "Mann-Whitney U where that p-value is reachable at the sample counts, else Welch's "
        "t-test on the logarithms of the samples, else non-overlapping 99% confidence "
        f"intervals) and beyond {comparison.threshold:.0%}; warnings are significant slowdowns "
        f"beyond {comparison.warn:.0%}, improvements significant speed-ups beyond "
        f"{comparison.warn:.0%}. Counters regress at any increase. Ratio: HEAD / BASE.",
        "",
        _drift_method(drift),
    ]
    header = [
        f"| verdict | benchmark | parameters | BASE | {comparison.head_column} | ratio |",
        "|---|---|---|---:|---:|---:|",
    ]
    flagged = [v for v in comparison.verdicts if v.verdict != UNCHANGED]
    unchanged = [v for v in comparison.verdicts if v.verdict == UNCHANGED]
    if comparison.bad_rows:
        lines += [
            "",
            f"{plural(len(comparison.bad_rows), 'bad row')} left out, their cells not judged:",
            "",
            *(f"- {row}" for row in comparison.bad_rows),
        ]
    if flagged:
        lines += ["", *header, *map(_line, flagged)]
    if unchanged:
        lines += [
            "",
            f"<details><summary>{len(unchanged)} unchanged</summary>",
            "",
            *header,
            *map(_line, unchanged),
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"
