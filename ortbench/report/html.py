"""``index.html``: one self-contained page for a run folder (bench results and profiles).

Every image and link points at a file inside the run folder and nothing loads from the
network, so the folder can be archived, attached to a CI job or opened offline.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from . import profile_page
from .plots import write_plots
from .resultsets import ResultSet, load_result_set
from .scaling import write_scaling_plot
from .summary import (
    BAD_ROWS_TITLE,
    METHOD_TITLE,
    NOT_MEASURED_TITLE,
    SUMMARY_MD,
    BenchSummary,
    Table,
    bench_summary,
    run_plots,
    write_summary,
)

INDEX_HTML = "index.html"

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
#: The BLAS/OpenMP libraries a run loaded, and a variable that pinned their kernels.
KERNEL_COLUMNS = ["kernels", "kernel_pins"]
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
tr.next td { border-top: 2px solid #999; }
ul.conclusions { padding-left: 1.2em; }
li.conclusion { margin: 0.25em 0; }
details.method summary { cursor: pointer; font-weight: 600; font-size: 1.1em; }
h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
"""


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>\n{body}\n</section>"


def _table(table: Table, css: str = "") -> str:
    kind = ["num" if numeric else "text" for numeric in table.numeric]
    if "status" in table.headers:
        kind[table.headers.index("status")] = "status"
    head = "".join(
        f"<th class='{k}'>{html.escape(name)}</th>" for k, name in zip(kind, table.headers)
    )
    # a line above each new batch size, when the table goes by batch size
    grouped = table.headers[:1] == ["batch size"]
    starts = [
        grouped and k > 0 and row[0] != table.rows[k - 1][0] for k, row in enumerate(table.rows)
    ]
    body = "".join(
        ("<tr class='next'>" if start else "<tr>")
        + "".join(f"<td class='{k}'>{html.escape(cell)}</td>" for k, cell in zip(kind, row))
        + "</tr>"
        for start, row in zip(starts, table.rows)
    )
    css = f" class='{css}'" if css else ""
    return f"<table{css}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _bench_sections(summary: BenchSummary) -> list[str]:
    """The answer, the tables and the plots, in this order."""
    conclusions = "".join(
        f"<li class='conclusion'><strong>{html.escape(s.title)}</strong>: "
        f"{html.escape(s.conclusion)}.</li>"
        for s in summary.sections
    )
    parts = [
        f"<p class='lead'>{html.escape(summary.lead)}</p><ul class='conclusions'>{conclusions}</ul>"
    ]
    parts += [_section(s.title, _table(s.table, "results")) for s in summary.sections]
    if summary.not_run:
        parts.append(_section(NOT_MEASURED_TITLE, _table(summary.not_run)))
    if summary.plots:
        parts.append(
            _section(
                "Plots",
                "\n".join(
                    f'<figure><img src="{html.escape(p.file)}" alt="{html.escape(_stem(p.file))}">'
                    f"<figcaption>{html.escape(p.caption)}</figcaption></figure>"
                    for p in summary.plots
                ),
            )
        )
    return parts


def _stem(name: str) -> str:
    return Path(name).stem.replace("_", " ")


def _environment_section(results: pd.DataFrame) -> str:
    first, last = results.iloc[0], results.iloc[-1]
    values = {c: first[c] for c in ENVIRONMENT_COLUMNS if c in results.columns}
    for c in KERNEL_COLUMNS:  # the last row's: every contender's library loaded by then
        values[c] = last[c] if c in results.columns else None
    rows = "".join(
        f"<tr><th>{html.escape(c)}</th><td>{html.escape(str(v))}</td></tr>"
        for c, v in values.items()
        if not (c in KERNEL_COLUMNS and (pd.isna(v) or not str(v)))
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


def _method(summary: BenchSummary, results: pd.DataFrame) -> str:
    return (
        f"<details class='method'><summary>{METHOD_TITLE}, and on what</summary>"
        f"<p>{html.escape(summary.method)}</p>{_environment_section(results)}</details>"
    )


def write_index(run: str | Path | ResultSet) -> Path:
    """Write ``index.html`` (and ``summary.md`` when the folder has bench results).

    The page's only title names the commands that wrote the folder and its run; a bench
    run's answer, tables and plots come first, then the profiles, then how it was
    measured, folded.

    Parameters
    ----------
    run : str, Path or ResultSet
        A run folder of ``ortbench bench`` or ``ortbench profile``, or its result set.

    Returns
    -------
    Path
        The page.
    """
    run = load_result_set(run, measurements=False)
    run_dir, results = run.folder, run.table
    sections, commands = [], []
    summary = None
    if results is not None and not results.empty:
        write_summary(run)
        summary = bench_summary(results, run_plots(run_dir, results), run.plan)
        sections += _bench_sections(summary)
        commands.append("bench")
    if results is not None and results.attrs.get("bad_rows"):
        rows = "".join(f"<li>{html.escape(str(row))}</li>" for row in results.attrs["bad_rows"])
        sections.append(_section(BAD_ROWS_TITLE, f"<ul>{rows}</ul>"))
    profiles = sorted(p for p in run_dir.glob("profile-*") if p.is_dir())
    for folder in profiles:
        sections.append(
            _section(f"Profile: {folder.name[8:]}", profile_page.profile_section(folder, run_dir))
        )
    if profiles:
        commands.append("profile")
    if summary is not None:
        sections.append(_method(summary, results))
    if not sections:
        sections.append("<p>This folder holds no ortbench results or profiles yet.</p>")
    title = f"ortbench {' and '.join(commands) or 'run'}: run {_run_id(run_dir, results)}"
    title += " (interrupted)" if summary is not None and summary.interrupted else ""
    page = html_page(title, "\n".join(sections), profile_page.STYLE)
    path = run_dir / INDEX_HTML
    path.write_text(page, encoding="utf-8")
    return path


def write_reports(run: str | Path | ResultSet) -> str:
    """Write every report of a run folder (plots, ``summary.md``, ``index.html``) from its
    results, read once, as ``bench`` and ``merge`` do; return the summary's text ("" without
    one).

    Parameters
    ----------
    run : str, Path or ResultSet
        A run folder of ``ortbench bench``, or its result set.

    Returns
    -------
    str
        ``summary.md``'s text.
    """
    run = load_result_set(run, measurements=False)
    write_plots(run)
    write_scaling_plot(run)
    write_index(run)  # writes summary.md too, when a row is good
    summary = run.folder / SUMMARY_MD
    return summary.read_text(encoding="utf-8") if summary.exists() else ""


def _run_id(run_dir: Path, results: pd.DataFrame | None) -> str:
    if results is not None and not results.empty:
        return str(results.run_id.iloc[0])
    return run_dir.name
