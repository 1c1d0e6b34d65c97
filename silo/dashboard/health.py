"""What the operator's tools say about silos that are not serving and queues nobody pulls:
the dashboard's view (``/api/cluster``, the page, ``/metrics`` of the silo that serves it) and
``orleanspy cluster status`` build their rows here, from the same inputs, so they agree.

- A silo row carries its membership status and, read from the table: when it was last seen
  (its last I-am-alive), who suspects it (fresh votes, for a silo that is not gone), and for
  a DEAD row when it was declared dead and by which silos. ``reachable`` says whether it
  answered the tool. A silo is *gone* when its row is STOPPED (it left gracefully) or DEAD
  (the others declared it dead): only a DEAD row is called dead.
- A queue is *unowned* while no silo that answers pulls it. Its stream-queue lease (kept with
  the membership table) names the silo that held it last: if that silo is no longer active
  (stopped, dead, or on its way), the queue has been unowned since that silo was last seen,
  until a live silo takes it; if the lease expired, since its expiry. A queue whose lease
  holder is active but did not answer is *unread* (it may be pulled; nobody can tell).
  Without a lease (a silo that stops gracefully releases its leases), the time is the first
  time the tool found it unowned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from orleanspy.cluster.membership.voting import fresh_votes

__all__ = ["GONE", "FirstSeen", "silo_health", "unowned_queues", "warnings"]

ACTIVE: Final = "active"
DEAD: Final = "dead"
GONE: Final = frozenset({"stopped", DEAD})  # statuses final for an address (is_gone)


def silo_health(entry: Any, now: float, vote_expiration: float) -> dict[str, Any]:
    """The membership facts of one row (a ``MembershipEntry``) as plain values."""
    dead = entry.status.value == DEAD
    gone = entry.status.value in GONE  # a stopped or dead silo is suspected no more
    fresh = [] if gone else [str(v.voter) for v in fresh_votes(entry.suspect_votes, now,
                                                               vote_expiration)]
    seen = entry.i_am_alive_time or None
    return {
        "silo": str(entry.silo), "status": entry.status.value, "last_seen": seen,
        "last_seen_ago": None if seen is None else round(max(0.0, now - seen), 1),
        "suspected_by": fresh,
        "declared_dead_at": entry.declared_dead_at or None if dead else None,
        "declared_dead_by": [str(s) for s in entry.declared_dead_by] if dead else [],
    }


class FirstSeen:
    """When a tool that keeps running (the dashboard) first found each queue unowned: the
    time of a queue without a lease that says more."""

    def __init__(self) -> None:
        self._since: dict[tuple[str, str], float] = {}

    def update(self, unowned: Iterable[tuple[str, str]], now: float) -> dict[tuple[str, str],
                                                                            float]:
        keys = set(unowned)
        self._since = {k: self._since.get(k, now) for k in keys}
        return dict(self._since)


def unowned_queues(
    all_queues: Mapping[str, Iterable[str]], owned: Iterable[tuple[str, str]],
    leases: Mapping[str, Any], silos: Mapping[str, dict[str, Any]], now: float,
    first_seen: FirstSeen | None = None,
) -> list[dict[str, Any]]:
    """Queues of ``all_queues`` (provider -> queue names) that no silo in ``owned`` pulls,
    with the silo that held each last (``leases``: queue -> ``Lease``), that silo's status
    (``silos``: address -> a ``silo_health`` row with ``reachable``), and since when."""
    pulled = set(owned)
    missing = sorted((p, q) for p, queues in all_queues.items() for q in queues
                     if (p, q) not in pulled)
    seen = first_seen.update(missing, now) if first_seen is not None else {}
    rows = []
    for provider, queue in missing:
        lease = leases.get(queue)
        holder = silos.get(lease.owner) if lease is not None else None
        since: float | None = seen.get((provider, queue))
        state = "unowned"
        if lease is not None and holder is not None and holder["status"] != ACTIVE:
            since = holder["last_seen"] or since
        elif lease is not None and holder is not None and not holder.get("reachable", True):
            state = "unread"  # held by an active silo that does not answer
            since = holder["last_seen"] or since
        elif lease is not None and lease.expiry < now:
            since = lease.expiry
        rows.append({
            "provider": provider, "queue": queue, "state": state,
            "last_owner": lease.owner if lease is not None else None,
            "last_owner_status": holder["status"] if holder is not None else None,
            "since": since, "for_seconds": None if since is None else round(
                max(0.0, now - since), 1),
        })
    return rows


def warnings(silos: Iterable[dict[str, Any]], unowned: Iterable[dict[str, Any]]) -> list[str]:
    """The banner: one line per unowned or unread queue (with the status of the silo that
    held it last: stopped or dead), and per suspected or unreachable live silo (empty while
    the cluster is whole; a gone silo's row is no warning by itself)."""
    out = []
    for q in unowned:
        held = f" (last held by {q['last_owner']}, {q['last_owner_status']})" if q[
            "last_owner"] else ""
        took = f" for {q['for_seconds']:.0f} s" if q["for_seconds"] is not None else ""
        what = "not read: its owner does not answer" if q["state"] == "unread" else "unowned"
        out.append(f"queue {q['provider']}/{q['queue']} {what}{took}{held}")
    for s in silos:
        if s["suspected_by"]:
            out.append(f"silo {s['silo']} suspected by {', '.join(s['suspected_by'])}")
        if s["status"] == ACTIVE and not s.get("reachable", True):
            out.append(f"silo {s['silo']} does not answer (last seen "
                       f"{_ago(s['last_seen_ago'])})")
    return out


def _ago(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.0f} s ago"
