"""``index.html``: one self-contained page for a run folder (bench results and profiles).

Every image and link points at a file inside the run folder and nothing loads from the
network, so the folder can be archived, attached to a CI job or opened offline.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from ..bench.store import RESULTS_CSV, read_results
from . import profile_page
from .markdown import markdown_to_html
from .summary import SUMMARY_MD, write_summary

INDEX_HTML = "index.html"

#: Columns of results.csv shown in the page's table: header, and how a value reads.
TABLE_COLUMNS = {
    "contender": "contender",
    "problem": "problem",
    "dataset": "data set",
    "batch_size": "batch size",
    "device": "device",
    "seconds_per_step": "time per step (µs, median)",
    "spread": "min - max (µs)",
    "seconds_per_fit_overhead": "fixed cost per fit (ms)",
    "peak_memory_mb": "peak memory (MB)",
    "final_train_loss": "final train loss",
    "validation_score": "validation score",
    "runs_per_step": "runtime runs per step",
    "ortvalues_per_step": "new OrtValues per step",
    "status": "status",
}
ENVIRONMENT_COLUMNS = [
    "python_version",
    "ortbench_version",
    "onnxruntime_version",
    "onnx_version",
    "sklearn_version",
    "numpy_version",
    "torch_version",
    "cpu_model",
    "cpu_cores",
    "cpu_threads",
    "platform",
]
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1340px;
  padding: 0 1em; color: #222; line-height: 1.4; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.88em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.55em; text-align: left;
  vertical-align: top; overflow-wrap: break-word; }
td.text { white-space: nowrap; }
th { background: #f3f3f3; font-weight: 600; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums;
  overflow-wrap: normal; }
td.num { white-space: nowrap; }
td.status { max-width: 22em; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.8em; }
figure { margin: 1em 0; }
figure img { width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
code { font-size: 0.92em; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
"""


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>\n{body}\n</section>"


def round_to_noise(value: float, noise: float, digits: int = 3) -> str:
    """``value`` with no digit finer than its noise's first digit.

    Parameters
    ----------
    value : float
        A measured value.
    noise : float
        Its uncertainty, for example half the spread of repeated measurements; NaN or 0
        when unknown.
    digits : int
        Significant digits shown when the noise is unknown, and at most otherwise; at
        least 2 are shown.

    Returns
    -------
    str
        The rounded value ("" for NaN): 152.34 with noise 12 reads "150", with noise 0.3
        "152", with noise 400 "150".
    """
    if value is None or math.isnan(value):
        return ""
    magnitude = math.floor(math.log10(abs(value))) if value else 0
    decimals = digits - 1 - magnitude
    if noise and not math.isnan(noise) and noise > 0:  # never fewer than 2 digits
        decimals = max(min(decimals, -math.floor(math.log10(noise))), 1 - magnitude)
    return f"{round(value, decimals):.{max(decimals, 0)}f}"


def _general(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.3g}"
    return html.escape(str(value))


def _results_section(results: pd.DataFrame) -> str:
    rows = []
    for row in results.to_dict("records"):
        median = row.get("seconds_per_step", math.nan) * 1e6
        low = row.get("seconds_per_step_min", math.nan) * 1e6
        high = row.get("seconds_per_step_max", math.nan) * 1e6
        cells = {
            "seconds_per_step": round_to_noise(median, (high - low) / 2),
            "spread": ""
            if math.isnan(low)
            else f"{round_to_noise(low, math.nan, 2)} - {round_to_noise(high, math.nan, 2)}",
            "seconds_per_fit_overhead": round_to_noise(
                row.get("seconds_per_fit_overhead", math.nan) * 1e3, math.nan, 2
            ),
            "peak_memory_mb": ""
            if math.isnan(row.get("peak_memory_mb", math.nan))
            else f"{row['peak_memory_mb']:.1f}",
        }
        rows.append({c: cells.get(c, _general(row.get(c, ""))) for c in TABLE_COLUMNS})
    shown = [c for c in TABLE_COLUMNS if any(r[c] for r in rows)]
    # a column with one value in every row is said once, above the table
    constant = [c for c in shown if len(rows) > 1 and len({r[c] for r in rows}) == 1]
    shown = [c for c in shown if c not in constant]
    text = {"contender", "problem", "dataset", "device", "status"}
    kind = {c: "status" if c == "status" else "text" if c in text else "num" for c in shown}
    head = "".join(f"<th class='{kind[c]}'>{html.escape(TABLE_COLUMNS[c])}</th>" for c in shown)
    body = "".join(
        "<tr>" + "".join(f"<td class='{kind[c]}'>{r[c]}</td>" for c in shown) + "</tr>"
        for r in rows
    )
    common = ", ".join(f"{TABLE_COLUMNS[c]} {rows[0][c]}" for c in constant)
    return (
        f"<p>Every row: {common}. Times are rounded to half their min - max spread.</p>"
    ) + f"<table class='results'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _environment_section(results: pd.DataFrame) -> str:
    first = results.iloc[0]
    rows = "".join(
        f"<tr><th>{html.escape(c)}</th><td>{html.escape(str(first[c]))}</td></tr>"
        for c in ENVIRONMENT_COLUMNS
        if c in results.columns
    )
    return f"<table>{rows}</table>"


def html_page(title: str, body: str, style: str = "") -> str:
    """A whole page: ``title`` as its title and only h1, ``body`` below, no external file.

    Parameters
    ----------
    title : str
        Plain text.
    body : str
        HTML.
    style : str
        CSS added to the shared style sheet.

    Returns
    -------
    str
        The page (an empty icon keeps browsers from asking the server for one).
    """
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<link rel='icon' href='data:,'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}{style}</style></head>"
        f"<body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def write_index(run_dir: str | Path) -> Path:
    """Write ``index.html`` (and ``summary.md`` when the folder has bench results)."""
    run_dir = Path(run_dir)
    sections = []
    results = read_results(run_dir) if (run_dir / RESULTS_CSV).exists() else None
    if results is not None and not results.empty:
        write_summary(run_dir)
        summary = (run_dir / SUMMARY_MD).read_text(encoding="utf-8")
        sections.append(f"<section>{markdown_to_html(summary)}</section>")  # its own h2
        sections.append(_section("Results", _results_section(results)))
    if results is not None and results.attrs.get("bad_rows"):
        rows = "".join(f"<li>{html.escape(str(row))}</li>" for row in results.attrs["bad_rows"])
        sections.append(_section(f"Bad rows of {RESULTS_CSV}, left out", f"<ul>{rows}</ul>"))
    images = sorted(run_dir.glob("*.png"))
    if images:
        body = "\n".join(
            f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}">'
            f"<figcaption>{html.escape(p.stem.replace('_', ' '))}</figcaption></figure>"
            for p in images
        )
        sections.append(_section("Plots", body))
    for folder in sorted(p for p in run_dir.glob("profile-*") if p.is_dir()):
        sections.append(
            _section(f"Profile: {folder.name[8:]}", profile_page.profile_section(folder, run_dir))
        )
    if results is not None and not results.empty:
        sections.append(_section("Environment", _environment_section(results)))
    if not sections:
        sections.append("<p>This folder holds no ortbench results or profiles yet.</p>")
    page = html_page(f"ortbench: {run_dir.name}", "\n".join(sections), profile_page.STYLE)
    path = run_dir / INDEX_HTML
    path.write_text(page, encoding="utf-8")
    return path
