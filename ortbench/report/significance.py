"""Is a change real? A rank test where it can decide, else a t-test on the logarithms.

Three stages, the first that applies decides:

1. a two-sided Mann-Whitney U test on the samples, p < :data:`P_THRESHOLD` (asv's test),
   when the smallest p-value it can return at those sample counts (exactly
   ``2 / C(n_a + n_b, n_a)``) is below the threshold: 7 or more samples a side (6 vs 6
   reaches only 0.00216);
2. otherwise, with 2 or more samples a side, Welch's t-test on the logarithms of the
   samples at the same threshold: timing noise is multiplicative (a lognormal spread),
   so the test compares ratios, and it can reach any p-value at any sample count;
3. without samples, the 99% confidence intervals (asv stores them) must not overlap.

Without any of them nothing can be said (None).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .resultsets import Measurement

#: p-value under which a test calls two sample sets different (asv's value).
P_THRESHOLD = 0.002
#: Coverage of the confidence intervals.
CONFIDENCE = 0.99


def rank_test_min_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value the exact Mann-Whitney U test returns for samples of
    sizes ``n_a`` and ``n_b`` (both sets fully separated, no ties)."""
    if min(n_a, n_b) == 0:
        return 1.0
    return min(1.0, 2 / math.comb(n_a + n_b, n_a))


def rank_test_can_decide(n_a: int, n_b: int) -> bool:
    """True when the rank test can return a p-value below the threshold."""
    return rank_test_min_p(n_a, n_b) < P_THRESHOLD


def log_t_test_p(a: list[float], b: list[float]) -> float:
    """Two-sided p-value of Welch's t-test on the logarithms of two sample sets.

    Parameters
    ----------
    a, b : list of float
        Positive samples, two or more in each set.

    Returns
    -------
    float
        The p-value; 0 when both sets are constant and differ, 1 when they are equal.
    """
    log_a, log_b = np.log(a), np.log(b)
    if np.ptp(log_a) == 0 and np.ptp(log_b) == 0:
        return 1.0 if log_a[0] == log_b[0] else 0.0
    return float(stats.ttest_ind(log_a, log_b, equal_var=False).pvalue)


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


def significance_test(before: Measurement, after: Measurement) -> str | None:
    """The name of the test :func:`is_significant` applies to this pair, or None."""
    a, b = _samples(before), _samples(after)
    if rank_test_can_decide(len(a), len(b)):
        return "rank"
    if min(len(a), len(b)) >= 2 and min(a) > 0 and min(b) > 0:
        return "log t"
    if (before.ci or confidence_interval(a)) and (after.ci or confidence_interval(b)):
        return "intervals"
    return None


def is_significant(before: Measurement, after: Measurement) -> bool | None:
    """Whether ``after`` differs from ``before`` beyond noise; None without statistics.

    Parameters
    ----------
    before, after : Measurement
        The two sides, with their samples or confidence intervals.

    Returns
    -------
    bool or None
        The decision of the first test of the module's three that applies, None when
        none does.
    """
    a, b = _samples(before), _samples(after)
    test = significance_test(before, after)
    if test == "rank":
        return bool(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue < P_THRESHOLD)
    if test == "log t":
        return log_t_test_p(a, b) < P_THRESHOLD
    if test == "intervals":
        ci_a = before.ci or confidence_interval(a)
        ci_b = after.ci or confidence_interval(b)
        return ci_a[1] < ci_b[0] or ci_b[1] < ci_a[0]
    return None
