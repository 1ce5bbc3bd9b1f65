"""The contender a group's speed-ups are measured against, and its times."""

from __future__ import annotations

import pandas as pd

from ..schema import BASELINE, CONTENDER_NAMES


def group_baseline(rows: pd.DataFrame) -> str | None:
    """The contender speed-ups are measured against in one group of finished cells: the
    one the run named (``--baseline``), else scikit-learn's MLP where it ran, else the
    first of the engine's contenders that ran; None when none of them ran."""
    named = rows["baseline"].dropna() if "baseline" in rows else pd.Series(dtype=object)
    named = [n for n in named.unique() if n]
    ran = set(rows.contender)
    candidates = [*named, BASELINE, *(c for c in CONTENDER_NAMES if c.startswith("ort-"))]
    return next((name for name in candidates if name in ran), None)


def baseline_times(rows: pd.DataFrame, baseline: str | None) -> pd.Series:
    """The baseline's time per step by batch size (NaN where it did not run, or where its
    slope came out non-positive: no speed-up is measured against it there)."""
    mine = rows[rows.contender == baseline].drop_duplicates("batch_size")
    times = mine.set_index("batch_size").seconds_per_step
    return times.where(times > 0).reindex(sorted(rows.batch_size.unique()))
