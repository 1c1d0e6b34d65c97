"""What a silo tells about itself to operations tooling, as plain values (msgpack and JSON):
the answers of the cluster's read-only control requests, and the dashboard's view of a lone
silo. Components are read by duck type (stream providers, the reminder service, the Spark
session live above this package)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from orleanspy._util.process import process_usage

__all__ = ["extension_report", "plain", "reminders_report", "status_report", "streams_report"]


class _Reporting(Protocol):
    stream_providers: dict[str, Any]
    reminders: Any
    gateway: Any
    loop_lag: float

    def statistics(self) -> Any: ...


def streams_report(silo: _Reporting) -> dict[str, Any]:
    """Each stream provider's pulling agents on this silo, and its latency histograms."""
    providers: dict[str, list[dict[str, Any]]] = {}
    latency: dict[str, dict[str, Any]] = {}
    for name, provider in silo.stream_providers.items():
        stats = provider.statistics() if hasattr(provider, "statistics") else []
        providers[name] = [dataclasses.asdict(a) for a in stats]
        hists = {key: getattr(provider, f"{key}_latency", None) for key in ("publish", "delivery")}
        latency[name] = {k: h.to_dict() for k, h in hists.items() if h is not None}
    return {"providers": providers, "latency": latency}


def reminders_report(silo: _Reporting, limit: int = 500) -> dict[str, Any]:
    """The reminders this silo fires (soonest first, at most ``limit``) and ticks fired."""
    service = silo.reminders
    if service is None or not hasattr(service, "scheduled"):
        return {"count": 0, "fired": 0, "reminders": []}
    return {"count": service.count, "fired": service.fired,
            "reminders": service.scheduled(limit)}


def status_report(silo: _Reporting, stats: Any) -> dict[str, Any]:
    """The silo's own figures from one ``Silo.statistics()`` reading ``stats``: status,
    uptime, activations (by type), event-loop lag, gateway, process usage, and the Spark
    session's and the stream prober's figures (None without them)."""
    return {
        "status": stats.status, "uptime": stats.uptime, "activations": stats.activations,
        "activations_by_type": stats.activations_by_type, "loop_lag": silo.loop_lag,
        "gateway": silo.gateway.address if silo.gateway is not None else None,
        "spark": extension_report(stats, "spark"),
        "prober": extension_report(stats, "stream-prober"),
        **process_usage(),
    }


def extension_report(stats: Any, name: str) -> dict[str, Any] | None:
    """The figures a lifecycle participant ``name`` offers (``stats.extensions`` of a
    ``Silo.statistics()`` reading), as plain values; None if there is none."""
    figures = stats.extensions.get(name)
    if figures is None:
        return None
    value = plain(figures)
    return value if isinstance(value, dict) else {"value": value}


def plain(value: Any) -> Any:
    """Statistics (dataclasses, dicts, sequences of them) as plain JSON and msgpack values;
    anything else as its ``str``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
