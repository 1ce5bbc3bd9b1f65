"""The cProfile call tree, in the text format of the tutorial's profiling section.

One node per ``file:line:function``. Each line reads
``name -- primitive_calls calls -- own_time cumulative_time -- file:line:function (function)``,
indented 4 spaces per depth, children sorted by cumulative time. A function called from
several places (recursive ones included) gets a section of its own after the main tree and
appears under each caller as a ``+++`` reference line carrying that caller-callee edge's
numbers, which keeps the tree finite and each subtree printed once.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field

import ortbench

Key = tuple[str, int, str]  # (file, line, function) as pstats stores it

#: Prefixes cut from file names: installed packages and this repository.
_REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(ortbench.__file__))) + os.sep
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
NAME_WIDTH = 60


def profile_call(fn: Callable[[], object]) -> pstats.Stats:
    """Run ``fn()`` under cProfile and return its statistics."""
    profiler = cProfile.Profile()
    profiler.runcall(fn)
    return pstats.Stats(profiler)


def short_path(path: str) -> str:
    """``site-packages/x/y.py`` -> ``x/y.py``; a path inside this repository -> relative;
    the standard library's ``.../lib/python3.11/json/decoder.py`` -> ``python3.11/json/decoder.py``."""
    position = path.rfind("site-packages" + os.sep)
    if position >= 0:
        return path[position + len("site-packages") + 1 :]
    if path.startswith(_REPOSITORY):
        return path[len(_REPOSITORY) :]
    if path.startswith(_STDLIB):
        return os.path.join(os.path.basename(_STDLIB[:-1]), path[len(_STDLIB) :])
    return path


def where(key: Key) -> str:
    """``file:line:function`` with the file shortened."""
    return f"{short_path(key[0])}:{key[1]}:{key[2]}"


@dataclass
class Node:
    """A function at one place of the tree, with the numbers of the edge that leads to it."""

    key: Key
    primitive_calls: int
    calls: int
    own: float
    cumulative: float
    reference: bool = False  # a +++ line: expanded in the function's own section
    children: list[Node] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.key[2]

    def line(self, depth: int) -> str:
        label = (" " * 4 * depth + self.name).ljust(NAME_WIDTH)
        text = (
            f"{label} -- {self.primitive_calls:7d} {self.calls:7d} -- "
            f"{self.own:.5f} {self.cumulative:.5f} -- {where(self.key)} ({self.name})"
        )
        return text + " +++" if self.reference else text

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "where": where(self.key),
            "primitive_calls": self.primitive_calls,
            "calls": self.calls,
            "own": self.own,
            "cumulative": self.cumulative,
            "reference": self.reference,
            "children": [c.to_json() for c in self.children],
        }


class CallTree:
    """A call tree built from pstats data: the main tree and the shared functions' sections."""

    def __init__(self, root: Node, sections: list[Node]):
        self.root = root
        self.sections = sections

    @classmethod
    def from_stats(cls, stats: pstats.Stats, min_fraction: float = 0.0) -> CallTree:
        """Build the tree; drop nodes below ``min_fraction`` of the root's cumulative time."""
        raw = stats.stats  # key -> (primitive calls, calls, own, cumulative, callers)
        callees: dict[Key, list[Key]] = {key: [] for key in raw}
        for key, (*_, callers) in raw.items():
            for caller in callers:
                callees.setdefault(caller, []).append(key)
        shared = {key for key, (*_, callers) in raw.items() if len(callers) > 1 or key in callers}
        roots = [k for k, (*_, callers) in raw.items() if not callers and "disable" not in k[2]]
        top = max(roots, key=lambda k: raw[k][3])
        limit = min_fraction * raw[top][3]

        def totals(key: Key) -> Node:
            pc, nc, tt, ct, _ = raw[key]
            return Node(key, pc, nc, tt, ct)

        def expand(node: Node, path: frozenset) -> Node:
            children = []
            for child in callees.get(node.key, []):
                nc, pc, tt, ct = raw[child][4][node.key]  # edges store calls first
                if ct < limit:
                    continue
                edge = Node(child, pc, nc, tt, ct)
                if child in shared or child in path:
                    edge.reference = True
                else:
                    expand(edge, path | {child})
                children.append(edge)
            node.children = sorted(children, key=lambda c: -c.cumulative)
            return node

        root = expand(totals(top), frozenset({top}))
        used = {n.key for n in _walk(root) if n.reference}
        sections, seen = [], set()
        while used - seen:
            key = max(used - seen, key=lambda k: raw[k][3])
            seen.add(key)
            section = expand(totals(key), frozenset({key}))
            used |= {n.key for n in _walk(section) if n.reference}
            sections.append(section)
        return cls(root, sorted(sections, key=lambda n: -n.cumulative))

    def to_text(self) -> str:
        """The tree then each shared function's section, one line per node."""
        lines: list[str] = []
        for top in [self.root, *self.sections]:
            stack = [(top, 0)]
            while stack:
                node, depth = stack.pop()
                lines.append(node.line(depth))
                stack.extend((c, depth + 1) for c in reversed(node.children))
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        """The same tree as nested dictionaries."""
        return {"root": self.root.to_json(), "sections": [s.to_json() for s in self.sections]}


def _walk(node: Node):
    yield node
    for child in node.children:
        yield from _walk(child)
