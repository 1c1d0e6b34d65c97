"""The dashboard's cluster view: every silo's answers to the read-only control requests
(``status``, ``streams``, ``calls``, ``reminders``) turned into the page's panels.

Call and latency figures are cumulative on each silo; the view keeps its recent readings
(``HISTORY`` seconds) and reports rates and quantiles over exactly the last ``WINDOW``
seconds, as a Prometheus ``rate`` would: the reading of ``WINDOW`` seconds ago is
interpolated between the two readings around it (readings come when someone asks, at no
fixed period). Until the view holds ``WINDOW`` seconds of readings, the window is the span
it has.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from orleanspy._util.histogram import quantile
from orleanspy.runtime.call_stats import figures, is_snapshot, merge, method_label
from silo.dashboard.health import GONE, FirstSeen, unowned_queues, warnings

__all__ = ["ClusterView", "Membership", "SiloAnswers", "queue_rows", "subscription_order"]

WINDOW: Final = 10.0  # seconds that rates and quantiles cover
HISTORY: Final = 60.0  # seconds of readings kept
MAX_METHODS: Final = 50  # rows of the methods panel
MAX_REMINDERS: Final = 200  # rows of the reminders panel

# One silo's answers: status, streams, calls, reminders (each a dict, or None if missing).
SiloAnswers = tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, dict[str, Any] | None]
# A silo row's own figures (None for a silo that did not answer).
_FIGURES: Final = ("uptime", "activations", "gateway", "cpu_seconds", "rss_bytes", "loop_lag",
                   "reminders", "reminders_fired")


@dataclass(frozen=True, slots=True)
class Membership:
    """What the table says: one ``health.silo_health`` row per silo, the stream-queue
    leases (queue -> ``Lease``), and the wall-clock time they were read at."""

    silos: list[dict[str, Any]]
    leases: Mapping[str, Any]
    now: float


class ClusterView:
    """Builds the view from the silos' answers; keeps the readings that rates need."""

    def __init__(self) -> None:
        # (time, merged call snapshot, merged latency histograms)
        self._readings: deque[tuple[float, dict[str, Any], dict[str, Any]]] = deque()
        self._first_seen = FirstSeen()

    def build(self, cluster_id: str, answers: list[SiloAnswers],
              membership: Membership | None = None) -> dict[str, Any]:
        """The view of ``answers`` (the silos that answered); with ``membership``, every
        row of the table too: dead, suspected and unreachable silos, and the queues no
        answering silo pulls (``silo.dashboard.health``)."""
        now = time.monotonic()
        silos: list[dict[str, Any]] = []
        grains: dict[str, int] = {}
        queues: list[dict[str, Any]] = []
        subscriptions: list[dict[str, Any]] = []
        reminders: list[dict[str, Any]] = []
        spark: list[dict[str, Any]] = []
        probes: list[dict[str, Any]] = []
        call_snaps: list[dict[str, Any]] = []
        latency_parts: list[dict[str, Any]] = []
        all_queues: dict[str, set[str]] = {}
        for status, streams, calls, rems in answers:
            name = status.get("silo")
            silos.append({k: status.get(k) for k in (
                "silo", "status", "uptime", "activations", "gateway", "cpu_seconds",
                "rss_bytes", "loop_lag")} | {
                "reminders": (rems or {}).get("count"), "reminders_fired": (rems or {}).get(
                    "fired"), "reachable": True})
            for provider, names in (status.get("all_queues") or {}).items():
                all_queues.setdefault(str(provider), set()).update(map(str, names))
            by_type: dict[str, Any] = status.get("activations_by_type") or {}
            for type_name, count in by_type.items():
                grains[type_name] = grains.get(type_name, 0) + int(count)
            for row in queue_rows(streams):
                queues.append({k: v for k, v in row.items() if k != "subs"})
                subscriptions.extend(_subscriptions(row))
            latency_parts.append(streams.get("latency") or {})
            if calls is not None and is_snapshot(calls.get("types")):
                call_snaps.append(calls["types"])
            reminders.extend({**r, "silo": name} for r in (rems or {}).get("reminders") or []
                             if _reminder_row(r))
            if isinstance(status.get("spark"), dict):
                spark.append({"silo": name, **status["spark"]})
            if isinstance(status.get("prober"), dict):
                probes.append({"silo": name, **status["prober"]})
        queues.sort(key=lambda q: (q["provider"], q["queue"]))
        subscriptions.sort(key=subscription_order)
        reminders.sort(key=lambda r: (r["next_due"], r["grain"], r["name"]))
        merged_calls = merge(call_snaps)
        merged_latency = _merge_latency(latency_parts)
        earlier = self._earlier(now)
        self._readings.append((now, merged_calls, merged_latency))
        while self._readings and now - self._readings[0][0] > HISTORY:
            self._readings.popleft()
        span = now - earlier[0] if earlier is not None else None
        summed = sorted(str(s["silo"]) for s in silos)
        unowned: list[dict[str, Any]] = []
        if membership is not None:
            silos = self._with_membership(silos, membership)
        for row in silos:  # a lone silo, or one that is not in the table (yet)
            for key in ("last_seen", "last_seen_ago", "declared_dead_at"):
                row.setdefault(key, None)
            row.setdefault("suspected_by", [])
            row.setdefault("declared_dead_by", [])
        if membership is not None:
            owned = {(q["provider"], q["queue"]) for q in queues}
            unowned = unowned_queues(all_queues, owned, membership.leases,
                                     {s["silo"]: s for s in silos}, membership.now,
                                     self._first_seen)
        return {
            "cluster": cluster_id, "silos": silos, "grains": dict(sorted(grains.items())),
            # The silos whose figures the sums hold, and the live ones that could not be
            # read: a chart marks a gap when either changes instead of drawing a fall.
            "summed": summed,
            "unread": [s["silo"] for s in silos if not s["reachable"]
                       and s["status"] == "active"],
            "unowned_queues": unowned, "warnings": warnings(silos, unowned),
            "window": span,
            "calls_total": sum(m["calls"] for ms in merged_calls.values() for m in ms.values()),
            "methods": _methods(merged_calls, earlier[1] if earlier else None, span),
            "streams": queues, "subscriptions": subscriptions,
            "stream_latency": _latency(merged_latency, earlier[2] if earlier else None),
            "reminders": reminders[:MAX_REMINDERS], "spark": spark, "probes": probes,
        }

    @staticmethod
    def _with_membership(silos: list[dict[str, Any]],
                         membership: Membership) -> list[dict[str, Any]]:
        """Every row of the table, with the figures of the silos that answered (their
        status as the table says); live silos first, then by address."""
        answered = {str(s["silo"]): s for s in silos}
        rows = []
        for health in membership.silos:
            figures = answered.pop(health["silo"], None)
            blank = dict.fromkeys(_FIGURES) | {"reachable": False}
            row = {**(figures or blank), **health}
            if figures is not None:  # it answered just now (heartbeats do not move the view)
                row |= {"last_seen": membership.now, "last_seen_ago": 0.0}
            rows.append(row)
        rows.extend(answered.values())
        rows.sort(key=lambda r: (r["status"] != "active", r["status"] in GONE,
                                 str(r["silo"])))
        return rows

    def _earlier(self, now: float) -> tuple[float, dict[str, Any], dict[str, Any]] | None:
        """The reading of WINDOW seconds ago (interpolated between the readings around
        that moment), else the oldest one (None: none yet, or too recent)."""
        chosen = None
        for reading in self._readings:
            if now - reading[0] >= WINDOW or chosen is None:
                chosen = reading
            else:
                if now - chosen[0] > WINDOW:  # WINDOW ago lies between chosen and reading
                    at = now - WINDOW
                    share = (at - chosen[0]) / (reading[0] - chosen[0])
                    return (at, _between(chosen[1], reading[1], share),
                            _between(chosen[2], reading[2], share))
                break
        if chosen is not None and now - chosen[0] < 0.2:
            return None  # too recent to make a rate of
        return chosen


