"""The subscription manager lists a stream's subscriptions (implicit and explicit, with
consumer, filter and lag) and removes explicit ones from outside their consumers — from a
grain and from a client (its own only); an implicit one is refused. A provider's agents
stop (events wait in the queue, none is delivered) and start again (every one arrives, once,
in order)."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import pytest

from orleanspy import Grain
from orleanspy.errors import StreamError
from orleanspy.runtime.gateway import CLIENT_CONSUMER_TYPE
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.provider import implicit_subscription
from orleanspy.testing import TestCluster

WAIT = 10.0
GOT: dict[str, list[Any]] = defaultdict(list)
CHANGED: list[asyncio.Event] = []  # set when a consumer got an event (one per test)


class Watcher(Grain):
    async def join(self, key: str, expression: str | None = None) -> str:
        stream = self.get_stream_provider("s").get_stream("news", key)
        handle = await stream.subscribe(self._on_news, filter=expression)
        return handle.sub_id

    async def _on_news(self, item: Any, token: Any) -> None:
        GOT[f"watcher/{self.key}"].append(item)
        CHANGED[0].set()


@implicit_subscription("news")
class Archive(Grain):
    async def on_next(self, item: Any, token: Any) -> None:
        GOT[f"archive/{self.key}"].append(item)
        CHANGED[0].set()


class Admin(Grain):
    async def listing(self, key: str) -> list[Any]:
        return await self.get_stream_provider("s").subscription_manager().subscriptions(
            "news", key)

    async def remove(self, key: str, sub_id: str) -> None:
        await self.get_stream_provider("s").subscription_manager().remove("news", key, sub_id)

    async def publish(self, key: str, items: list[Any]) -> None:
        await self.get_stream_provider("s").get_stream("news", key).on_next_batch(items)


def providers() -> dict[str, Any]:
    return {"s": PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(total_queues=2, pull_period=0.01, delivery_backoff=0.01,
                              max_delivery_backoff=0.05),
    )}


@pytest.fixture
async def cluster() -> Any:
    GOT.clear()
    CHANGED[:] = [asyncio.Event()]
    c = TestCluster([Watcher, Archive, Admin], stream_providers=providers())
    await c.start()
    yield c
    await c.stop()


async def _until(predicate: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():
            await CHANGED[0].wait()
            CHANGED[0].clear()


async def test_a_grain_lists_and_removes_a_subscription_and_its_events_stop(
    cluster: Any,
) -> None:
    admin = cluster.client.get_grain(Admin, "ops")
    sub_id = await cluster.client.get_grain(Watcher, "w").join("k1", 'event != "skip"')
    await admin.publish("k1", ["a"])
    await _until(lambda: GOT["watcher/w"] == ["a"] and GOT["archive/k1"] == ["a"])

    listing = await admin.listing("k1")
    assert [(i.sub_id, i.consumer, i.kind, i.filter) for i in listing] == [
        ("implicit:Archive", "Archive/k1",
         "implicit", None),
        (sub_id, "Watcher/w", "explicit", 'event != "skip"'),
    ]
    assert all(i.lag == 0 and not i.faulted for i in listing)  # the agent knows: caught up

    with pytest.raises(StreamError, match="implicit"):
        await admin.remove("k1", listing[0].sub_id)
    with pytest.raises(StreamError, match=f"no subscription 'nope'.*{sub_id}"):
        await admin.remove("k1", "nope")
    await admin.remove("k1", sub_id)
    assert [i.sub_id for i in await admin.listing("k1")] == [listing[0].sub_id]

    await admin.publish("k1", ["b", "c"])
    await _until(lambda: GOT["archive/k1"] == ["a", "b", "c"])  # delivered past the removal
    assert GOT["watcher/w"] == ["a"]


async def test_a_client_lists_any_subscription_and_removes_only_its_own(cluster: Any) -> None:
    client = cluster.client
    provider = client.get_stream_provider("s")
    got: list[Any] = []

    async def handler(item: Any, token: Any) -> None:
        got.append(item)
        CHANGED[0].set()

    handle = await provider.get_stream("news", "k2").subscribe(handler)
    grains = await client.get_grain(Watcher, "w2").join("k2")
    listing = await provider.list_subscriptions("news", "k2")
    assert {(i.sub_id, i.kind) for i in listing} == {
        (handle.sub_id, "explicit"), (grains, "explicit"),
        ("implicit:Archive", "implicit"),
    }
    assert f"{CLIENT_CONSUMER_TYPE}/{client.client_id}" in {i.consumer for i in listing}
    with pytest.raises(PermissionError, match="not this client's"):
        await provider.remove_subscription("news", "k2", grains)
    await provider.remove_subscription("news", "k2", handle.sub_id)
    assert handle.sub_id not in {i.sub_id for i in await provider.list_subscriptions("news",
                                                                                    "k2")}
    assert await provider.get_stream("news", "k2").get_subscriptions() == []

    # a grain (an operator) removes a client's subscription: the client forgets it too
    again = await provider.get_stream("news", "k2").subscribe(handler)
    await client.get_grain(Admin, "ops").remove("k2", again.sub_id)
    assert await provider.get_stream("news", "k2").get_subscriptions() == []


async def test_stopped_agents_deliver_nothing_and_started_ones_deliver_everything(
    cluster: Any,
) -> None:
    admin = cluster.client.get_grain(Admin, "ops")
    await cluster.client.get_grain(Watcher, "w3").join("k3")
    provider = cluster.silo.stream_providers["s"]
    await admin.publish("k3", [0])
    await _until(lambda: GOT["watcher/w3"] == [0])

    await provider.stop_agents()
    state = provider.agents_state()
    assert state["state"] == "stopped" and len(state["queues"]) == 2
    assert provider.agents == {}
    await admin.publish("k3", list(range(1, 21)))
    await asyncio.sleep(20 * 0.01)  # twenty pull periods: a running agent would deliver
    assert GOT["watcher/w3"] == [0] and GOT["archive/k3"] == [0]

    await provider.start_agents()
    assert provider.agents_state()["state"] == "running" and len(provider.agents) == 2
    await _until(lambda: len(GOT["watcher/w3"]) >= 21 and len(GOT["archive/k3"]) >= 21)
    assert GOT["watcher/w3"] == list(range(21))  # none lost, none twice, in order
    assert GOT["archive/k3"] == list(range(21))


async def test_stopped_agents_keep_their_leases_past_the_lease_duration() -> None:
    """A silo whose agents are stopped renews the leases of the queues it keeps: no other
    silo takes them, and its agents start on them again."""
    GOT.clear()
    CHANGED[:] = [asyncio.Event()]
    factory = MemoryAdapterFactory()
    lease = 0.6

    def two_silo_providers() -> dict[str, Any]:
        return {"s": PersistentStreamProvider(factory, StreamProviderOptions(
            total_queues=4, pull_period=0.01, lease_duration=lease,
            balance_settle_time=0.05, lease_retry_period=0.05))}

    async with asyncio.timeout(WAIT * 3), TestCluster(
        [Watcher, Archive, Admin], silos=2, stream_providers=two_silo_providers,
    ) as cluster:
        a, b = (s.stream_providers["s"] for s in cluster.silos)
        await a.wait_for_queues(lambda qs: len(qs) == 2, WAIT)
        await b.wait_for_queues(lambda qs: len(qs) == 2, WAIT)
        kept = set(a.agents)
        await a.stop_agents()
        assert a.agents == {} and a.agents_state()["state"] == "stopped"
        store = a.balancer.store
        me = str(cluster.silos[0].address)
        for _ in range(3):  # three lease durations: each lease was renewed in between
            await asyncio.sleep(lease)
            held = await store.read_all()
            now = time.time()
            assert {q for q, le in held.items() if le.owner == me and le.expiry > now} == {
                str(q) for q in kept}
        assert set(b.agents).isdisjoint(kept)
        await a.start_agents()
        assert set(a.agents) == kept
