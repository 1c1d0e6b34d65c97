"""An agent registers a new stream at its rendezvous in the background: a registration that
fails is retried without acknowledging the stream's events, and a registration that hangs
holds back neither the other streams of the queue nor a subscription made meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.pubsub import SubscriptionRecord
from orleanspy.testing.gates import GatedStorage

WAIT = 10.0
GOT: list[tuple[str, Any]] = []
ARRIVED: dict[Any, asyncio.Event] = {}


class Reader(Grain):
    async def join(self, key: str) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", key)
        await stream.subscribe(self._got)

    async def _got(self, item: Any, token: Any = None) -> None:
        GOT.append((self.key, item))
        ARRIVED.setdefault((self.key, item), asyncio.Event()).set()


async def arrival(who: str, item: Any, timeout: float = WAIT) -> None:
    async with asyncio.timeout(timeout):
        await ARRIVED.setdefault((who, item), asyncio.Event()).wait()


@pytest.fixture
async def setup() -> Any:
    GOT.clear()
    ARRIVED.clear()
    storage = GatedStorage()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(total_queues=1, pull_period=0.01, read_backoff=0.05),
    )
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader],
                stream_providers={"s": provider}, storage={"pubsub": storage})
    await silo.start()
    yield silo, storage, provider
    for gate in storage.write_gates:
        gate.open()
    await silo.stop()


async def test_a_failed_registration_is_retried_and_loses_no_event(setup: Any) -> None:
    silo, storage, provider = setup
    await silo.get_grain(Reader, "r").join("a")
    storage.fail_writes("ns")  # the agent's register_producer write fails once
    stream = provider.get_stream("ns", "a")
    await stream.on_next("e1")
    await stream.on_next("e2")
    await arrival("r", "e2")
    assert [item for who, item in GOT if who == "r"] == ["e1", "e2"]


async def test_a_hanging_registration_holds_back_no_other_stream(setup: Any) -> None:
    silo, storage, provider = setup
    await silo.get_grain(Reader, "warm").join("warm")
    await silo.get_grain(Reader, "cold").join("cold")
    await provider.get_stream("ns", "warm").on_next("w0")
    await arrival("warm", "w0")  # the warm stream is registered
    gate = storage.hold_writes("cold")  # the cold stream's registration will hang
    await provider.get_stream("ns", "cold").on_next("c1")
    async with asyncio.timeout(WAIT):
        await gate.reached.wait()
    await provider.get_stream("ns", "warm").on_next("w1")
    await arrival("warm", "w1", timeout=2.0)  # not behind the cold stream's registration
    gate.open()
    await arrival("cold", "c1")


async def test_a_subscription_made_while_the_stream_registers_is_kept(setup: Any) -> None:
    """The rendezvous answers the registration, then takes the subscription and tells the
    agent before the agent has read the answer: the agent keeps it and attaches it."""
    silo, storage, provider = setup
    gate = storage.hold_writes("late")  # the registration's write waits at the gate
    await provider.get_stream("ns", "late").on_next("l0")
    async with asyncio.timeout(WAIT):
        await gate.reached.wait()
    # The subscription waits behind the registration at the rendezvous (one turn at a time).
    joining = asyncio.ensure_future(silo.get_grain(Reader, "late").join("late"))
    await asyncio.sleep(0.05)
    assert not joining.done()
    assert gate.count == 1  # the subscription has not written yet: it waits its turn
    gate.open()
    async with asyncio.timeout(WAIT):
        await joining
    await provider.get_stream("ns", "late").on_next("l1")
    await arrival("late", "l1")
    assert [item for who, item in GOT if who == "late"] == ["l0", "l1"]


async def test_a_subscription_removed_while_the_stream_registers_stays_removed(
    setup: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rendezvous answers the registration with a subscription, then removes it and
    tells the agent before the agent has read the answer: the agent does not attach it."""
    _silo, _storage, provider = setup
    (agent,) = provider.agents.values()
    table = agent.table
    record = SubscriptionRecord("s1", "ns", "gone", "Reader", "gone")
    answered = asyncio.Event()
    asked = asyncio.Event()

    class Rendezvous:
        async def register_producer(self, key: Any) -> list[SubscriptionRecord]:
            asked.set()
            await answered.wait()
            return [record]

        async def unregister_producer(self, key: Any) -> None:
            return None

    monkeypatch.setattr(table, "rendezvous", lambda sid: Rendezvous())
    await provider.get_stream("ns", "gone").on_next("g0")
    async with asyncio.timeout(WAIT):
        await asked.wait()
    table.remove(record)  # the rendezvous's remove_subscriber, overtaking its answer
    answered.set()
    async with asyncio.timeout(WAIT):
        while table.registering:
            await table.registered.wait()
            table.registered.clear()
    assert table.streams[StreamId("ns", "gone")] == {}
    assert GOT == []
