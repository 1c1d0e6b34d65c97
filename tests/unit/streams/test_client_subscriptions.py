"""A ClusterClient subscribes to streams: events through the gateway, in order, one delivery
at a time; handler errors are retried like a grain's; unsubscribe, resume and listing work;
another client cannot reach this client's subscriptions; a client holds at most its
provider's ``max_client_subscriptions``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from orleanspy import ClusterClient, Grain, MessageRejectedError, RequestContext
from orleanspy.diagnostics import CachePurged
from orleanspy.errors import QueueCacheMissError, StreamError
from orleanspy.runtime.gateway import CLIENT_CONSUMER_TYPE
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.delivery import DELIVER
from orleanspy.streams.pubsub import PubSubRendezvous
from orleanspy.testing import EventRecorder, TestCluster

WAIT = 10.0


@dataclass
class Reading:
    sensor: str
    value: float


class Sensor(Grain):
    async def report(self, count: int, start: int = 0) -> None:
        stream = self.get_stream_provider("s").get_stream("readings", self.key)
        for i in range(start, start + count):
            await stream.on_next(Reading(self.key, float(i)))


class Collector:
    def __init__(self, expect: int) -> None:
        self.items: list[Any] = []
        self.tokens: list[Any] = []
        self.errors: list[BaseException] = []
        self.expect = expect
        self.done = asyncio.Event()
        self.failed = asyncio.Event()
        self.active = 0
        self.overlap = False

    async def on_next(self, item: Any, token: Any) -> None:
        self.active += 1
        self.overlap |= self.active > 1
        await asyncio.sleep(0)
        self.active -= 1
        self.items.append(item)
        self.tokens.append(token)
        if len(self.items) >= self.expect:
            self.done.set()

    async def on_error(self, exc: BaseException) -> None:
        self.errors.append(exc)
        self.failed.set()


def providers() -> dict[str, Any]:
    return {"s": PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(total_queues=2, pull_period=0.01, delivery_backoff=0.01,
                              max_delivery_backoff=0.05, max_delivery_time=2.0),
    )}


@pytest.fixture
async def cluster() -> Any:
    c = TestCluster([Sensor], stream_providers=providers())
    await c.start()
    yield c
    await c.stop()


async def test_a_client_gets_every_event_a_grain_produces_in_order(cluster: Any) -> None:
    client = cluster.client
    got = Collector(50)
    stream = client.get_stream_provider("s").get_stream("readings", "t1", Reading)
    handle = await stream.subscribe(got)
    await client.get_grain(Sensor, "t1").report(50)
    async with asyncio.timeout(WAIT):
        await got.done.wait()
    assert [r.value for r in got.items] == [float(i) for i in range(50)]
    assert all(isinstance(r, Reading) for r in got.items)
    assert got.tokens == sorted(got.tokens)
    assert not got.overlap  # one delivery at a time
    assert [h.sub_id for h in await stream.get_subscriptions()] == [handle.sub_id]
    await handle.unsubscribe()
    assert await stream.get_subscriptions() == []


async def test_a_failing_client_handler_is_retried_and_then_handled_alone(cluster: Any) -> None:
    client = cluster.client
    seen: list[float] = []
    failures = {"n": 0}
    done = asyncio.Event()

    async def handler(item: Reading, token: Any) -> None:
        if item.value == 2.0 and failures["n"] < 2:
            failures["n"] += 1
            raise RuntimeError("not yet")
        seen.append(item.value)
        if item.value == 4.0:
            done.set()

    stream = client.get_stream_provider("s").get_stream("readings", "t2", Reading)
    await stream.subscribe(handler)
    await client.get_grain(Sensor, "t2").report(5)
    async with asyncio.timeout(WAIT):
        await done.wait()
    assert seen == [0.0, 1.0, 2.0, 3.0, 4.0]  # retried until it succeeded, nothing twice
    assert failures["n"] == 2


async def test_a_client_resumes_from_a_token(cluster: Any) -> None:
    client = cluster.client
    first = Collector(6)
    stream = client.get_stream_provider("s").get_stream("readings", "t3", Reading)
    handle = await stream.subscribe(first)
    await client.get_grain(Sensor, "t3").report(6)
    async with asyncio.timeout(WAIT):
        await first.done.wait()
    again = Collector(3)
    await handle.resume(again, first.tokens[3])
    async with asyncio.timeout(WAIT):
        await again.done.wait()
    assert [r.value for r in again.items][:3] == [3.0, 4.0, 5.0]


async def test_a_client_resuming_from_a_purged_token_is_told_of_the_miss(cluster: Any) -> None:
    client = cluster.client
    got = Collector(3)
    stream = client.get_stream_provider("s").get_stream("readings", "t4", Reading)
    handle = await stream.subscribe(got)
    await client.get_grain(Sensor, "t4").report(3)
    async with asyncio.timeout(WAIT):
        await got.done.wait()
    provider = cluster.silo.stream_providers["s"]
    agent = provider.agents[provider.mapper.queue_for(stream.stream_id)]
    recorder = EventRecorder(cluster.silo.diagnostics)
    await recorder.wait_state(
        CachePurged,
        lambda: agent.cache.purged_sequence(stream.stream_id) >= got.tokens[0].sequence, WAIT)
    again = Collector(1)
    await handle.resume(again, got.tokens[0])
    async with asyncio.timeout(WAIT):
        await again.failed.wait()
    assert isinstance(again.errors[0], QueueCacheMissError)


async def test_another_client_cannot_call_this_clients_consumer(cluster: Any) -> None:
    client = cluster.client
    stream = client.get_stream_provider("s").get_stream("readings", "t5", Reading)
    handle = await stream.subscribe(Collector(1))
    other = ClusterClient(gateways=[cluster.silo.gateway.address],
                          cluster_id=cluster.silo.options.cluster_id)
    await other.connect()
    try:
        spy = other.get_grain(CLIENT_CONSUMER_TYPE, client.client_id)
        with pytest.raises(MessageRejectedError, match="another client"):
            await spy.poll(0.0)
        with pytest.raises(MessageRejectedError, match="another client"):
            await spy.unsubscribe(handle.sub_id)
    finally:
        await other.close()


async def test_a_client_that_stops_polling_loses_its_subscriptions_after_client_timeout(
) -> None:
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(total_queues=1, pull_period=0.01, client_timeout=0.4),
    )
    cluster = TestCluster([Sensor], stream_providers={"s": provider})
    await cluster.start()
    try:
        client = ClusterClient(gateways=[cluster.silo.gateway.address],
                               cluster_id=cluster.silo.options.cluster_id)
        await client.connect()
        stream = client.get_stream_provider("s").get_stream("readings", "t6", Reading)
        handle = await stream.subscribe(Collector(1))
        rendezvous = cluster.silo.get_grain(PubSubRendezvous, ("s", "readings", "t6"))
        records = await rendezvous.subscriptions_of(CLIENT_CONSUMER_TYPE, client.client_id)
        assert [r.sub_id for r in records] == [handle.sub_id]
        await client.close()  # no unsubscribe: the silo keeps it for client_timeout
        for _ in range(int(WAIT / 0.05)):  # expiry is time-driven: poll its effect
            if not await rendezvous.subscriptions_of(CLIENT_CONSUMER_TYPE, client.client_id):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the subscription outlived client_timeout by {WAIT} s")
    finally:
        await cluster.stop()


async def test_a_client_holds_at_most_max_client_subscriptions_per_provider() -> None:
    def provider(cap: int) -> PersistentStreamProvider:
        return PersistentStreamProvider(MemoryAdapterFactory(), StreamProviderOptions(
            total_queues=1, pull_period=0.01, max_client_subscriptions=cap))

    cluster = TestCluster([Sensor], stream_providers={"s": provider(2), "t": provider(1)})
    await cluster.start()
    client = ClusterClient(gateways=[cluster.silo.gateway.address],
                           cluster_id=cluster.silo.options.cluster_id)
    try:
        await client.connect()
        s = client.get_stream_provider("s")
        held = [await s.get_stream("readings", f"c{i}").subscribe(Collector(1))
                for i in range(2)]
        with pytest.raises(ValueError, match="max_client_subscriptions"):
            await s.get_stream("readings", "c2").subscribe(Collector(1))
        # each provider counts its own; a subscription given up makes room again
        await client.get_stream_provider("t").get_stream("readings", "c3").subscribe(
            Collector(1))
        await held[0].unsubscribe()
        await s.get_stream("readings", "c2").subscribe(Collector(1))
    finally:
        await client.close()
        await cluster.stop()


async def test_a_client_handler_runs_under_the_publishers_context(cluster: Any) -> None:
    """The client's request context travels with its call to the producer grain, into the
    events it publishes, and back to the client's handler (which runs under it)."""
    client = cluster.client
    tenants: list[Any] = []
    done = asyncio.Event()

    async def on_next(item: Any, token: Any) -> None:
        tenants.append(RequestContext.get("tenant"))
        if len(tenants) == 3:
            done.set()

    stream = client.get_stream_provider("s").get_stream("readings", "t9", Reading)
    await stream.subscribe(on_next)
    with RequestContext.set(tenant="acme"):
        await client.get_grain(Sensor, "t9").report(2)
    await client.get_grain(Sensor, "t9").report(1, start=2)
    async with asyncio.timeout(WAIT):
        await done.wait()
    assert tenants == ["acme", "acme", None]
    assert RequestContext.get("tenant") is None  # the handler's context stays its own