def _between(old: Any, new: Any, share: float) -> Any:
    """Cumulative figures ``share`` of the way from ``old`` to ``new`` (dicts and lists of
    numbers; what ``old`` lacks counts as zero, what ``new`` lacks is left out)."""
    if isinstance(new, dict):
        old_map = old if isinstance(old, dict) else {}
        return {k: _between(old_map.get(k), v, share) for k, v in new.items()}
    if isinstance(new, list):
        old_list = old if isinstance(old, list) else []
        return [_between(old_list[i] if i < len(old_list) else None, v, share)
                for i, v in enumerate(new)]
    if isinstance(new, (int, float)) and not isinstance(new, bool):
        start = old if isinstance(old, (int, float)) and not isinstance(old, bool) else 0
        return start + (new - start) * share
    return new


def queue_rows(streams: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per stream queue of a silo's ``streams`` answer (``orleanspy streams status``
    prints them): its owner, cache, pull period, counters, the furthest lag and oldest
    backlog age, and under ``subs`` every subscription: its stream, subscription id,
    consumer grain, lag, backlog age and failing attempts (failing first, then furthest
    behind)."""
    out = []
    for provider, agents in (streams.get("providers") or {}).items():
        for a in agents:
            subs = [_subscription(s) for s in a.get("subs") or [] if isinstance(s, dict)]
            subs.sort(key=subscription_order)
            ages = [s["age"] for s in subs if s["age"] is not None]
            out.append({
                "provider": provider, "queue": a["queue"], "silo": streams.get("silo"),
                "cache": a["cache_size"], "cache_max": a["cache_max"],
                "under_pressure": a["under_pressure"], "pull_period": a["pull_period"],
                "read": a["read"], "delivered": a["delivered"],
                "acknowledged": a["acknowledged"], "failures": a["failures"],
                "subscriptions": a["subscriptions"], "subs": subs,
                "max_lag": max((s["lag"] for s in subs), default=0),
                "max_age": max(ages, default=None),
                "flow_control": a.get("flow_control"),
            })
    return out


def subscription_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Failing first, then furthest behind, then oldest backlog."""
    return (-row["failing"], -row["lag"], -(row["age"] or 0.0), row["stream"],
            row["subscription"])


