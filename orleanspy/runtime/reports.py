"""What a silo tells about itself to operations tooling, as plain values (msgpack and JSON):
the answers of the cluster's read-only control requests, and the dashboard's view of a lone
silo. Components are read by duck type (stream providers, the reminder service, the Spark
session live above this package)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

__all__ = ["extension_report", "reminders_report", "spark_report", "streams_report"]


class _Reporting(Protocol):
    stream_providers: dict[str, Any]
    reminders: Any

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


def spark_report(silo: _Reporting) -> dict[str, Any] | None:
    """The silo's Spark session: state, master, job counts, jobs running and recent."""
    return extension_report(silo, "spark")


def extension_report(silo: _Reporting, name: str) -> dict[str, Any] | None:
    """The figures a lifecycle participant ``name`` offers (``Silo.statistics().extensions``),
    as plain values; None if there is none."""
    figures = silo.statistics().extensions.get(name)
    if figures is None:
        return None
    plain = _plain(figures)
    return plain if isinstance(plain, dict) else {"value": plain}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
