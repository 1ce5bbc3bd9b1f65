"""``index.html``: one self-contained page for a run folder (bench results and profiles).

Every image and link points at a file inside the run folder and nothing loads from the
network, so the folder can be archived, attached to a CI job or opened offline.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd

from ..bench.store import RESULTS_CSV, read_results
from .summary import SUMMARY_MD, write_summary

INDEX_HTML = "index.html"

#: Columns of results.csv shown in the page's table, in order.
TABLE_COLUMNS = [
    "contender",
    "problem",
    "dataset",
    "batch_size",
    "device",
    "seconds_per_step",
    "peak_memory_mb",
    "final_train_loss",
    "validation_score",
    "runs_per_step",
    "ortvalues_per_step",
    "status",
]
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
#: Profile files shown inline (markdown) and linked (everything a profile folder holds).
PROFILE_SECTIONS = [
    ("steps.md", "Where a step goes"),
    ("hotspots.md", "Hot spots"),
    ("operators.md", "onnxruntime operators"),
]
CALLTREE_LINES = 40

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.8em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
"""


def markdown_to_html(text: str) -> str:
    """The markdown ortbench writes (headings, tables, code blocks, paragraphs) as HTML."""
    out, table, code, paragraph = [], [], None, []

    def flush() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph))}</p>")
            paragraph.clear()
        if table:
            rows = [r for r in table if not re.fullmatch(r"\|[\s:|-]+\|", r)]
            cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
            head = "".join(f"<th>{_inline(c)}</th>" for c in cells[0])
            body = "".join(
                "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                for row in cells[1:]
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            table.clear()

    for line in text.splitlines():
        if code is not None:
            if line.startswith("```"):
                out.append(f"<pre>{html.escape(chr(10).join(code))}</pre>")
                code = None
            else:
                code.append(line)
        elif line.startswith("```"):
            flush()
            code = []
        elif line.startswith("|"):
            if paragraph:
                flush()
            table.append(line)
        elif match := re.match(r"(#{1,6}) (.*)", line):
            flush()
            level = min(len(match.group(1)) + 1, 6)  # the page title is the only h1
            out.append(f"<h{level}>{_inline(match.group(2))}</h{level}>")
        elif not line.strip():
            flush()
        else:
            if table:
                flush()
            paragraph.append(line.strip())
    flush()
    return "\n".join(out)


def _inline(text: str) -> str:
    text = html.escape(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>\n{body}\n</section>"


def _results_section(results: pd.DataFrame) -> str:
    table = results[[c for c in TABLE_COLUMNS if c in results.columns]].copy()
    if "seconds_per_step" in table:
        table["seconds_per_step"] = table["seconds_per_step"] * 1e6
        table = table.rename(columns={"seconds_per_step": "µs per step"})
    return table.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0)


def _environment_section(results: pd.DataFrame) -> str:
    first = results.iloc[0]
    rows = "".join(
        f"<tr><th>{html.escape(c)}</th><td>{html.escape(str(first[c]))}</td></tr>"
        for c in ENVIRONMENT_COLUMNS
        if c in results.columns
    )
    return f"<table>{rows}</table>"


def _profile_section(folder: Path, run_dir: Path) -> str:
    parts = []
    for name, title in PROFILE_SECTIONS:
        path = folder / name
        if path.exists():
            parts.append(f"<h3>{title}</h3>" + markdown_to_html(path.read_text(encoding="utf-8")))
    calltree = folder / "calltree.txt"
    if calltree.exists():
        head = calltree.read_text(encoding="utf-8").splitlines()[:CALLTREE_LINES]
        parts.append("<h3>Call tree (top)</h3><pre>" + html.escape("\n".join(head)) + "</pre>")
    links = [
        f'<li><a href="{html.escape(p.relative_to(run_dir).as_posix())}">{html.escape(p.name)}</a></li>'
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]
    parts.append("<h3>Files</h3><ul>" + "".join(links) + "</ul>")
    return "\n".join(parts)


def write_index(run_dir: str | Path) -> Path:
    """Write ``index.html`` (and ``summary.md`` when the folder has bench results)."""
    run_dir = Path(run_dir)
    sections = []
    results = read_results(run_dir) if (run_dir / RESULTS_CSV).exists() else None
    if results is not None and not results.empty:
        write_summary(run_dir)
        summary = (run_dir / SUMMARY_MD).read_text(encoding="utf-8")
        sections.append(_section("Summary", markdown_to_html(summary)))
        sections.append(_section("Results", _results_section(results)))
    images = sorted(run_dir.glob("*.png"))
    if images:
        body = "\n".join(
            f'<figure><img src="{html.escape(p.name)}" alt="{html.escape(p.stem)}">'
            f"<figcaption>{html.escape(p.stem.replace('_', ' '))}</figcaption></figure>"
            for p in images
        )
        sections.append(_section("Plots", body))
    for folder in sorted(p for p in run_dir.glob("profile-*") if p.is_dir()):
        sections.append(_section(f"Profile: {folder.name[8:]}", _profile_section(folder, run_dir)))
    if results is not None and not results.empty:
        sections.append(_section("Environment", _environment_section(results)))
    if not sections:
        sections.append("<p>This folder holds no ortbench results or profiles yet.</p>")
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>ortbench: {html.escape(run_dir.name)}</title><style>{STYLE}</style></head>"
        f"<body><h1>ortbench: {html.escape(run_dir.name)}</h1>\n"
        + "\n".join(sections)
        + "\n</body></html>\n"
    )
    path = run_dir / INDEX_HTML
    path.write_text(page, encoding="utf-8")
    return path
