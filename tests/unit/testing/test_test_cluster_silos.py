"""TestCluster(silos=N): in-process silos of one cluster with shared storage, a client on
every gateway, and kill / stop / add_silo."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from orleanspy import Grain, persistent_state
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.provider import implicit_subscription
from orleanspy.testing import TestCluster

WAIT = 20.0
GOT: list[Any] = []
ALL_ARRIVED = asyncio.Event()


@dataclass
class Tally:
    n: int = 0


class Counter(Grain):
    tally = persistent_state(Tally)

    async def add(self, k: int) -> int:
        self.tally.value.n += k
        await self.tally.write()
        return self.tally.value.n

    async def where(self) -> str:
        return self.silo.name


@implicit_subscription("tc")
class Listener(Grain):
    async def on_next(self, item: Any, token: Any = None) -> None:
        GOT.append(item)
        if sorted(GOT) == list(range(5)):
            ALL_ARRIVED.set()


async def test_a_three_silo_cluster_spreads_grains_and_serves_the_client() -> None:
    async with asyncio.timeout(WAIT):
        async with TestCluster([Counter], silos=3) as cluster:
            assert len(cluster.silos) == 3
            assert len(cluster.client.connected_gateways) == 3
            places = {await cluster.client.get_grain(Counter, k).where() for k in range(30)}
            assert len(places) > 1  # the client's calls reach several silos


async def test_state_survives_a_killed_silo_and_stop_and_add_work() -> None:
    async with asyncio.timeout(WAIT * 2):
        async with TestCluster([Counter], silos=3) as cluster:
            ref = cluster.silos[0].get_grain(Counter, "c")
            assert await ref.add(5) == 5
            where = await ref.where()
            host = next(s for s in cluster.silos if s.name == where)
            survivor = next(s for s in cluster.silos if s is not host)
            await cluster.kill(host)
            assert len(cluster.silos) == 2
            again = survivor.get_grain(Counter, "c")
            assert await again.add(1) == 6  # re-activated elsewhere, state from the storage
            assert await again.where() != host.name
            newcomer = await cluster.add_silo()
            assert len(cluster.silos) == 3
            await cluster.stop(survivor)
            assert await newcomer.get_grain(Counter, "c").add(1) == 7


async def test_stream_providers_made_per_silo_share_their_queues() -> None:
    GOT.clear()
    ALL_ARRIVED.clear()
    factory = MemoryAdapterFactory()

    def providers() -> dict[str, Any]:
        return {"s": PersistentStreamProvider(factory, StreamProviderOptions(pull_period=0.01))}

    async with asyncio.timeout(WAIT):
        async with TestCluster([Listener], silos=2, stream_providers=providers) as cluster:
            stream = cluster.client.get_stream_provider("s").get_stream("tc", "k")
            for i in range(5):
                await stream.on_next(i)
            await ALL_ARRIVED.wait()


def test_a_cluster_refuses_a_shared_provider_dict_and_a_fake_clock() -> None:
    with pytest.raises(ValueError, match="function"):
        TestCluster([Listener], silos=2, stream_providers={"s": object()})
    with pytest.raises(ValueError, match="at least one"):
        TestCluster([Counter], silos=0)


async def test_the_fixture_takes_the_silo_count(orleanspy_cluster: Any) -> None:
    cluster = await orleanspy_cluster(grains=[Counter], silos=2)
    assert len(cluster.silos) == 2
    assert await cluster.client.get_grain(Counter, "f").add(2) == 2
