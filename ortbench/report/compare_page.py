"""``ortbench compare --html``: the verdicts as a page a reviewer reads at a glance.

One row per (benchmark, parameters) with BASE, HEAD, their ratio and the verdict, and a
small inline SVG strip per row: BASE's samples (or confidence interval) on one line,
HEAD's on the next, on a shared scale, the medians marked. What moved shows as two clouds
apart; noise as two clouds that overlap. Everything is in the page: no script, no file.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from .html import html_page
from .markdown import markdown_to_html
from .resultsets import Measurement
from .units import format_value
from .verdicts import (
    FAILED,
    IMPROVED,
    ORDER,
    REGRESSED,
    SAME_RUN,
    UNCHANGED,
    WARNING,
    Comparison,
    Verdict,
    measurement_text,
)

#: Verdict -> color of its badge and of HEAD's marks.
COLORS = {REGRESSED: "#c62828", FAILED: "#8e0000", WARNING: "#e08a00", IMPROVED: "#2e7d32"}
NEUTRAL, BASE_COLOR = "#1f5fa8", "#666"
WIDTH, HEIGHT, PAD, LEFT = 320, 46, 10, 42

STYLE = """
.verdict { font-weight: 600; white-space: nowrap; }
.badge { display: inline-block; width: 0.8em; height: 0.8em; border-radius: 50%;
  margin-right: 0.4em; vertical-align: -0.05em; }
