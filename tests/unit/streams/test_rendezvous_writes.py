"""The rendezvous changes its memory only when its write succeeds: a subscribe whose write
failed is not live, an unsubscribe whose write failed still tells the agents when it is
retried, and a change that finds the stored state moved on applies to what is stored."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.ids import GrainId
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.pubsub import PubSubRendezvous
from orleanspy.testing.gates import GatedStorage

WAIT = 10.0
GOT: list[Any] = []
ARRIVED: dict[Any, asyncio.Event] = {}


class Watcher(Grain):
    async def join(self) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        self.handle = await stream.subscribe(self._got)

    async def leave(self) -> None:
        await self.handle.unsubscribe()

    async def _got(self, item: Any, token: Any = None) -> None:
        GOT.append(item)
        ARRIVED.setdefault(item, asyncio.Event()).set()
        ARRIVED.setdefault((self.key, item), asyncio.Event()).set()


async def arrival(item: Any) -> None:
    async with asyncio.timeout(WAIT):
        await ARRIVED.setdefault(item, asyncio.Event()).wait()


@pytest.fixture
async def setup() -> Any:
    GOT.clear()
    ARRIVED.clear()
    storage = GatedStorage()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(total_queues=1, pull_period=0.01, max_delivery_time=0.5),
    )
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Watcher],
                stream_providers={"s": provider}, storage={"pubsub": storage})
    await silo.start()
    yield silo, storage, provider
    await silo.stop()


async def records(silo: Silo) -> list[Any]:
    rendezvous = silo.get_grain(PubSubRendezvous, ("s", "ns", "k"))
    return await rendezvous.subscriptions_of("Watcher", "w")


async def test_a_subscribe_whose_write_failed_is_not_live(setup: Any) -> None:
    silo, storage, provider = setup
    stream = provider.get_stream("ns", "k")
    await stream.on_next("warm-up")  # the agent knows the stream and its rendezvous
    storage.fail_writes("", error=OSError("disk full (a test)"))  # the next write
    with pytest.raises(Exception, match="disk full"):
        await silo.get_grain(Watcher, "w").join()
    assert await records(silo) == []
    (agent,) = provider.agents.values()
    assert agent.snapshot().subscriptions == 0  # the agent was never told of it
    await silo.get_grain(Watcher, "w").join()  # a subscribe whose write succeeds
    assert len(await records(silo)) == 1
    await stream.on_next("marker")
    await arrival("marker")


async def test_an_unsubscribe_whose_write_failed_still_tells_the_agent_on_retry(
    setup: Any,
) -> None:
    silo, storage, provider = setup
    stream = provider.get_stream("ns", "k")
    watcher = silo.get_grain(Watcher, "w")
    await watcher.join()
    await stream.on_next(1)
    await arrival(1)
    storage.fail_writes("", error=OSError("disk full (a test)"))  # the next write
    with pytest.raises(Exception, match="disk full"):
        await watcher.leave()
    assert len(await records(silo)) == 1  # still subscribed: the removal was not stored
    await watcher.leave()  # the retry removes it for good and tells the agent
    assert await records(silo) == []
    (agent,) = provider.agents.values()
    assert agent.snapshot().subscriptions == 0  # the agent was told: nothing to deliver to
    failures = agent.failures
    await stream.on_next(2)
    await stream.on_next(3)
    assert GOT == [1]
    assert agent.failures == failures


async def test_a_change_applies_to_the_stored_state_when_another_activation_wrote_first(
    setup: Any,
) -> None:
    """During a membership change a second activation of the rendezvous can run for a moment:
    a write that finds the stored state moved on reads it again and applies the change to
    it, so the subscribe succeeds and keeps what the other activation stored."""
    silo, storage, provider = setup
    stream = provider.get_stream("ns", "k")
    await silo.get_grain(Watcher, "w").join()
    rendezvous_id = GrainId("orleanspy.PubSubRendezvous", ("s", "ns", "k"))
    stored = await storage.read(rendezvous_id, "state")
    assert stored is not None
    # the other activation writes what it holds: the stored etag moves on
    await storage.write(rendezvous_id, "state", stored.data, stored.etag)
    await silo.get_grain(Watcher, "w2").join()
    rendezvous = silo.get_grain(PubSubRendezvous, ("s", "ns", "k"))
    consumers = {r.consumer_key for r in await rendezvous.all_subscriptions()}
    assert consumers == {"w", "w2"}
    await stream.on_next("both")
    await arrival(("w", "both"))
    await arrival(("w2", "both"))
