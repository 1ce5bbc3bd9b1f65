"""The profile part of a run's ``index.html``: flame graph, tables and expandable call trees.

The flame graph is py-spy's own interactive SVG, embedded as a document of the page (its
search and zoom keep working). Call trees become nested ``<details>`` elements, so a reader
opens the branches that matter without any script; the heaviest child comes first.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from ..schema import EPOCH_LOOP, MIN_FLAME_SAMPLES, PROFILE_JSON
from .markdown import markdown_to_html
from .units import plural

#: Profile files shown inline, in this order: markdown files (their own heading) and call
#: trees (with a title). Where a step goes, then the Python calls of those steps, then the
#: details.
SECTIONS = (
    ("steps.md", None),
    ("calltree.json", "Call tree of the steady epochs (cProfile)"),
    ("hotspots.md", None),
    ("operators.md", None),
    ("instructions.md", None),
    ("calltree-build.json", "Call tree of the build and the warm-up epoch (cProfile)"),
)
#: Call-tree nodes that take at least this share of the tree are shown open.
OPEN_SHARE = 0.05
CALLTREE_COLUMNS = (
    "function",
    "primitive calls",
    "calls",
    "own (s)",
    "cumulative (s)",
    "share",
    "file:line:function",
)

STYLE = """
object.flamegraph { width: 100%; border: 1px solid #eee; }
.calltree { font-size: 0.85em; margin: 0.5em 0 1.5em; }
.calltree summary, .calltree .row {
  display: grid; grid-template-columns: minmax(0, 2.2fr) 6.5em 6.5em 6em 7.5em 4.5em minmax(0, 1.6fr);
  gap: 0 0.6em; padding: 0.1em 0; border-bottom: 1px solid #f0f0f0; }
.calltree summary { cursor: pointer; list-style: none; }
.calltree summary::-webkit-details-marker { display: none; }
.calltree .head { font-weight: 600; background: #f3f3f3; }
.calltree .num { text-align: right; font-variant-numeric: tabular-nums; }
.calltree .name { padding-left: calc(var(--depth) * 1.1em); overflow-wrap: anywhere; }
.calltree .where { color: #666; overflow-wrap: anywhere; font-size: 0.9em; }
.calltree details > summary .name::before { content: "\\25B8  "; }
.calltree details[open] > summary .name::before { content: "\\25BE  "; }
.calltree .row .name::before { content: "\\2022  "; color: #aaa; }
.calltree .head .name::before { content: none; }
.calltree .ref { color: #888; font-style: italic; }
"""


def profile_section(folder: Path, run_dir: Path) -> str:
    """The HTML of one profile folder, its headings under the section's h2."""
    info_path = folder / PROFILE_JSON
    info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
    parts = [_what_ran(info)] if "warmup_epochs" in info else []
    if info.get("interrupted"):
        parts.insert(
            0,
            "<p class='missing'><strong>Interrupted</strong> (Ctrl-C or SIGTERM): only the "
            "profilers that finished are here.</p>",
        )
    parts.append(_flame_graph(folder, run_dir, info))
    for name, title in SECTIONS:
        path = folder / name
        if path.exists():
            parts.append(_tree(path, title) if title else _markdown(path))
    if info.get("instructions_problem"):
        reason = html.escape(info["instructions_problem"])
        parts.append(f"<h3>Instructions (callgrind)</h3><p class='missing'>No count: {reason}</p>")
    links = [
        f'<li><a href="{html.escape(p.relative_to(run_dir).as_posix())}">'
        f"{html.escape(p.relative_to(folder).as_posix())}</a></li>"
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]
    parts.append("<h3>Files</h3><ul class='files'>" + "".join(links) + "</ul>")
    return "\n".join(parts)


def _markdown(path: Path) -> str:
    return markdown_to_html(path.read_text(encoding="utf-8"), top_level=3)


def _tree(path: Path, title: str) -> str:
    tree = json.loads(path.read_text(encoding="utf-8"))
    return f"<h3>{html.escape(title)}</h3>\n{calltree_html(tree)}"


def _what_ran(info: dict) -> str:
    rows = info.get("training_rows")  # absent from the profiles of earlier versions
    data = html.escape(info["dataset"]) + (f" ({rows} training rows)" if rows else "")
    # (absent from the profiles of earlier versions, which profiled engine contenders only)
    runtime = ", and onnxruntime's profiler its first epochs" * info.get("runtime_sessions", True)
    return (
        f"<p>{html.escape(info['problem'])} on {data}, batch size "
        f"{info['batch_size']}, {html.escape(info['device'])}. cProfile and py-spy watched "
        f"the same steady window, {plural(info['epochs'], 'epoch')} after the build and "
        f"{plural(info['warmup_epochs'], 'warm-up epoch')}{runtime}; the build has its own "
        "call tree below.</p>"
    )


def _flame_graph(folder: Path, run_dir: Path, info: dict) -> str:
    svg = folder / "flamegraph.svg"
    title = "<h3>Flame graph (py-spy)</h3>"
    if info.get("flamegraph_problem") or not svg.exists():
        reason = info.get("flamegraph_problem") or "the profile folder holds no flamegraph.svg"
        return (
            f"{title}<p class='missing'><strong>No flame graph:</strong> {html.escape(reason)}.</p>"
        )
    share, count = info.get("epoch_loop_share"), info.get("flamegraph_samples")
    if count is not None and count < MIN_FLAME_SAMPLES:
        note = (
            f"<p class='missing'>Only {plural(count, 'sample')}: too few to read; profile "
            "more epochs (<code>--epochs</code>).</p>"
        )
    elif share is not None:
        note = (
            f"<p>{share:.0%} of the {f'{count} ' if count else ''}samples are under the "
            f"trainers' epoch loop "
            f"(<code>{EPOCH_LOOP}</code>). Click a frame to zoom, Ctrl+F to search.</p>"
        )
    elif count is not None:
        note = f"<p>{plural(count, 'sample')}. Click a frame to zoom, Ctrl+F to search.</p>"
    else:
        note = ""
    source = html.escape(svg.relative_to(run_dir).as_posix())
    height = re.search(r'<svg[^>]*\sheight="(\d+)', svg.read_text(encoding="utf-8"))
    style = f" style='height: {int(height.group(1)) + 8}px'" if height else ""
    return (
        f"{title}{note}<object class='flamegraph' type='image/svg+xml' data='{source}'{style}>"
        f"<a href='{source}'>flamegraph.svg</a></object>"
    )


def calltree_html(tree: dict) -> str:
    """A call tree (``CallTree.to_json()``) as nested ``<details>``, heaviest child first.

    Parameters
    ----------
    tree : dict
        ``{"root": node, "sections": [node, ...]}``, each node with ``name``, ``where``,
        ``primitive_calls``, ``calls``, ``own``, ``cumulative``, ``reference`` and
        ``children``. Branches above :data:`OPEN_SHARE` of the total start open.

    Returns
    -------
    str
        A ``<div class="calltree">``: a header row, the tree, then the sections of the
        functions with several callers (their ``+++`` references point there).
    """
    total = tree["root"]["cumulative"] or 1.0
    head = "".join(
        f"<span class='{'name' if k == 0 else 'where' if k == 6 else 'num'}'>{c}</span>"
        for k, c in enumerate(CALLTREE_COLUMNS)
    )
    parts = [f"<div class='calltree'><div class='row head' style='--depth:0'>{head}</div>"]
    parts.append(_node(tree["root"], 0, total))
    if tree["sections"]:
        parts.append(
            "<div class='row head' style='--depth:0'><span class='name'>functions with "
            "several callers (the +++ lines above)</span></div>"
        )
        parts.extend(_node(section, 0, total) for section in tree["sections"])
    parts.append("</div>")
    return "\n".join(parts)


def _node(node: dict, depth: int, total: float) -> str:
    name = html.escape(node["name"])
    if node["reference"]:
        name += " <span class='ref'>+++</span>"
    cells = (
        f"<span class='name'>{name}</span>"
        f"<span class='num'>{node['primitive_calls']}</span>"
        f"<span class='num'>{node['calls']}</span>"
        f"<span class='num'>{node['own']:.4f}</span>"
        f"<span class='num'>{node['cumulative']:.4f}</span>"
        f"<span class='num'>{node['cumulative'] / total:.1%}</span>"
        f"<span class='where'>{html.escape(node['where'])}</span>"
    )
    children = sorted(node["children"], key=lambda c: -c["cumulative"])
    if not children:
        return f"<div class='row' style='--depth:{depth}'>{cells}</div>"
    opened = " open" if node["cumulative"] >= OPEN_SHARE * total else ""
    inner = "".join(_node(c, depth + 1, total) for c in children)
    return f"<details{opened}><summary style='--depth:{depth}'>{cells}</summary>{inner}</details>"
