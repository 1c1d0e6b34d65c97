"""Per grain type and method: calls, errors and a latency histogram, kept by the activation
where a turn starts and ends.

A turn's latency is the time from its start (admitted by the mailbox) to its end, queueing
excluded: what the method itself took, suspensions included. Every call and error is
counted; the latency of the first ``TIME_ALL`` calls of a method on a silo is measured, then
of one call in ``SAMPLE_MASK + 1`` (two clock reads and a bucket cost a tenth of a local
call that never suspends). Buckets are powers of two from 10 µs (``BOUNDS``), so recording
is one multiply and ``int.bit_length``. The figures are cumulative since the silo started;
rates and recent quantiles come from the difference of two readings (as Prometheus does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "BOUNDS", "CallStatistics", "MethodFigures", "MethodStats", "figures", "is_snapshot",
    "merge", "quantile",
]

# Upper bounds in seconds: 10 µs * 2**i, 10 µs .. ~84 s; one more bucket holds the rest.
BOUNDS: Final[tuple[float, ...]] = tuple(1e-5 * 2**i for i in range(24))
LAST: Final = len(BOUNDS)  # the index of the +Inf bucket
SCALE: Final = 1e5  # 1 / 10 µs
TIME_ALL: Final = 1024  # calls of a method timed before sampling starts
SAMPLE_MASK: Final = 7  # then a call is timed when its number & SAMPLE_MASK == 0
UNKNOWN: Final = "<unknown>"  # the entry of names that are not the grain's methods


class MethodStats:
    """One method's figures: ``calls`` and ``errors`` count every call; ``buckets[i]``
    counts timed turns that took at most ``BOUNDS[i]`` (and more than ``BOUNDS[i-1]``),
    ``buckets[LAST]`` the longer ones, and ``seconds`` is their total time. The activation
    updates the fields itself (``record`` does the same, as a call)."""

    __slots__ = ("buckets", "calls", "errors", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.errors = 0
        self.seconds = 0.0
        self.buckets = [0] * (LAST + 1)

    def record(self, duration: float | None, failed: bool) -> None:
        """One call; ``duration`` None when it was not timed."""
        self.calls += 1
        if duration is not None:
            self.seconds += duration
            i = int(duration * SCALE).bit_length()
            self.buckets[i if i < LAST else LAST] += 1
        if failed:
            self.errors += 1

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "errors": self.errors, "seconds": self.seconds,
                "buckets": list(self.buckets)}


@dataclass(frozen=True, slots=True)
class MethodFigures:
    """A method's figures over an interval (or since start), for tables and the dashboard."""

    type_name: str
    method: str
    calls: int
    errors: int
    mean: float | None  # seconds, over the timed calls
    p50: float | None
    p99: float | None


class CallStatistics:
    """A silo's table: grain type -> method -> ``MethodStats``. Activations hold their
    type's inner dict, so the turn's end does one dict lookup."""

    __slots__ = ("enabled", "types")

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.types: dict[str, dict[str, MethodStats]] = {}

    def table(self, type_name: str) -> dict[str, MethodStats] | None:
        """The per-method dict of ``type_name`` (None when statistics are off)."""
        if not self.enabled:
            return None
        table = self.types.get(type_name)
        if table is None:
            table = self.types[type_name] = {}
        return table

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Plain values (msgpack and JSON): type -> method -> calls, errors, seconds,
        buckets."""
        return {t: {m: s.to_dict() for m, s in methods.items()}
                for t, methods in self.types.items() if methods}


def quantile(buckets: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile of a bucket array, interpolated within its bucket (None if
    empty); a value past the last bound reads as that bound."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank = q * total
    seen = 0.0
    for i, count in enumerate(buckets):
        if count and seen + count >= rank:
            upper = BOUNDS[min(i, LAST - 1)]
            lower = 0.0 if i == 0 else BOUNDS[i - 1] if i < LAST else upper
            return lower + (upper - lower) * max(0.0, rank - seen) / count
        seen += count
    return BOUNDS[-1]


def figures(snapshot: dict[str, dict[str, dict[str, Any]]],
            earlier: dict[str, dict[str, dict[str, Any]]] | None = None) -> list[MethodFigures]:
    """Each method's figures in ``snapshot``, minus ``earlier`` (a reading taken before), so
    that calls, errors and quantiles cover the interval between them."""
    out = []
    for type_name, methods in snapshot.items():
        for method, now in methods.items():
            before = (earlier or {}).get(type_name, {}).get(method)
            buckets = list(now["buckets"])
            calls, errors, seconds = now["calls"], now["errors"], now["seconds"]
            if before is not None:
                buckets = [a - b for a, b in zip(buckets, before["buckets"], strict=False)]
                calls -= before["calls"]
                errors -= before["errors"]
                seconds -= before["seconds"]
            timed = sum(buckets)
            out.append(MethodFigures(type_name, method, calls, errors,
                                     max(0.0, seconds) / timed if timed > 0 else None,
                                     quantile(buckets, 0.5), quantile(buckets, 0.99)))
    return out


def merge(snapshots: Sequence[dict[str, dict[str, dict[str, Any]]]]
          ) -> dict[str, dict[str, dict[str, Any]]]:
    """Several silos' snapshots added up (for a cluster's view)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for snap in snapshots:
        for type_name, methods in snap.items():
            into = out.setdefault(type_name, {})
            for method, s in methods.items():
                m = into.get(method)
                if m is None:
                    into[method] = {"calls": s["calls"], "errors": s["errors"],
                                    "seconds": s["seconds"], "buckets": list(s["buckets"])}
                else:
                    m["calls"] += s["calls"]
                    m["errors"] += s["errors"]
                    m["seconds"] += s["seconds"]
                    m["buckets"] = [a + b for a, b in
                                    zip(m["buckets"], s["buckets"], strict=False)]
    return out


def is_snapshot(value: Any) -> bool:
    """Whether ``value`` (a peer's answer) has the shape ``snapshot`` gives."""
    if not isinstance(value, dict):
        return False
    for methods in value.values():
        if not isinstance(methods, dict):
            return False
        for s in methods.values():
            if not (isinstance(s, dict) and isinstance(s.get("calls"), int)
                    and isinstance(s.get("errors"), int)
                    and isinstance(s.get("seconds"), (int, float))
                    and not math.isnan(float(s["seconds"]))
                    and isinstance(s.get("buckets"), list)
                    and len(s["buckets"]) == LAST + 1
                    and all(isinstance(b, int) for b in s["buckets"])):
                return False
    return True
