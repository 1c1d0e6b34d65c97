"""The dashboard's cluster view: rates and quantiles over the window from cumulative
figures, a silo that leaves never makes figures negative, malformed peer rows are left out,
and concurrent requests share one gathering."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from orleanspy import Silo, SiloOptions
from silo.dashboard import view as view_module
from silo.dashboard.app import OpsServer
from silo.dashboard.view import ClusterView

LAST = 24


def snapshot(calls: int, errors: int = 0, bucket: int = 3) -> dict[str, Any]:
    buckets = [0] * (LAST + 1)
    buckets[bucket] = calls
    return {"T": {"m": {"calls": calls, "errors": errors, "seconds": calls * 5e-5,
                        "buckets": buckets}}}


def answers(silo: str, calls: int, reminders: Any = ()) -> Any:
    status = {"silo": silo, "status": "active", "activations_by_type": {"T": 1}}
    streams = {"silo": silo, "providers": {}, "latency": {}}
    return (status, streams, {"silo": silo, "types": snapshot(calls)},
            {"silo": silo, "count": 0, "fired": 0, "reminders": list(reminders)})


def test_rates_cover_the_window_and_never_go_negative(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(view_module.time, "monotonic", lambda: now[0])
    view = ClusterView()
    first = view.build("c", [answers("a", 100), answers("b", 50)])
    (m,) = first["methods"]
    assert m["calls"] == 150 and m["calls_per_second"] is None  # no earlier reading
    now[0] += 10.0
    later = view.build("c", [answers("a", 300), answers("b", 50)])
    (m,) = later["methods"]
    assert m["calls"] == 350 and m["calls_per_second"] == pytest.approx(20.0)
    assert m["p50"] is not None and m["p50"] <= 8e-5
    now[0] += 10.0
    gone = view.build("c", [answers("a", 300)])  # b left: its calls leave the totals
    (m,) = gone["methods"]
    assert m["calls"] == 300 and m["calls_per_second"] == 0.0


def test_the_window_is_ten_seconds_whenever_the_readings_span_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Readings come when pages ask, at no fixed period: the figures of 10 s ago are
    interpolated between the readings around that moment, so the page's "last 10 s" is 10 s
    (not the 13 s back to the newest reading at least 10 s old)."""
    now = [1000.0]
    monkeypatch.setattr(view_module.time, "monotonic", lambda: now[0])
    view = ClusterView()
    view.build("c", [answers("a", 100)])
    now[0] += 4.0
    early = view.build("c", [answers("a", 140)])
    assert early["window"] == pytest.approx(4.0)  # less history than a window: what it has
    now[0] += 9.0
    later = view.build("c", [answers("a", 230)])  # 10 s ago: 130 calls, interpolated
    assert later["window"] == pytest.approx(view_module.WINDOW)
    (m,) = later["methods"]
    assert m["calls_per_second"] == pytest.approx(10.0)


def test_malformed_peer_rows_are_left_out() -> None:
    bad = [{"grain": 5, "name": "x", "period": 1, "next_due": 2},
           {"grain": "G/1", "name": "r", "period": 60.0, "next_due": 10.0}, "junk"]
    status, streams, _, rems = answers("a", 1, bad)
    got = ClusterView().build("c", [(status, streams, {"types": {"T": "nonsense"}}, rems)])
    assert [r["grain"] for r in got["reminders"]] == ["G/1"]
    assert got["methods"] == []


async def test_concurrent_requests_share_one_gathering(monkeypatch: pytest.MonkeyPatch) -> None:
    silo = Silo(SiloOptions(gateway_port=None))
    await silo.start()
    server = OpsServer(silo)
    await server.start()
    gathered = 0
    original = server.cluster_view

    async def counting() -> dict[str, Any]:
        nonlocal gathered
        gathered += 1
        await asyncio.sleep(0.05)
        return await original()

    monkeypatch.setattr(server, "cluster_view", counting)
    try:
        async with aiohttp.ClientSession() as http:
            async def get() -> dict[str, Any]:
                async with http.get(f"http://{server.address}/api/cluster") as r:
                    assert r.status == 200
                    body: dict[str, Any] = await r.json()
                    return body

            views = await asyncio.gather(*(get() for _ in range(20)))
    finally:
        await server.stop()
        await silo.stop()
    assert gathered == 1
    assert all(v == views[0] for v in views)


