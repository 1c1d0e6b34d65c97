"""Cancellation across real silo processes: two silos in a cluster, the client on the
first silo's gateway, grains placed by hash. A caller that gives up cancels a
``@cancellable`` turn on another silo (through the gateway, and through a grain's own call
on to a third activation), and a request that has not started never runs once its caller
gave up (cancelled or timed out). One cluster serves every check to keep the suite fast."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from typing import Any

import pytest

from orleanspy import ClusterClient, GrainCallTimeoutError

from .silo_process import SiloLauncher, poll_until
from .test_cluster import CLUSTER, start_cluster

pytestmark = pytest.mark.integration

APP = "tests.integration.calls_app"


async def _key_on(client: ClusterClient, silo: str, other: bool, prefix: str) -> str:
    """A Holder key whose activation runs on ``silo`` (or, ``other``, on another one)."""
    for i in range(64):
        key = f"{prefix}-{i}"
        if ((await client.get_grain("Holder", key).where()) != silo) == other:
            return key
    raise AssertionError(f"no Holder key placed {'off' if other else 'on'} {silo}")


async def _started(holder: Any, method: str, count: int = 1) -> dict[str, Any]:
    return await poll_until(holder.stats, lambda s: s["started"].get(method, 0) >= count,
                            timeout=10, interval=0.01)


async def _cancel(task: asyncio.Task[Any]) -> float:
    """Cancel the caller's task; the wall-clock time of the cancel."""
    at = time.time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    return at


async def test_a_caller_that_gives_up_cancels_and_drops_its_calls_on_other_silos(
        silo_launcher: SiloLauncher) -> None:
    first, _second = await start_cluster(silo_launcher, n=2, app=APP)
    client = first.client(cluster_id=CLUSTER)
    await client.connect()
    try:
        here = first.silo_address.partition("@")[0]  # host:port, as silo.name
        remote = client.get_grain("Holder", await _key_on(client, here, True, "r"))

        # client -> gateway silo -> a @cancellable turn on the other silo
        task = asyncio.ensure_future(remote.with_timeout(60).hold())
        await _started(remote, "hold")
        at = await _cancel(task)
        stats = await poll_until(remote.stats, lambda s: "hold" in s["cancelled_at"],
                                 timeout=5, interval=0.01)
        assert stats["cancelled_at"]["hold"] - at < 0.1

        # client -> A on the gateway silo -> B on the other silo: the cancel follows the
        # call A made, so both turns end
        a = client.get_grain("Holder", await _key_on(client, here, False, "a"))
        b_key = await _key_on(client, here, True, "b")
        b = client.get_grain("Holder", b_key)
        task = asyncio.ensure_future(a.with_timeout(60).relay_hold(b_key))
        await _started(b, "hold")
        at = await _cancel(task)
        a_stats = await poll_until(a.stats, lambda s: "relay_hold" in s["cancelled_at"],
                                   timeout=5, interval=0.01)
        b_stats = await poll_until(b.stats, lambda s: "hold" in s["cancelled_at"],
                                   timeout=5, interval=0.01)
        assert a_stats["cancelled_at"]["relay_hold"] - at < 0.1
        assert b_stats["cancelled_at"]["hold"] - at < 0.1

        # a method that is not @cancellable runs to its end; the requests queued behind it
        # whose callers gave up (one timed out, one cancelled) never start
        q = client.get_grain("Holder", await _key_on(client, here, True, "q"))
        stubborn = asyncio.ensure_future(q.with_timeout(60).stubborn(1.0))
        await _started(q, "stubborn")
        with pytest.raises(GrainCallTimeoutError):
            await q.with_timeout(0.2).queued()
        waiting = [asyncio.ensure_future(q.with_timeout(60).queued()),
                   asyncio.ensure_future(q.with_timeout(60).stubborn(0.0))]
        await poll_until(q.stats, lambda s: s["queued"] >= 3, timeout=5, interval=0.01)
        for task in waiting:
            await _cancel(task)
        await asyncio.wait_for(stubborn, 10)
        await q.queued()  # behind everything else: the dropped ones were dropped by then
        stats = await q.stats()
        assert stats["started"] == {"stubborn": 1, "queued": 1}
        assert stats["finished"] == {"stubborn": 1}
        assert stats["dropped_unstarted"] == 3
    finally:
        await client.close()


async def test_a_streamed_response_crosses_silos_with_bounded_memory_and_stops_early(
        silo_launcher: SiloLauncher) -> None:
    """1,000,000 numbers from an async generator method on another silo, through the
    gateway: all arrive in order, neither side's memory grows with them, and a caller that
    stops early closes the generator on the grain."""
    first, _second = await start_cluster(silo_launcher, n=2, app=APP)
    client = first.client(cluster_id=CLUSTER)
    await client.connect()
    try:
        here = first.silo_address.partition("@")[0]
        key = None
        for i in range(64):
            if await client.get_grain("Numbers", f"n-{i}").where() != here:
                key = f"n-{i}"
                break
        assert key is not None
        numbers: Any = client.get_grain("Numbers", key)
        total = expected = 0
        grain_growth = 0
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            client_growth = 0
            async for n in numbers.invoke_streamed("count", 1_000_000):
                assert n == expected
                expected += 1
                total += n
                if expected % 250_000 == 0:
                    client_growth = max(client_growth, tracemalloc.get_traced_memory()[0] - base)
                    rss = await numbers.memory()
                    grain_growth = max(grain_growth, rss["now"] - rss["before"])
        finally:
            tracemalloc.stop()
        assert expected == 1_000_000 and total == sum(range(1_000_000))
        # a list of the numbers would take 36 MB on either side
        assert client_growth < 4 * 2**20, client_growth
        assert grain_growth < 8 * 2**20, grain_growth

        closed = await numbers.closed_count()
        async with numbers.invoke_streamed("count", 10**12) as stream:
            async for n in stream:
                if n == 1000:
                    break
        assert await numbers.closed_count() == closed + 1  # (waits while the count is held)
    finally:
        await client.close()