async def test_a_clients_own_publish_carries_its_context(cluster: Any) -> None:
    client = cluster.client
    got: list[Any] = []
    done = asyncio.Event()

    async def on_next(item: Any, token: Any) -> None:
        got.append([item, RequestContext.get("tenant")])
        if len(got) == 2:
            done.set()

    stream = client.get_stream_provider("s").get_stream("readings", "t10")
    await stream.subscribe(on_next)
    with RequestContext.set(tenant="acme"):
        await stream.on_next(1)
    await stream.on_next(2)
    async with asyncio.timeout(WAIT):
        await done.wait()
    assert got == [[1, "acme"], [2, None]]


async def test_a_delivery_to_a_subscription_the_client_removed_is_dropped(
    cluster: Any,
) -> None:
    """A delivery that reaches the client's consumer after the client unsubscribed counts
    as delivered (a failure would be retried, or re-delivered to the stream's other
    subscribers at a hand-off); one for a subscription it never had still fails."""
    client = cluster.client
    stream = client.get_stream_provider("s").get_stream("readings", "t11", Reading)
    handle = await stream.subscribe(Collector(1))
    await handle.unsubscribe()
    consumer = cluster.silos[0].get_grain(CLIENT_CONSUMER_TYPE, client.client_id)
    event = [(Reading("t11", 1.0), None)]
    assert await consumer.invoke(DELIVER, handle.sub_id, "readings", "t11", event) is None
    with pytest.raises(StreamError, match="has no subscription"):
        await consumer.invoke(DELIVER, f"{client.client_id}/never", "readings", "t11", event)