def test_every_row_of_the_table_is_shown_and_queues_nobody_pulls_are_unowned() -> None:
    from orleanspy.cluster.membership import MembershipEntry, SiloStatus, SuspectVote
    from orleanspy.ids import SiloAddress
    from orleanspy.streams.leases import Lease
    from silo.dashboard.health import silo_health
    from silo.dashboard.view import Membership

    a, b, c, d, e = (SiloAddress("127.0.0.1", port, 1) for port in (1, 2, 3, 4, 5))
    now = 1000.0
    rows = [
        MembershipEntry(silo=a, status=SiloStatus.ACTIVE, i_am_alive_time=999.0),
        MembershipEntry(silo=b, status=SiloStatus.DEAD, i_am_alive_time=990.0,
                        declared_dead_at=995.0, declared_dead_by=(a, c)),
        MembershipEntry(silo=c, status=SiloStatus.ACTIVE, i_am_alive_time=980.0,
                        suspect_votes=(SuspectVote(a, 998.0),)),
        MembershipEntry(silo=d, status=SiloStatus.SHUTTING_DOWN, i_am_alive_time=970.0),
        # stopped gracefully, with a vote from before its stop and a lease it kept
        MembershipEntry(silo=e, status=SiloStatus.STOPPED, i_am_alive_time=985.0,
                        suspect_votes=(SuspectVote(a, 984.0),)),
    ]
    status, streams, calls, rems = answers(str(a), 1)
    status["all_queues"] = {"s": ["s-0", "s-1", "s-2", "s-3", "s-4"]}
    streams["providers"] = {"s": [{
        "queue": "s-0", "cache_size": 0, "cache_max": 8, "under_pressure": False,
        "pull_period": 0.1, "read": 0, "delivered": 0, "acknowledged": 0, "failures": 0,
        "subscriptions": 0}]}
    leases = {"s-0": Lease("s-0", str(a), now + 5), "s-1": Lease("s-1", str(b), now + 5),
              "s-2": Lease("s-2", str(c), now + 5), "s-4": Lease("s-4", str(e), now + 5)}
    membership = Membership([silo_health(e, now, 120.0) for e in rows], leases, now)
    view = ClusterView().build("c", [(status, streams, calls, rems)], membership)

    by_silo = {s["silo"]: s for s in view["silos"]}
    assert [s["silo"] for s in view["silos"]] == [str(a), str(c), str(d), str(b), str(e)]
    dead = by_silo[str(b)]
    assert (dead["status"], dead["declared_dead_at"], dead["declared_dead_by"]) == (
        "dead", 995.0, [str(a), str(c)])
    assert dead["reachable"] is False and dead["activations"] is None
    assert by_silo[str(c)]["suspected_by"] == [str(a)]
    assert by_silo[str(a)]["last_seen_ago"] == 0.0  # it answered
    assert view["summed"] == [str(a)] and view["unread"] == [str(c)]  # not the leaving d
    unowned = {q["queue"]: q for q in view["unowned_queues"]}
    assert set(unowned) == {"s-1", "s-2", "s-3", "s-4"}
    assert (unowned["s-1"]["state"], unowned["s-1"]["since"]) == ("unowned", 990.0)
    assert unowned["s-1"]["last_owner_status"] == "dead"
    assert (unowned["s-2"]["state"], unowned["s-2"]["last_owner"]) == ("unread", str(c))
    assert (unowned["s-3"]["last_owner"], unowned["s-3"]["for_seconds"]) == (None, 0.0)
    banner = "\n".join(view["warnings"])
    assert "queue s/s-1 unowned for 10 s" in banner and f"suspected by {a}" in banner
    assert f"silo {c} does not answer" in banner and str(d) not in banner
    # a stopped silo is gone but not dead: suspected no more, its queue unowned until taken
    stopped = by_silo[str(e)]
    assert (stopped["status"], stopped["suspected_by"], stopped["declared_dead_at"]) == (
        "stopped", [], None)
    assert (unowned["s-4"]["state"], unowned["s-4"]["since"]) == ("unowned", 985.0)
    assert unowned["s-4"]["last_owner_status"] == "stopped"
    (line,) = [w for w in view["warnings"] if str(e) in w]
    assert line == f"queue s/s-4 unowned for 15 s (last held by {e}, stopped)"


def test_cluster_status_notes_say_why_a_row_is_not_serving() -> None:
    from orleanspy.cluster.membership import MembershipEntry, SiloStatus, SuspectVote
    from orleanspy.ids import SiloAddress
    from silo.commands.cluster_status import _note, why

    a, b, c = (SiloAddress("127.0.0.1", port, 1) for port in (1, 2, 3))
    restart = SiloAddress("127.0.0.1", 2, 2)
    now = 1000.0
    stopped = MembershipEntry(silo=c, status=SiloStatus.STOPPED, i_am_alive_time=990.0)
    voted = MembershipEntry(silo=b, status=SiloStatus.DEAD, i_am_alive_time=980.0,
                            suspect_votes=(SuspectVote(c, 985.0),),
                            declared_dead_at=995.0, declared_dead_by=(a,))
    replaced = MembershipEntry(silo=b, status=SiloStatus.DEAD, i_am_alive_time=980.0,
                               declared_dead_at=996.0, declared_dead_by=(restart,))
    silent = MembershipEntry(silo=a, status=SiloStatus.ACTIVE, i_am_alive_time=999.0)
    rows = [stopped, voted, silent]
    assert (why(stopped, None, rows, now) or "").startswith("stopped gracefully at ")
    dead = why(voted, None, rows, now) or ""
    assert dead.startswith(f"declared dead by {a} at ") and "(5s ago); last alive" in dead
    assert (why(replaced, None, rows, now) or "").startswith(
        f"replaced by its restart {restart} at ")
    assert (why(silent, None, rows, now) or "").startswith("did not answer; last alive ")
    assert why(silent, {"activations": 0}, rows, now) is None
    note = _note({"why": dead, "suspected_by": [], "unowned_queues": ["s/s-1"]})
    assert note == f"{dead}; unowned: s/s-1"
    assert _note({"why": None, "suspected_by": [str(b)], "unowned_queues": []}) == (
        f"suspected by {b}")
    assert _note({"why": None, "suspected_by": [], "unowned_queues": []}) == "-"
