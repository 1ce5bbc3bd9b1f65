"""onnxruntime's own profiles: per-operator tables and per-session run times.

onnxruntime writes one JSON array of Chrome-trace events per session. Node events are
named ``<node>_kernel_time`` (``args.op_name``, ``args.provider``, ``args.input_type_shape``);
1.19.2 also writes ``_fence_before``/``_fence_after`` events, ignored here. Each graph run
is one ``SequentialExecutor::Execute`` event (a subgraph's run nests one more in it). A
window of steps after warm-up is kept by skipping a session's first runs and every node
event that starts before the first kept run. The raw files open in Perfetto
(ui.perfetto.dev) or chrome://tracing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

RUN_EVENT = "SequentialExecutor::Execute"
#: The time stamp onnxruntime appends to a profile's prefix: to the second in 1.19.2, with
#: milliseconds after it in later releases.
_STAMP = re.compile(r"_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}(_\d+)?$")


def session_label(path: str | Path) -> str:
    """The session's label: the file name without onnxruntime's time stamp."""
    return _STAMP.sub("", Path(path).stem)


def load_events(path: str | Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def runs(events: list[dict]) -> list[dict]:
    """The session's graph runs, in order of their start.

    A ``Scan`` or ``Loop`` runs its body as a graph of its own, each iteration one more
    ``SequentialExecutor::Execute`` event inside its session's run: those nested events
    are part of the run, not runs.
    """
    executed = [e for e in events if e.get("cat") == "Session" and e.get("name") == RUN_EVENT]
    kept, end = [], float("-inf")
    for event in sorted(executed, key=lambda e: (e["ts"], -e["dur"])):
        if event["ts"] + event["dur"] <= end:
            continue  # inside the run before it
        kept.append(event)
        end = event["ts"] + event["dur"]
    return kept


def _shapes(args: dict) -> str:
    shapes = [next(iter(item.values())) for item in args.get("input_type_shape", [])]
    return "; ".join("x".join(str(d) for d in shape) for shape in shapes)


def _own_times(nodes: list[dict]) -> list[int]:
    """Each node event's duration less those of the node events nested in it: a ``Scan``
    or ``Loop`` node keeps the time its body's nodes do not account for."""
    own = [e["dur"] for e in nodes]
    open_events: list[int] = []  # events started before this one, each inside the one before
    order = sorted(range(len(nodes)), key=lambda k: (nodes[k]["ts"], -nodes[k]["dur"]))
    for k in order:
        end = nodes[k]["ts"] + nodes[k]["dur"]
        while open_events and nodes[open_events[-1]]["ts"] + nodes[open_events[-1]]["dur"] < end:
            open_events.pop()
        if open_events:  # started no later (the order) and ends no earlier: it holds this one
            own[open_events[-1]] -= nodes[k]["dur"]
        open_events.append(k)
    return own


def operator_rows(path: str | Path, skip_runs: int = 0) -> pd.DataFrame:
    """One row per node event of one session file, after its first ``skip_runs`` runs; a
    control-flow node's row holds its own time (its body's nodes have rows of their own)."""
    events = load_events(path)
    kept = runs(events)[skip_runs:]
    start = kept[0]["ts"] if kept else float("inf")
    nodes = [
        e
        for e in events
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= start
    ]
    rows = [
        {
            "session": session_label(path),
            "op_type": e["args"].get("op_name", "?"),
            "node": e["name"][: -len("_kernel_time")],
            "provider": e["args"].get("provider", ""),
            "input_shapes": _shapes(e["args"]),
            "us": own,
        }
        for e, own in zip(nodes, _own_times(nodes))
    ]
    return pd.DataFrame(
        rows, columns=["session", "op_type", "node", "provider", "input_shapes", "us"]
    )


def operator_table(files: list[Path], skip_runs: dict[str, int] | None = None) -> pd.DataFrame:
    """Per node: calls, total and mean time, share of all node time in the window."""
    skip_runs = skip_runs or {}
    events = pd.concat(
        [operator_rows(f, skip_runs.get(session_label(f), 0)) for f in files], ignore_index=True
    )
    table = (
        events.groupby(["session", "op_type", "node"], sort=False)
        .agg(
            provider=("provider", "first"),
            input_shapes=("input_shapes", "first"),
            calls=("us", "size"),
            total_us=("us", "sum"),
        )
        .reset_index()
    )
    table["mean_us"] = table.total_us / table.calls
    table["share"] = table.total_us / max(table.total_us.sum(), 1)
    return table.sort_values("total_us", ascending=False, ignore_index=True)


def by_operator_type(table: pd.DataFrame) -> pd.DataFrame:
    """The per-node table summed per operator type."""
    grouped = (
        table.groupby("op_type")
        .agg(nodes=("node", "size"), calls=("calls", "sum"), total_us=("total_us", "sum"))
        .reset_index()
    )
    grouped["mean_us"] = grouped.total_us / grouped.calls
    grouped["share"] = grouped.total_us / max(grouped.total_us.sum(), 1)
    return grouped.sort_values("total_us", ascending=False, ignore_index=True)


def run_times(files: list[Path], skip_runs: dict[str, int] | None = None) -> dict[str, list]:
    """Per session label, the durations (us) of its runs in the window."""
    skip_runs = skip_runs or {}
    return {
        session_label(f): [
            e["dur"] for e in runs(load_events(f))[skip_runs.get(session_label(f), 0) :]
        ]
        for f in files
    }


#: Column -> header of the markdown tables.
HEADERS = {
    "op_type": "operator",
    "input_shapes": "input shapes",
    "total_us": "total (µs)",
    "mean_us": "mean (µs)",
}


def markdown_table(frame: pd.DataFrame, rows: int = 30) -> str:
    """A DataFrame as a markdown table, numbers rounded, shares as percentages."""
    frame = frame.head(rows)
    columns = list(frame.columns)
    header = [HEADERS.get(c, c) for c in columns]
    rule = ["---:" if frame[c].dtype.kind in "fiu" else "---" for c in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rule) + "|"]
    for row in frame.itertuples(index=False):
        cells = []
        for column, value in zip(columns, row):
            if column == "share":
                cells.append(f"{value:.1%}")
            elif isinstance(value, float):
                cells.append(f"{value:.1f}")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
