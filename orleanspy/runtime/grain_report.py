"""The grain page: what a silo knows of one grain, read without ever activating it.

``orleanspy grains show``, the dashboard's grain lookup and ``/api/grains/TYPE/KEY`` show
one grain: the silo it is active on (from the local activation table; the cluster asks the
directory first) and since when, its mailbox, its type's call figures on that silo, its
reminder rows, its stream subscriptions and, only when ``SiloOptions.grain_page_state`` is
set, its persistent state as JSON of at most ``GRAIN_STATE_CAP`` bytes per state.

Nothing here sends the grain a message or creates an activation: the activation table is
read, the reminder table and grain storage are read directly.

State: an active grain's state is its activation's in-memory value (what its next write
would store, possibly ahead of storage); an inactive grain's is its stored record, read
from the storage its class declares (or absent when nothing was ever written).

Call figures are kept per grain type and method on each silo (``runtime.call_stats``), not
per grain: the page shows the figures of the grain's type on the silo it lives on.
Explicit and implicit subscriptions are those the stream pulling agents deliver (from each
silo's ``streams`` report); implicit namespaces come from the grain's class.
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
import json
import uuid
from typing import Any, Final

from orleanspy.ids import GrainId
from orleanspy.runtime.activation_state import ActivationState
from orleanspy.runtime.call_stats import figures, method_label

__all__ = [
    "GRAIN_STATE_CAP",
    "activation_report",
    "grain_page",
    "grain_subscriptions",
    "implicit_namespaces_of",
    "reminder_rows",
    "state_json",
    "stored_state",
]

#: The most bytes of JSON the grain page shows of one state; longer text is cut there and
#: marked ``truncated`` with its full size.
GRAIN_STATE_CAP: Final = 64 * 1024

# The class attribute ``orleanspy.streams.implicit_subscription`` sets (streams is a layer
# above this one; tests/unit/silo/test_grain_page.py checks the two names agree).
_IMPLICIT_ATTR: Final = "_orleanspy_implicit_namespaces"


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (uuid.UUID, decimal.Decimal, GrainId)):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return repr(value)


def state_json(name: str, value: Any, source: str,
               cap: int = GRAIN_STATE_CAP) -> dict[str, Any]:
    """One state as the page shows it: ``json`` (text, cut at ``cap`` bytes), its full
    ``bytes``, ``truncated`` and ``source`` (``memory`` or ``storage``)."""
    try:
        text = json.dumps(value, default=_default, sort_keys=True)
    except (TypeError, ValueError) as exc:  # keys JSON cannot hold, or a cycle
        return {"name": name, "source": source, "json": None, "bytes": 0, "truncated": False,
                "error": f"not representable as JSON: {exc}"}
    data = text.encode()
    truncated = len(data) > cap
    if truncated:
        text = data[:cap].decode(errors="ignore")
    return {"name": name, "source": source, "json": text, "bytes": len(data),
            "truncated": truncated}


def activation_report(silo: Any, grain_id: GrainId) -> dict[str, Any]:
    """This silo's activation of ``grain_id``, read from its activation table: active or
    not, since when (epoch seconds), its mailbox, its type's call figures here and (when
    the silo shows state) each state's in-memory value."""
    act = silo.catalog.get(grain_id)
    here = str(silo.address)
    methods: list[dict[str, Any]] = [
        {"method": method_label(f.method), "calls": f.calls, "errors": f.errors,
         "mean_seconds": f.mean, "p50_seconds": f.p50, "p99_seconds": f.p99}
        for f in figures({grain_id.type_name:
                          silo.call_statistics.snapshot().get(grain_id.type_name, {})})]
    methods.sort(key=lambda m: (-m["calls"], m["method"]))
    if act is None or act.state is ActivationState.INVALID:
        return {"active": False, "silo": None, "asked": here, "methods": methods,
                "methods_silo": here}
    stats = act.statistics()
    report: dict[str, Any] = {
        "active": True, "silo": here, "asked": here, "since": act.created_at,
        "activation_state": stats.state,
        "mailbox": {"queued": stats.queued, "running": stats.running,
                    "blocked_senders": stats.blocked_senders, "max_queued": stats.max_queued,
                    "capacity": act.capacity,
                    # requests whose caller gave up (cancel, deadline) before they started
                    "dropped_unstarted": stats.expired},
        "received": stats.received, "completed": stats.completed, "failed": stats.failed,
        "idle_seconds": stats.idle_seconds, "methods": methods, "methods_silo": here,
    }
    if silo.options.grain_page_state:
        report["state"] = [state_json(ps.name, ps.value, "memory")
                           for ps in act.states.values()]
    return report


