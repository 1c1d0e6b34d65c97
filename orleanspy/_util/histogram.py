"""Latency histograms with power-of-two buckets from 10 µs: recording is one multiply and
``int.bit_length``; quantiles are read back by interpolating within a bucket.

Figures are cumulative; rates and recent quantiles come from the difference of two readings
(as Prometheus does). ``Histogram.due`` samples, for paths where two clock reads would cost a
noticeable share of the work measured: in each window of about ``WINDOW`` seconds the first
``TIME_ALL`` observations are all measured, then one in ``SAMPLE_MASK + 1``. A path that
sees fewer than ``TIME_ALL`` a second is measured in full; a busy one costs a clock read per
``ROLL_MASK + 1`` observations to find out that its window ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from time import monotonic
from typing import Any, Final

__all__ = ["BOUNDS", "LAST", "ROLL_MASK", "SAMPLE_MASK", "SCALE", "TIME_ALL", "WINDOW",
           "Histogram", "cumulative", "observed_range", "quantile"]

# Upper bounds in seconds: 10 µs * 2**i, 10 µs .. ~84 s; one more bucket holds the rest.
BOUNDS: Final[tuple[float, ...]] = tuple(1e-5 * 2**i for i in range(24))
LAST: Final = len(BOUNDS)  # the index of the +Inf bucket
SCALE: Final = 1e5  # 1 / 10 µs
TIME_ALL: Final = 1024  # observations measured in full per window
SAMPLE_MASK: Final = 31  # then one is measured when its number & SAMPLE_MASK == 0
ROLL_MASK: Final = 1023  # ... and the window is checked when its number & ROLL_MASK == 0
WINDOW: Final = 1.0  # seconds


class Histogram:
    """Observed durations: ``buckets[i]`` counts those of at most ``BOUNDS[i]`` (and more
    than ``BOUNDS[i-1]``), ``buckets[LAST]`` the longer ones; ``seconds`` is their sum.
    ``offered`` counts every observation offered to ``due`` (measured or not): ``seen`` in
    this window plus ``base`` from the windows before."""

    __slots__ = ("base", "buckets", "seconds", "seen", "window")

    def __init__(self) -> None:
        self.buckets = [0] * (LAST + 1)
        self.seconds = 0.0
        self.seen = 0
        self.base = 0
        self.window = monotonic()

    @property
    def offered(self) -> int:
        return self.base + self.seen

    def due(self) -> bool:
        """Count one observation; True if it is to be measured (see the module)."""
        n = self.seen
        self.seen = n + 1
        if n < TIME_ALL:
            return True
        if n & SAMPLE_MASK:
            return False
        if not n & ROLL_MASK:
            self.roll()
        return True

    def roll(self) -> None:
        """Start a new window if this one is over: its first ``TIME_ALL`` are measured."""
        now = monotonic()
        if now - self.window >= WINDOW:
            self.window = now
            self.base += self.seen
            self.seen = 0

    def record(self, seconds: float) -> None:
        if seconds < 0.0:
            seconds = 0.0  # clocks of two hosts, or a step of the wall clock
        self.seconds += seconds
        i = int(seconds * SCALE).bit_length()
        self.buckets[i if i < LAST else LAST] += 1

    @property
    def count(self) -> int:
        return sum(self.buckets)

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "seconds": self.seconds, "buckets": list(self.buckets)}

    def quantile(self, q: float) -> float | None:
        return quantile(self.buckets, q, self.seconds)


def _lower(i: int) -> float:
    return 0.0 if i == 0 else BOUNDS[min(i, LAST) - 1]


def observed_range(buckets: Sequence[int], seconds: float) -> tuple[float, float]:
    """Bounds of the smallest and the largest observation that the buckets and the sum
    ``seconds`` allow: each observation lies within its bucket, and together they add up to
    ``seconds``. Exact for a single observation; the width of one bucket at worst."""
    filled = [i for i, count in enumerate(buckets) if count]
    low_i, high_i = filled[0], filled[-1]
    lowers = sum(_lower(i) * buckets[i] for i in filled)
    # the largest: the sum less what the others take at least
    largest = min(BOUNDS[min(high_i, LAST - 1)] if high_i < LAST else float("inf"),
                  seconds - (lowers - _lower(high_i)))
    smallest = _lower(low_i)
    if high_i < LAST:  # the smallest: the sum less what the others take at most
        uppers = sum(BOUNDS[i] * buckets[i] for i in filled)
        smallest = max(smallest, seconds - (uppers - BOUNDS[low_i]))
    return smallest, max(smallest, largest)


def quantile(buckets: Sequence[int], q: float, seconds: float | None = None) -> float | None:
    """The ``q`` quantile of a bucket array, interpolated within its bucket (None if
    empty); a value past the last bound reads as that bound. Given the observations' sum
    ``seconds``, the result is clamped to the range they can span (``observed_range``): a
    single 24 s call reads 24 s, not the middle of its 21-42 s bucket."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    value = BOUNDS[-1]
    for i, count in enumerate(buckets):
        if count and seen + count >= rank:
            upper = BOUNDS[min(i, LAST - 1)]
            lower = 0.0 if i == 0 else BOUNDS[i - 1] if i < LAST else upper
            value = lower + (upper - lower) * max(0.0, rank - seen) / count
            break
        seen += count
    if seconds is not None:
        smallest, largest = observed_range(buckets, max(0.0, seconds))
        value = min(max(value, smallest), largest)
    return value


def cumulative(buckets: Sequence[int]) -> list[tuple[str, float]]:
    """Prometheus histogram buckets: (``le``, observations at most that), ending at +Inf."""
    out: list[tuple[str, float]] = []
    total = 0
    for bound, count in zip((*(f"{b:g}" for b in BOUNDS), "+Inf"), buckets, strict=True):
        total += count
        out.append((bound, float(total)))
    return out
