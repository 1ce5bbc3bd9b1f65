"""``hotspots.md``: the functions with the most own time, grouped by package."""

from __future__ import annotations

import pstats

from .calltree import short_path

#: Package of a shortened file path, by prefix; everything else is Python itself.
PACKAGES = [
    ("ortbench/", "ortbench"),
    ("onnxruntime/", "onnxruntime"),
    ("onnx/", "onnx"),
    ("numpy/", "numpy"),
    ("sklearn/", "scikit-learn"),
    ("scipy/", "scipy"),
    ("skl2onnx/", "skl2onnx"),
    ("torch/", "torch"),
    ("jax/", "jax"),
    ("jaxlib/", "jax"),
]


def package_of(key: tuple[str, int, str]) -> str:
    """The package a function belongs to, from its file (or, for C methods, its owner)."""
    short = short_path(key[0])
    for prefix, package in PACKAGES:
        owner = prefix[:-1] + "."
        if short.startswith(prefix) or (
            key[0] == "~" and (f" {owner}" in key[2] or f"'{owner}" in key[2])
        ):
            return package
    return "python"


def hotspots_markdown(stats: pstats.Stats, top: int = 25) -> str:
    """Own time per package, then the ``top`` functions by own time, with their share."""
    rows = [
        (package_of(key), key, calls, own) for key, (_, calls, own, _, _) in stats.stats.items()
    ]
    total = sum(r[3] for r in rows) or 1.0
    by_package: dict[str, float] = {}
    for package, _, _, own in rows:
        by_package[package] = by_package.get(package, 0.0) + own
    lines = [
        "# Hot spots",
        "",
        f"Own time (time spent in a function itself, not in what it calls) over {total:.3f} s "
        "of profiled run. Time in compiled code (onnxruntime's, torch's, XLA's) counts as "
        "the own time of the function or method that enters it (for example `run_forward` "
        "of `TrainingAgent`).",
        "",
        "| package | own time (s) | share |",
        "|---|---:|---:|",
    ]
    for package, own in sorted(by_package.items(), key=lambda p: -p[1]):
        lines.append(f"| {package} | {own:.4f} | {own / total:.1%} |")
    lines += [
        "",
        "| function | package | calls | own time (s) | share |",
        "|---|---|---:|---:|---:|",
    ]
    for package, key, calls, own in sorted(rows, key=lambda r: -r[3])[:top]:
        where = f"{short_path(key[0])}:{key[1]}:{key[2]}"
        lines.append(f"| `{where}` | {package} | {calls} | {own:.4f} | {own / total:.1%} |")
    return "\n".join(lines) + "\n"
