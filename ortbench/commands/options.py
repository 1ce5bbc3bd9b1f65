"""The option types the commands share: argparse ``type=`` functions that refuse a bad
value in one line (exit status 2), and the options of a verdict (``--threshold``,
``--warn``). Nothing here needs a runtime."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable

THRESHOLD, WARN = 0.10, 0.05


def names(text: str) -> tuple[str, ...]:
    """``a,b`` as ``("a", "b")``: an option of names takes ``a b``, ``a,b`` or a mix
    (see :func:`joined`)."""
    return tuple(name for name in text.split(",") if name)


def counts(text: str) -> tuple[int, ...]:
    """``8,16`` as ``(8, 16)``, as :func:`names` does for names; each an integer >= 1."""
    try:
        values = tuple(int(value) for value in names(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be integers, got {text}") from None
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return values


def joined(values: Iterable[tuple]) -> tuple:
    """The values of an option whose type is :func:`names` or :func:`counts`, in one
    tuple."""
    return tuple(value for group in values for value in group)


def _number(text: str, kind: type) -> float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text}") from None


def positive(text: str) -> float:
    """A number > 0."""
    value = _number(text, float)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative(text: str) -> float:
    """A number >= 0."""
    value = _number(text, float)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def count(text: str) -> int:
    """An integer >= 1."""
    return at_least(1)(text)


def at_least(minimum: int) -> Callable[[str], int]:
    """The type of an integer option that must be ``minimum`` or more."""

    def integer(text: str) -> int:
        value = _number(text, int)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text}")
        return value

    return integer


def fraction(text: str) -> float:
    """A number in [0, 1)."""
    value = _number(text, float)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def add_verdict_options(
    parser: argparse.ArgumentParser, threshold: float = THRESHOLD, warn: float = WARN
) -> None:
    """``--threshold`` (> 0) and ``--warn`` (between 0 and the threshold), as ``compare``
    and ``ab`` judge a change, with their defaults."""
    parser.add_argument(
        "--threshold", type=positive, default=threshold,
        help=f"relative change that counts ({threshold})",
    )  # fmt: skip
    parser.add_argument(
        "--warn", type=non_negative, default=warn,
        help=f"relative slowdown that warns, at most the threshold ({warn})",
    )  # fmt: skip

    def check(args: argparse.Namespace) -> None:
        if args.warn > args.threshold:
            parser.error(f"--warn must be between 0 and --threshold, got {args.warn}")

    parser.set_defaults(check=check)
