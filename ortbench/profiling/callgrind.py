"""Instructions per library and per function, read from a callgrind output file.

A callgrind file lists, per function (``fn=``) of an object file (``ob=``), cost lines:
positions then event counts, the first event being the instructions (``Ir``). A cost
line that follows a ``calls=`` line is the inclusive cost of that call, charged to the
callee already: it is skipped, so what is summed is each function's own (self) cost,
as ``callgrind_annotate`` prints it. Names may be compressed: ``(7) name`` defines id 7,
``(7)`` alone repeats it; objects, files and functions have separate ids.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..bench.instructions import totals
from ..errors import OrtBenchError

#: The ids of compressed names: ``cob`` names objects as ``ob`` does, ``cfn`` functions.
_NAMESPACES = {"ob": "ob", "cob": "ob", "fn": "fn", "cfn": "fn"}
#: Rows of the per-function table.
TOP_FUNCTIONS = 30


@dataclass
class Instructions:
    """Own instructions of each function of a callgrind file.

    Attributes
    ----------
    total : int
        The file's ``totals:`` line (what ``callgrind_annotate`` calls the program totals).
    functions : Counter
        Own instructions by ``(object file, function)``; they sum to ``total``.
    """

    total: int
    functions: Counter

    def by_library(self) -> Counter:
        """Own instructions by object file (its file name)."""
        libraries: Counter = Counter()
        for (library, _), count in self.functions.items():
            libraries[os.path.basename(library)] += count
        return libraries


def read_instructions(path: Path) -> Instructions:
    """The own instructions per function of the callgrind file at ``path``.

    Raises
    ------
    OrtBenchError
        When the file is not a callgrind file, or its functions do not sum to its totals.
    """
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    functions: Counter = Counter()
    current = ("???", "???")
    positions, after_call = 1, False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            head = line[:1]
            if head.isdigit() or head in "+-*":
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) > positions:
                    functions[current] += int(fields[positions])
                continue
            key, _, value = line.rstrip("\n").partition("=")
            if key in _NAMESPACES and _:
                name = _name(names[_NAMESPACES[key]], value)
                if key == "ob":
                    current = (name, current[1])
                elif key == "fn":
                    current = (current[0], name)
            elif key == "calls" and _:
                after_call = True
            elif line.startswith("positions:"):
                positions = len(line.split()) - 1
    _, total = totals(path)
    if sum(functions.values()) != total:
        raise OrtBenchError(
            f"{path}: the functions' instructions sum to {sum(functions.values())}, "
            f"not to the file's totals {total}"
        )
    return Instructions(total, functions)


def _name(known: dict[str, str], value: str) -> str:
    """The name of ``(id) name``, ``(id)`` (defined earlier) or ``name``."""
    if not value.startswith("("):
        return value
    ident, _, name = value.partition(")")
    name = name.strip()
    if name:
        known[ident] = name
        return name
    return known[ident]


def instructions_markdown(counted: Instructions, steps: int, per_step: float, title: str) -> str:
    """The tables of the profile page: instructions by library and by function.

    Parameters
    ----------
    counted : Instructions
        The counts of the profiled fit.
    steps : int
        The training steps of that fit.
    per_step : float
        Instructions per step by the slope of a short and a long fit (what a fit pays
        once left out).
    title : str
        What was counted, one sentence.

    Returns
    -------
    str
        Markdown: the total, then one table per library and one of the
        :data:`TOP_FUNCTIONS` functions with the most own instructions.
    """
    lines = [
        "# Instructions (callgrind)",
        "",
        f"{title} Total: {counted.total:,} instructions over {steps} steps; "
        f"{per_step:,.0f} per step without what a fit pays once.",
        "",
        "## By library",
        "",
        "| library | instructions | share |",
        "|---|---:|---:|",
    ]
    for library, count in counted.by_library().most_common():
        lines.append(f"| {library} | {count:,} | {count / counted.total:.1%} |")
    lines.append(f"| total | {counted.total:,} | 100.0% |")
    lines += [
        "",
        f"## By function (the {TOP_FUNCTIONS} with the most own instructions)",
        "",
        "| function | library | instructions | share |",
        "|---|---|---:|---:|",
    ]
    for (library, function), count in counted.functions.most_common(TOP_FUNCTIONS):
        name = function.replace("|", "\\|")
        lines.append(
            f"| `{name}` | {os.path.basename(library)} | {count:,} | {count / counted.total:.1%} |"
        )
    return "\n".join(lines) + "\n"
