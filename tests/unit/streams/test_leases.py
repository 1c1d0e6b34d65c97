"""Queue leases (memory and SQLite stores) and the runtime balancing of stream queues between
the silos of one process (memory membership, one shared lease store)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.cluster.membership import MemoryMembershipTable
from orleanspy.streams import (
    LeaseQueueBalancer,
    MemoryAdapterFactory,
    PersistentStreamProvider,
    StaticQueueBalancer,
    StreamProviderOptions,
)
from orleanspy.streams.leases import MemoryQueueLeaseStore, QueueLeaseStore, SqliteQueueLeaseStore
from orleanspy.streams.redis_leases import RedisQueueLeaseStore

WAIT = 10.0


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def store(request: Any, tmp_path: Path) -> AsyncIterator[QueueLeaseStore]:
    s: QueueLeaseStore
    if request.param == "memory":
        s = MemoryQueueLeaseStore()
    elif request.param == "sqlite":
        s = SqliteQueueLeaseStore(str(tmp_path / "membership.db"), "unit")
    else:
        s = RedisQueueLeaseStore(request.getfixturevalue("redis_url"), "unit")
    try:
        yield s
    finally:
        await s.close()


async def test_lease_is_exclusive_until_released_expired_or_its_owner_is_dead(
    store: QueueLeaseStore,
):
    assert await store.acquire("q-0", "a", 30)
    assert not await store.acquire("q-0", "b", 30)
    assert await store.acquire("q-0", "a", 30)  # the owner again: renewed
    assert not await store.acquire("q-0", "b", 30, dead={"c"})
    assert await store.acquire("q-0", "b", 30, dead={"a"})  # a was declared dead
    assert (await store.read_all())["q-0"].owner == "b"
    await store.release("a", ["q-0"])  # not a's any more: nothing happens
    assert (await store.read_all())["q-0"].owner == "b"
    await store.release("b", ["q-0"])
    assert await store.read_all() == {}
    assert await store.acquire("q-0", "c", 30)


async def test_lease_expires_and_a_renewal_reports_what_the_owner_lost(store: QueueLeaseStore):
    assert await store.acquire("q-1", "a", -1)  # already expired
    assert await store.acquire("q-2", "a", 30)
    assert await store.acquire("q-1", "b", 30)
    assert await store.renew("a", ["q-1", "q-2"], 30) == {"q-2"}


async def test_sqlite_leases_are_shared_between_connections(tmp_path: Path):
    path = str(tmp_path / "membership.db")
    one, two = SqliteQueueLeaseStore(path, "unit"), SqliteQueueLeaseStore(path, "unit")
    other_cluster = SqliteQueueLeaseStore(path, "other")
    try:
        assert await one.acquire("q-0", "a", 30)
        assert not await two.acquire("q-0", "b", 30)
        assert await other_cluster.acquire("q-0", "b", 30)  # leases are per cluster id
    finally:
        for s in (one, two, other_cluster):
            await s.close()


class Idle(Grain):
    async def ping(self) -> int:
        return 1


def clustered(table: MemoryMembershipTable, lease_duration: float = 3.0) -> Silo:
    options = SiloOptions(
        membership="memory", port=0, gateway_port=None, cluster_id="unit", probe_period=0.3,
        i_am_alive_period=0.3, table_refresh_period=0.3, response_timeout=WAIT,
    )
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(total_queues=8, balance_settle_time=0.05,
                              lease_duration=lease_duration,
                              lease_retry_period=0.05),
    )
    return Silo(options, grains=[Idle], membership_table=table,
                stream_providers={"s": provider})


def provider_of(silo: Silo) -> PersistentStreamProvider:
    p: PersistentStreamProvider = silo.stream_providers["s"]
    return p


async def settled(silos: list[Silo], shares: tuple[int, ...]) -> None:
    """Wait until ``silos`` pull all 8 queues between them, each a count in ``shares``
    (checked after each balancing round of any of them)."""
    providers = [provider_of(s) for s in silos]

    def done(_: Any) -> bool:
        counts = [len(p.agents) for p in providers]
        return sum(counts) == 8 and all(c in shares for c in counts)

    # the predicate is global: the round of whichever silo makes it true sees it
    waits = [asyncio.ensure_future(p.wait_for_queues(done, WAIT)) for p in providers]
    finished, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in finished:
        task.result()  # a TimeoutError fails the test


async def test_queues_balance_on_join_and_hand_off_on_a_graceful_stop():
    table = MemoryMembershipTable()
    silos = [clustered(table) for _ in range(3)]
    try:
        await silos[0].start()
        first = provider_of(silos[0])
        assert isinstance(first.balancer, LeaseQueueBalancer)
        assert len(first.agents) == 8  # alone: every queue
        await silos[1].start()
        await silos[2].start()
        await settled(silos, (2, 3))
        owned = [set(provider_of(s).agents) for s in silos]
        assert len(set().union(*owned)) == 8

        await silos[1].stop()
        assert provider_of(silos[1]).agents == {}
        await settled([silos[0], silos[2]], (4,))
        left = [set(provider_of(s).agents) for s in (silos[0], silos[2])]
        assert left[0] | left[1] == set(first.mapper.all_queues())
        assert owned[0] <= left[0] and owned[2] <= left[1]  # sticky: nobody lost a queue
        status = silos[0].operations.status() if silos[0].operations else {}
        assert sorted(status["queues"]["s"]) == sorted(str(q) for q in left[0])
    finally:
        for silo in silos:
            await silo.stop()


async def test_a_crashed_silos_queues_are_taken_once_it_is_declared_dead_not_at_expiry():
    table = MemoryMembershipTable()
    silos = [clustered(table, lease_duration=60.0) for _ in range(3)]
    try:
        for silo in silos:
            await silo.start()
        await settled(silos, (2, 3))
        crashed = silos[1]
        assert crashed.cluster is not None
        lost = set(provider_of(crashed).agents)
        await crashed.cluster.abort()  # no membership write, no lease release
        await settled([silos[0], silos[2]], (4,))  # long before the 60 s expiry
        taken = set(provider_of(silos[0]).agents) | set(provider_of(silos[2]).agents)
        assert lost <= taken
    finally:
        for silo in silos:
            await silo.stop()


async def test_an_owner_whose_lease_was_taken_stops_its_agent():
    table = MemoryMembershipTable()
    silo = clustered(table, lease_duration=0.3)  # renewed every 0.1 s
    await silo.start()
    try:
        provider = provider_of(silo)
        assert len(provider.agents) == 8
        assert silo.cluster is not None
        store = silo.cluster.lease_store()
        victim = next(iter(provider.agents))
        assert await store.acquire(str(victim), "thief", 60, dead={str(silo.cluster.me)})
        owned = await provider.wait_for_queues(lambda q: victim not in q, WAIT)
        assert len(owned) == 7  # and it cannot take the queue back while the thief holds it
    finally:
        await silo.stop()


async def test_a_silo_without_membership_keeps_the_static_balancer():
    provider = PersistentStreamProvider(MemoryAdapterFactory(),
                                        StreamProviderOptions(total_queues=8))
    silo = Silo(grains=[Idle], stream_providers={"s": provider})
    await silo.start()
    try:
        assert isinstance(provider.balancer, StaticQueueBalancer)
        assert len(provider.agents) == 8
    finally:
        await silo.stop()