def _subscription(s: dict[str, Any]) -> dict[str, Any]:
    return {"stream": str(s.get("stream")), "subscription": str(s.get("subscription")),
            "consumer": str(s.get("consumer")), "lag": int(s.get("lag") or 0),
            "age": s.get("age"), "failing": int(s.get("failing") or 0)}


def _subscriptions(row: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (stream, subscription) of a queue row."""
    return [{"provider": row["provider"], "queue": row["queue"], "silo": row["silo"], **s}
            for s in row["subs"]]


def _methods(now: dict[str, Any], earlier: dict[str, Any] | None,
             span: float | None) -> list[dict[str, Any]]:
    """Per method: total calls and errors, calls per second over the window, and latency
    quantiles over the window (since start when the window timed no call of it)."""
    totals = {(f.type_name, f.method): f for f in figures(now)}
    rows: list[dict[str, Any]] = []
    for f in figures(now, earlier) if earlier is not None else totals.values():
        total = totals[(f.type_name, f.method)]
        latest = f if f.p50 is not None else total
        rows.append({
            "type": f.type_name, "method": method_label(f.method), "calls": total.calls,
            "calls_per_second": max(0, f.calls) / span if span else None,
            "errors": total.errors, "p50": latest.p50, "p99": latest.p99,
            "mean": latest.mean,
        })
    rows.sort(key=lambda r: (-(r["calls_per_second"] or 0), -r["calls"], r["type"],
                             r["method"]))
    return rows[:MAX_METHODS]


def _reminder_row(r: Any) -> bool:
    return (isinstance(r, dict) and isinstance(r.get("grain"), str)
            and isinstance(r.get("name"), str)
            and isinstance(r.get("next_due"), (int, float))
            and isinstance(r.get("period"), (int, float)))


def _merge_latency(parts: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, dict[str, list[int]]] = {}
    for part in parts:
        for provider, hists in part.items():
            into = out.setdefault(provider, {})
            for kind, h in hists.items():
                buckets = h.get("buckets") if isinstance(h, dict) else None
                if not isinstance(buckets, list):
                    continue
                have = into.get(kind)
                into[kind] = list(buckets) if have is None else [
                    a + b for a, b in zip(have, buckets, strict=False)]
    return out


def _latency(now: dict[str, Any], earlier: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per provider: publishes and deliveries observed, and their latency quantiles over
    the window (since start when the window observed none)."""
    rows = []
    for provider, hists in sorted(now.items()):
        row: dict[str, Any] = {"provider": provider}
        for kind in ("publish", "delivery"):
            total = hists.get(kind) or []
            before = ((earlier or {}).get(provider) or {}).get(kind)
            recent = total
            if before is not None:
                recent = [max(0, a - b) for a, b in zip(total, before, strict=False)]
            shown = recent if sum(recent) else total
            row[f"{kind}_count"] = sum(total)
            row[f"{kind}_p50"] = quantile(shown, 0.5) if shown else None
            row[f"{kind}_p99"] = quantile(shown, 0.99) if shown else None
        rows.append(row)
    return rows
