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