async def stored_state(silo: Any, grain_id: GrainId, info: Any) -> list[dict[str, Any]]:
    """Each state of an inactive grain as stored (read from storage, never activating it);
    a state never written shows ``stored: false`` and no JSON."""
    out: list[dict[str, Any]] = []
    for attr, spec in info.states.items():
        try:
            ps = silo.make_state(spec, grain_id)
            await ps.read()
        except Exception as exc:  # storage down or not configured: the rest still shows
            out.append({"name": spec.name or attr, "source": "storage", "json": None,
                        "bytes": 0, "truncated": False, "error": f"not read: {exc!r}"})
            continue
        if ps.record_exists:
            out.append(state_json(ps.name, ps.value, "storage"))
        else:
            out.append({"name": ps.name, "source": "storage", "json": None, "bytes": 0,
                        "truncated": False, "stored": False})
    return out


async def reminder_rows(silo: Any, grain_id: GrainId) -> list[dict[str, Any]]:
    """The grain's rows of the reminder table (read directly: no grain call)."""
    service = silo.reminders
    table = getattr(service, "table", None)
    if table is None:
        return []
    rows = await table.read_rows(grain_id)
    return sorted(({"name": r.name, "start_at": r.start_at, "period": r.period}
                   for r in rows), key=lambda r: r["name"])


def implicit_namespaces_of(info: Any) -> list[str]:
    """The stream namespaces the grain's class subscribes to implicitly."""
    return list(getattr(info.cls, _IMPLICIT_ATTR, ()))


def grain_subscriptions(grain_id: GrainId,
                        reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The subscriptions whose consumer is ``grain_id``, from silos' ``streams`` reports
    (``runtime.reports.streams_report`` with the silo's name under ``silo``): failing
    first, then furthest behind."""
    me = str(grain_id)
    out = []
    for report in reports:
        for provider, agents in (report.get("providers") or {}).items():
            for agent in agents:
                for sub in agent.get("subs") or ():
                    if sub.get("consumer") != me:
                        continue
                    sub_id = str(sub.get("subscription"))
                    out.append({
                        "provider": provider, "stream": sub.get("stream"),
                        "subscription": sub_id,
                        "kind": "implicit" if sub_id.startswith("implicit:") else "explicit",
                        "lag": sub.get("lag"), "age": sub.get("age"),
                        "failing": bool(sub.get("failing")), "queue": agent.get("queue"),
                        "agent_silo": report.get("silo"),
                    })
    out.sort(key=lambda s: (not s["failing"], -(s["lag"] or 0), str(s["stream"])))
    return out


async def grain_page(silo: Any, grain_id: GrainId, info: Any, local: dict[str, Any],
                     streams: list[dict[str, Any]]) -> dict[str, Any]:
    """The whole page from ``local`` (``activation_report`` of the silo the grain is active
    on, or of the asked silo when it is not active) and every answering silo's ``streams``
    report. Stored state is read only when ``silo`` shows state and the grain is not
    active."""
    key = grain_id.key
    page: dict[str, Any] = {"grain": str(grain_id), "type": grain_id.type_name,
                            "key": key if isinstance(key, (int, str)) else str(key),
                            "directory": True, **local}
    if "state" not in page:
        if not silo.options.grain_page_state:
            page["state"] = None
        elif not local["active"]:
            page["state"] = await stored_state(silo, grain_id, info)
        else:  # active on a silo that does not show state
            page["state"] = None
    page["reminders"] = await reminder_rows(silo, grain_id)
    page["implicit_namespaces"] = implicit_namespaces_of(info)
    page["subscriptions"] = grain_subscriptions(grain_id, streams)
    return page
