"""Numbers as people read them in a report."""

from __future__ import annotations

import math


def format_seconds(seconds: float) -> str:
    """3 significant digits in s, ms or µs."""
    if seconds is None or math.isnan(seconds):
        return "n/a"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):  # noqa: B007
        if abs(seconds) >= scale:
            break
    value = seconds / scale
    # never scientific notation: 999.5 µs reads 1000 µs, not 1e+03 µs
    return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, in the plural unless ``count`` is 1: "1 epoch", "3 epochs"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def noise_decimals(value: float, noise: float, digits: int = 3) -> int:
    """The decimals :func:`round_to_noise` keeps of ``value`` (negative: tens, hundreds...).

    Parameters
    ----------
    value : float
        A measured value, finite.
    noise : float
        Its uncertainty; NaN or 0 when unknown.
    digits : int
        Significant digits kept when the noise is unknown, and at most otherwise; at least
        2 are kept.

    Returns
    -------
    int
        The decimals: those of ``digits`` significant digits, fewer when the noise's first
        digit lies above the last of them, never fewer than those of 2 significant digits.
    """
    magnitude = math.floor(math.log10(abs(value))) if value else 0
    decimals = digits - 1 - magnitude
    if noise and not math.isnan(noise) and noise > 0:  # never fewer than 2 digits
        decimals = max(min(decimals, -math.floor(math.log10(noise))), 1 - magnitude)
    return decimals


def _fixed(value: float, decimals: int) -> str:
    return f"{round(value, decimals):.{max(decimals, 0)}f}"


def round_to_noise(value: float, noise: float, digits: int = 3) -> str:
    """``value`` with no digit finer than its noise's first digit.

    Parameters
    ----------
    value : float
        A measured value.
    noise : float
        Its uncertainty, for example half the spread of repeated measurements; NaN or 0
        when unknown.
    digits : int
        Significant digits shown when the noise is unknown, and at most otherwise; at
        least 2 are shown.

    Returns
    -------
    str
        The rounded value ("" for NaN): 152.34 with noise 12 reads "150", with noise 0.3
        "152", with noise 400 "150".
    """
    if value is None or math.isnan(value):
        return ""
    return _fixed(value, noise_decimals(value, noise, digits))


def round_range(low: float, high: float, median: float, noise: float) -> str:
    """``"low to high"`` beside a median shown as ``round_to_noise(median, noise)``.

    Each end keeps the median's decimals, and at least 2 significant digits of its own:
    rounding is monotonic, so the shown median never falls outside the shown range.

    Parameters
    ----------
    low, high : float
        The least and the most of the measurements.
    median : float
        Their median.
    noise : float
        The median's uncertainty, as given to :func:`round_to_noise`.

    Returns
    -------
    str
        For example "161 to 162" beside a median 161.6 shown as "162"; "" when a value
        is NaN.
    """
    if any(math.isnan(v) for v in (low, high, median)):
        return ""
    decimals = noise_decimals(median, noise)
    low_text, high_text = (
        _fixed(end, max(decimals, noise_decimals(end, math.nan, 2))) for end in (low, high)
    )
    return f"{low_text} to {high_text}"


def format_value(value: float | None, unit: str | None) -> str:
    """A measured value with its unit: seconds and bytes scaled, anything else as is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if unit == "seconds":
        return format_seconds(value)
    if unit == "bytes":
        for scale, name in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {name}"
        return f"{value:.0f} B"
    return f"{value:.4g}"