td.strip { padding: 0.1em 0.4em; }
svg.strip text { font-size: 10px; fill: #555; font-family: system-ui, sans-serif; }
table.verdicts td.text { white-space: normal; }
"""


def write_comparison_html(comparison: Comparison, path: str | Path) -> Path:
    """Write the comparison as a self-contained HTML page.

    Parameters
    ----------
    comparison : Comparison
        What :func:`ortbench.report.verdicts.compare` returned.
    path : str or Path
        The page to write.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    path.write_text(comparison_html(comparison), encoding="utf-8")
    return path


def comparison_html(comparison: Comparison) -> str:
    """The page of :func:`write_comparison_html`, as a string."""
    counts = comparison.counts()
    tally = ", ".join(f"{counts[v]} {v}" for v in ORDER if counts[v]) or "nothing compared"
    headline = comparison.headline
    flagged = [v for v in comparison.verdicts if v.verdict != UNCHANGED]
    unchanged = [v for v in comparison.verdicts if v.verdict == UNCHANGED]
    parts = [
        f"<h2>{headline}: {html.escape(tally)}</h2>",
        f"<p>BASE: {html.escape(comparison.base)}<br>HEAD: {html.escape(comparison.head)}</p>",
        _drift_paragraph(comparison),
        f"<p>{SAME_RUN}</p>" if comparison.same_run else "",
        f"<p>A slowdown counts when it is statistically significant and beyond "
        f"{comparison.threshold:.0%} (beyond {comparison.warn:.0%} it warns), a speed-up "
        f"when significant and beyond {comparison.warn:.0%}; counters regress at any "
        f"increase. Ratio: HEAD / BASE. In each strip, "
        f"the upper line is BASE and the lower line HEAD: dots are the timing samples, a "
        f"bar the 99% confidence interval, a tick the value compared.</p>",
    ]
    if flagged:
        parts.append(_table(flagged, comparison.head_column))
    if unchanged:
        table = _table(unchanged, comparison.head_column)
        parts.append(f"<details><summary>{len(unchanged)} unchanged</summary>{table}</details>")
    title = f"ortbench compare: {comparison.base} vs {comparison.head}"
    return html_page(title, "\n".join(parts), STYLE)


def _drift_paragraph(comparison: Comparison) -> str:
    """The markdown report's first line, where the machine drifted: how much, and what the
    verdicts made of it (the page said nothing of it)."""
    drift = comparison.drift
    if drift is None or not drift.moved:
        return ""
    return markdown_to_html(drift.describe())


def _table(verdicts: list[Verdict], head_label: str) -> str:
    head = (
        "<tr><th>verdict</th><th>benchmark</th><th>parameters</th><th class='num'>BASE</th>"
        f"<th class='num'>{html.escape(head_label)}</th><th class='num'>HEAD / BASE</th>"
        "<th>samples</th></tr>"
    )
    return (
        f"<table class='verdicts'><thead>{head}</thead><tbody>"
        + "".join(map(_row, verdicts))
        + "</tbody></table>"
    )


def _row(v: Verdict) -> str:
    color = COLORS.get(v.verdict, NEUTRAL)
    note = f"<br><small>{html.escape(v.note)}</small>" if v.note else ""
    ratio = "n/a" if v.ratio is None else f"{v.ratio:.2f}"
    return (
        f"<tr><td class='verdict'><span class='badge' style='background:{color}'></span>"
        f"{html.escape(v.verdict)}{note}</td>"
        f"<td class='text'><code>{html.escape(v.benchmark)}</code></td>"
        f"<td class='text'>{html.escape(v.params or '-')}</td>"
        f"<td class='num'>{_text(v.before)}</td><td class='num'>{_text(v.after)}</td>"
        f"<td class='num'>{ratio}</td><td class='strip'>{strip_svg(v.before, v.after, color)}</td>"
        "</tr>"
    )


def _text(m: Measurement | None) -> str:
    return html.escape(measurement_text(m))


def _points(m: Measurement | None) -> list[float]:
    if m is None or not m.measured:
        return []
    return [*(m.samples or ()), *(m.ci or ()), m.value]


def strip_svg(before: Measurement | None, after: Measurement | None, color: str) -> str:
    """BASE and HEAD on one shared scale, as a small inline SVG.

    Parameters
    ----------
    before, after : Measurement or None
        BASE's and HEAD's measurements (None: not measured on that side).
    color : str
        HEAD's color (its verdict's).

    Returns
    -------
    str
        An ``<svg>`` element; empty when neither side has a finite value.
    """
    values = [x for x in _points(before) + _points(after) if math.isfinite(x)]
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or abs(high) or 1.0
    low, high = low - 0.05 * span, high + 0.05 * span

    def x(value: float) -> float:
        return LEFT + (WIDTH - LEFT - PAD) * (value - low) / (high - low)

    marks = []
    for m, y, mark_color, side in ((before, 12, BASE_COLOR, "BASE"), (after, 30, color, "HEAD")):
        marks.append(f"<text x='0' y='{y + 3}'>{side}</text>")
        if not _points(m):
            continue
        if m.ci:
            marks.append(
                f"<line x1='{x(m.ci[0]):.1f}' x2='{x(m.ci[1]):.1f}' y1='{y}' y2='{y}' "
                f"stroke='{mark_color}' stroke-width='5' stroke-opacity='0.35'/>"
            )
        marks.extend(
            f"<circle cx='{x(s):.1f}' cy='{y}' r='2.4' fill='{mark_color}' fill-opacity='0.55'/>"
            for s in m.samples or ()
        )
        marks.append(
            f"<line x1='{x(m.value):.1f}' x2='{x(m.value):.1f}' y1='{y - 7}' y2='{y + 7}' "
            f"stroke='{mark_color}' stroke-width='2'/>"
        )
    unit = (before or after).unit
    marks.append(
        f"<text x='{LEFT}' y='{HEIGHT - 2}'>{html.escape(format_value(min(values), unit))}</text>"
        f"<text x='{WIDTH - PAD}' y='{HEIGHT - 2}' text-anchor='end'>"
        f"{html.escape(format_value(max(values), unit))}</text>"
    )
    return (
        f"<svg class='strip' width='{WIDTH}' height='{HEIGHT}' viewBox='0 0 {WIDTH} {HEIGHT}' "
        f"role='img' aria-label='BASE and HEAD samples'>{''.join(marks)}</svg>"
    )
