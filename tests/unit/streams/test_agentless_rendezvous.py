"""Any silo can host a stream's rendezvous, including a silo that runs no pulling agent: it
reaches the agents on the other silos (subscribe, resume and unsubscribe work there)."""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain, Silo
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.testing import TestCluster

WAIT = 20.0
GOT: list[Any] = []
ARRIVED: dict[Any, asyncio.Event] = {}


async def arrival(item: Any) -> None:
    async with asyncio.timeout(WAIT):
        await ARRIVED.setdefault(item, asyncio.Event()).wait()


class Consumer(Grain):
    async def join(self) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        self.handle = await stream.subscribe(self._got)

    async def leave(self) -> None:
        await self.handle.unsubscribe()

    async def _got(self, item: Any, token: Any = None) -> None:
        GOT.append((self.key, item))
        ARRIVED.setdefault((self.key, item), asyncio.Event()).set()


class Producer(Grain):
    async def send(self, item: Any) -> None:
        await self.get_stream_provider("s").get_stream("ns", "k").on_next(item)


async def test_a_silo_without_an_agent_hosts_a_rendezvous_that_knows_producers() -> None:
    GOT.clear()
    ARRIVED.clear()
    factory = MemoryAdapterFactory()

    def providers() -> dict[str, Any]:
        options = StreamProviderOptions(total_queues=1, pull_period=0.01)
        return {"s": PersistentStreamProvider(factory, options)}

    async with asyncio.timeout(WAIT * 2):
        async with TestCluster([Consumer, Producer], silos=2,
                               stream_providers=providers) as cluster:
            async def agentless() -> Silo:
                while True:  # the balancer gives the one queue to one silo
                    owners = [s for s in cluster.silos if s.stream_providers["s"].agents]
                    if owners:
                        return next(s for s in cluster.silos if s not in owners)
                    await asyncio.sleep(0.01)

            b = await agentless()
            # the rendezvous is placed on b (prefer_local): b runs no agent
            await b.get_grain(Consumer, "first").join()
            await b.get_grain(Producer, "p").send(1)  # the agent registers at b's rendezvous
            await arrival(("first", 1))
            await b.get_grain(Consumer, "second").join()  # the rendezvous tells the agent
            await b.get_grain(Producer, "p").send(2)
            await arrival(("first", 2))
            await arrival(("second", 2))
            await b.get_grain(Consumer, "second").leave()
            await b.get_grain(Producer, "p").send(3)
            await arrival(("first", 3))
            assert ("second", 3) not in GOT
