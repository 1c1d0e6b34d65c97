"""Per grain type and method: calls, errors and a latency histogram, kept by the activation
where a turn starts and ends.

A turn's latency is the time from its start (admitted by the mailbox) to its end, queueing
excluded: what the method itself took, suspensions included. Every call and error is
counted; latency is measured as ``orleanspy._util.histogram`` samples (every call of a
method that gets fewer than ``TIME_ALL`` a second, one in ``SAMPLE_MASK + 1`` beyond that:
two clock reads and a bucket cost a tenth of a local call that never suspends). The figures
are cumulative since the silo started; rates and recent quantiles come from the difference
of two readings (as Prometheus does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from orleanspy._util.histogram import (
    BOUNDS,
    LAST,
    ROLL_MASK,
    SAMPLE_MASK,
    SCALE,
    TIME_ALL,
    WINDOW,
    Histogram,
    quantile,
)

__all__ = [
    "BOUNDS", "LAST", "METHOD_LABELS", "ROLL_MASK", "SAMPLE_MASK", "SCALE", "TIME_ALL",
    "UNKNOWN", "WINDOW", "CallStatistics", "MethodFigures", "MethodStats", "figures",
    "is_snapshot", "merge", "method_label", "quantile",
]

UNKNOWN: Final = "<unknown>"  # the entry of names that are not the grain's methods


class MethodStats(Histogram):
    """One method's figures: ``calls`` (every call, as ``offered``) and ``errors`` count
    every call; the buckets and ``seconds`` hold the timed turns (``due`` when a turn
    starts, ``record`` when it ends: ``runtime.turns``)."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        super().__init__()
        self.errors = 0

    calls = Histogram.offered  # every call is offered for timing

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "errors": self.errors, "seconds": self.seconds,
                "buckets": list(self.buckets)}


#: How the runtime's own grain methods are named wherever figures are shown (``grains
#: top``, the dashboard, ``/metrics``): one name for stream delivery everywhere.
METHOD_LABELS: Final[dict[str, str]] = {
    "__orleanspy_stream_deliver__": "(stream delivery)",
    "__orleanspy_stream_error__": "(stream error)",
}


def method_label(method: str) -> str:
    """The name a method's figures are shown under (``METHOD_LABELS``, else its own)."""
    return METHOD_LABELS.get(method, method)


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
                buckets = [max(0, a - b) for a, b in zip(buckets, before["buckets"], strict=False)]
                calls -= before["calls"]
                errors -= before["errors"]
                seconds -= before["seconds"]
            timed = sum(buckets)
            out.append(MethodFigures(type_name, method, calls, errors,
                                     max(0.0, seconds) / timed if timed > 0 else None,
                                     quantile(buckets, 0.5, seconds),
                                     quantile(buckets, 0.99, seconds)))
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
