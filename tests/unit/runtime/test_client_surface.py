"""A gateway client reaches exactly the public methods of hosted grain classes: no runtime
hook and nothing of a runtime class, found by enumerating what a silo with streams,
reminders and pub-sub registers, while the runtime itself keeps using all of them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orleanspy import ConfigurationError, Grain, MessageRejectedError, SiloOptions, stream_handler
from orleanspy.grains.interface import (
    CLIENT_EXTENSIONS,
    RUNTIME_HOOKS,
    STREAM_CALLBACKS,
    class_info,
    grain_type,
)
from orleanspy.ids import GrainId
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.provider import implicit_subscription
from orleanspy.testing import TestCluster

WAIT = 5.0
RECEIVED: list[Any] = []
ARRIVED: dict[Any, asyncio.Event] = {}


async def arrival(item: Any) -> None:
    """Wait until the stream consumer got ``item``."""
    async with asyncio.timeout(WAIT):
        await ARRIVED.setdefault(item, asyncio.Event()).wait()


class Counter(Grain):
    def __init__(self) -> None:
        self.n = 0

    async def add(self, k: int) -> int:
        self.n += k
        return self.n


class Ticker(Grain):
    async def receive_reminder(self, name: str, status: Any) -> None:
        RECEIVED.append(("tick", name))


@implicit_subscription("surface")
class Sink(Grain):
    async def on_next(self, item: Any, token: Any = None) -> None:
        RECEIVED.append(item)
        ARRIVED.setdefault(item, asyncio.Event()).set()


@pytest.fixture
async def cluster() -> AsyncIterator[TestCluster]:
    RECEIVED.clear()
    ARRIVED.clear()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(), StreamProviderOptions(total_queues=2, pull_period=0.01)
    )
    c = TestCluster([Counter, Ticker, Sink], options=SiloOptions(shutdown_timeout=5.0),
                    stream_providers={"s": provider})
    await c.start()
    yield c
    await c.stop()


def closed_to_clients(cluster: TestCluster) -> list[tuple[GrainId, str]]:
    """Every (grain, method) the silo dispatches that clients may not call, by enumeration:
    each registered class's runtime hooks and every method of a runtime class, addressed to
    its live activations (system targets) or to a fresh key."""
    silo = cluster.silo
    live: dict[str, list[GrainId]] = {}
    for act in list(silo.catalog.activations.values()):
        live.setdefault(act.grain_id.type_name, []).append(act.grain_id)
    targets = []
    for type_name, info in silo.registry.items():
        ids = live.get(type_name) or [GrainId(type_name, "probe")]
        for name, method in info.methods.items():
            if not method.client_ok:
                targets.extend((gid, name) for gid in ids)
    return targets


async def test_a_client_can_call_no_runtime_hook_or_runtime_class(cluster: TestCluster) -> None:
    targets = closed_to_clients(cluster)
    found = {(gid.type_name, method) for gid, method in targets}
    # the enumeration sees what the runtime registers
    assert ("orleanspy.PubSubRendezvous", "register_producer") in found
    assert ("orleanspy.PullingAgent", "stop") in found or any(
        t == "orleanspy.PullingAgent" for t, _ in found)
    assert ("Counter", "__orleanspy_stream_deliver__") in found
    assert ("Ticker", "receive_reminder") in found
    assert ("Counter", "add") not in found
    assert not any(t == "orleanspy.StreamPublisher" and m == "publish" for t, m in found)

    client = cluster.client
    async with asyncio.timeout(WAIT * 4):
        for gid, method in targets:
            with pytest.raises(MessageRejectedError, match="not callable from a client") as e:
                await client.call(gid, method, (), None, WAIT)
            assert e.value.kind == "not_callable", (gid, method)
        # one-way calls are dropped the same way, and the connection keeps serving
        for gid, method in targets[:5]:
            await client.send_one_way(gid, method, (), None)
        assert await client.get_grain("Counter", "c").add(2) == 2


async def test_the_runtime_still_delivers_streams_and_clients_still_publish(
    cluster: TestCluster,
) -> None:
    stream = cluster.client.get_stream_provider("s").get_stream("surface", "k")
    await stream.on_next("from-the-client")
    await arrival("from-the-client")
    # every pulling agent is still running after the attempts to stop one
    for gid, method in closed_to_clients(cluster):
        if gid.type_name == "orleanspy.PullingAgent" and method == "stop":
            with pytest.raises(MessageRejectedError):
                await cluster.client.call(gid, method, (), None, WAIT)
    await stream.on_next("after")
    await arrival("after")


async def test_the_unknown_method_listing_shows_only_user_methods(cluster: TestCluster) -> None:
    with pytest.raises(MessageRejectedError) as e:
        await cluster.client.call(GrainId("Ticker", "t"), "nope", (), None, WAIT)
    assert "public async methods: none" in str(e.value)
    with pytest.raises(MessageRejectedError) as e:
        await cluster.client.call(GrainId("Counter", "t"), "nope", (), None, WAIT)
    assert "public async methods: add)" in str(e.value)
    assert class_info(Counter).public_methods == ["add"]
    ticker = class_info(Ticker).methods
    # the pulls of a streamed response are open to clients (its token is what allows one)
    assert all(ticker[name].runtime and not ticker[name].client_ok
               for name in RUNTIME_HOOKS - CLIENT_EXTENSIONS)
    assert all(ticker[name].runtime and ticker[name].client_ok for name in CLIENT_EXTENSIONS)


def test_the_runtime_type_prefix_is_reserved() -> None:
    @grain_type("orleanspy.Mine")
    class Mine(Grain):
        async def ping(self) -> None: ...

    with pytest.raises(ConfigurationError, match="reserved for the runtime"):
        TestCluster([Mine])


class Watcher(Grain):
    async def watch_open(self) -> None:
        await self.get_stream_provider("s").get_stream("w", "k").subscribe(self.handle)

    async def watch_marked(self) -> None:
        await self.get_stream_provider("s").get_stream("w", "k").subscribe(self.marked)

    async def watch_error_handler(self) -> None:
        stream = self.get_stream_provider("s").get_stream("w", "k")
        await stream.subscribe(self.marked, on_error=self.handle)

    async def handle(self, item: Any, token: Any) -> None:
        RECEIVED.append(("open", item))

    @stream_handler
    async def marked(self, item: Any, token: Any) -> None:
        RECEIVED.append(("marked", item))
        ARRIVED.setdefault(item, asyncio.Event()).set()


class SubSink(Sink):
    async def on_next(self, item: Any, token: Any = None) -> None:  # an override
        RECEIVED.append(item)


class Lake(Grain):
    @stream_handler
    async def commit(self, files: list[str]) -> None: ...


class MyLake(Lake):
    async def commit(self, files: list[str]) -> None: ...  # an override of a handler

    async def stats(self) -> int:
        return 0


def test_stream_handlers_are_closed_by_the_rule() -> None:
    for cls in (Sink, SubSink, Counter):
        methods = class_info(cls).methods
        assert all(not methods[n].client_ok for n in STREAM_CALLBACKS if n in methods)
    assert not class_info(Sink).methods["on_next"].client_ok
    assert not class_info(MyLake).methods["commit"].client_ok
    assert class_info(MyLake).public_methods == ["stats"]
    assert class_info(Watcher).public_methods == [
        "handle", "watch_error_handler", "watch_marked", "watch_open"]
    with pytest.raises(TypeError, match="@stream_handler needs an async def"):
        stream_handler(lambda: None)


async def test_a_grain_cannot_subscribe_a_method_clients_can_call() -> None:
    RECEIVED.clear()
    ARRIVED.clear()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(), StreamProviderOptions(total_queues=1, pull_period=0.01)
    )
    async with TestCluster([Watcher], stream_providers={"s": provider}) as c:
        watcher = c.silo.get_grain(Watcher, "w")
        with pytest.raises(TypeError, match=r"Watcher.handle is callable by clients"):
            await watcher.watch_open()
        with pytest.raises(TypeError, match=r"Watcher.handle is callable by clients"):
            await watcher.watch_error_handler()
        await watcher.watch_marked()
        with pytest.raises(MessageRejectedError, match="not callable from a client"):
            await c.client.call(GrainId("Watcher", "w"), "marked", ("forged", None), None, WAIT)
        await c.client.get_stream_provider("s").get_stream("w", "k").on_next("real")
        await arrival("real")
        assert ("marked", "forged") not in RECEIVED
