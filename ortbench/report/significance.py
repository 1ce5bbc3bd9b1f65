"""Is a change real? A rank test on samples, else non-overlapping confidence intervals.

The same two stages as asv: with samples on both sides and enough of them for the test to
reach the threshold, a two-sided Mann-Whitney U test; otherwise the 99% confidence
intervals must not overlap. Without either, nothing can be said (None).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .resultsets import Measurement

#: p-value under which the rank test calls two sample sets different (asv's value).
P_THRESHOLD = 0.002
#: Coverage of the confidence intervals.
CONFIDENCE = 0.99


def rank_test_can_decide(n_a: int, n_b: int) -> bool:
    """True when the smallest p-value the rank test can return is below the threshold."""
    if min(n_a, n_b) == 0:
        return False
    return 1 / math.comb(n_a + n_b, min(n_a, n_b)) < P_THRESHOLD


def confidence_interval(samples: list[float]) -> tuple[float, float] | None:
    """A 99% interval: of the median from order statistics when there are enough samples
    (8 or more), else of the mean from Student's t; None with fewer than 2 samples."""
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    tail = (1 - CONFIDENCE) / 2
    # [x(k), x(n - k + 1)] covers the median with probability 1 - 2 * P(Binomial(n, 1/2) < k)
    k = 0
    while stats.binom.cdf(k, n, 0.5) <= tail:
        k += 1
    if k >= 1:
        return float(x[k - 1]), float(x[n - k])
    if n < 2:
        return None
    half = stats.t.ppf(1 - tail, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return float(x.mean() - half), float(x.mean() + half)


def _samples(m: Measurement) -> list[float]:
    return [s for s in (m.samples or ()) if s is not None and not math.isnan(s)]


def is_significant(before: Measurement, after: Measurement) -> bool | None:
    """Whether ``after`` differs from ``before`` beyond noise; None without statistics."""
    a, b = _samples(before), _samples(after)
    if rank_test_can_decide(len(a), len(b)):
        p = stats.mannwhitneyu(a, b, alternative="two-sided").pvalue
        return bool(p < P_THRESHOLD)
    ci_a = before.ci or confidence_interval(a)
    ci_b = after.ci or confidence_interval(b)
    if ci_a is None or ci_b is None:
        return None
    return ci_a[1] < ci_b[0] or ci_b[1] < ci_a[0]
