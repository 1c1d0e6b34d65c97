"""The agent forgets streams that had no event for ``inactivity_period``: its stream table
shrinks and it leaves their rendezvous; the next event registers the stream again and every
subscription (explicit and implicit) gets it."""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain, Silo, SiloOptions, stream_handler
from orleanspy.diagnostics import QueueRead
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.pubsub import PubSubRendezvous
from orleanspy.testing import EventRecorder

WAIT = 10.0
GOT: list[tuple[str, str, int]] = []
ARRIVED: dict[tuple[str, str, int], asyncio.Event] = {}


def arrived(who: str, key: str, item: int) -> asyncio.Event:
    return ARRIVED.setdefault((who, key, item), asyncio.Event())


class Watcher(Grain):
    async def watch(self, key: str) -> None:
        await self.get_stream_provider("s").get_stream("sw", key).subscribe(self.got)

    @stream_handler
    async def got(self, item: int, token: Any) -> None:
        GOT.append(("explicit", self.key, item))
        arrived("explicit", self.key, item).set()


@implicit_subscription("sw")
class Keeper(Grain):
    async def on_next(self, item: int, token: Any) -> None:
        GOT.append(("implicit", self.key, item))
        arrived("implicit", self.key, item).set()


async def test_idle_streams_leave_the_agent_and_come_back_with_their_next_event() -> None:
    GOT.clear()
    ARRIVED.clear()
    provider = PersistentStreamProvider(MemoryAdapterFactory(), StreamProviderOptions(
        total_queues=1, pull_period=0.01, inactivity_period=0.3))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
                grains=[Watcher, Keeper], stream_providers={"s": provider})
    await silo.start()
    recorder = EventRecorder(silo.diagnostics)
    try:
        await silo.get_grain(Watcher, "w").watch("a")
        for key in ("a", "b", "c"):
            await provider.get_stream("sw", key).on_next(1)
        for key in ("a", "b", "c"):
            async with asyncio.timeout(WAIT):
                await arrived("implicit", key, 1).wait()
        async with asyncio.timeout(WAIT):
            await arrived("explicit", "w", 1).wait()
        (agent,) = provider.agents.values()
        assert len(agent.streams) == 3
        # "hot" keeps publishing; the others go idle and are swept (the agent's read cycles
        # run every pull period: each one is reported as a QueueRead of the hot stream).
        hot = provider.get_stream("sw", "hot")
        loop = asyncio.get_running_loop()
        end = loop.time() + WAIT
        n = 0
        while set(agent.streams) != {hot.stream_id}:
            assert loop.time() < end, f"not swept: {sorted(map(str, agent.streams))}"
            n += 1
            seen = len(recorder.of(QueueRead))
            await hot.on_next(n)
            await recorder.wait_event(QueueRead, timeout=WAIT, count=seen + 1)
        rendezvous = silo.get_grain(PubSubRendezvous, ("s", "sw", "a"))
        assert await rendezvous.producers() == []
        # the next event registers "a" again: both of its subscriptions get it
        await provider.get_stream("sw", "a").on_next(2)
        async with asyncio.timeout(WAIT):
            await arrived("implicit", "a", 2).wait()
            await arrived("explicit", "w", 2).wait()
        assert sorted(e for e in GOT if e[1] in ("a", "w")) == [  # each once
            ("explicit", "w", 1), ("explicit", "w", 2), ("implicit", "a", 1),
            ("implicit", "a", 2)]
    finally:
        recorder.close()
        await silo.stop()
