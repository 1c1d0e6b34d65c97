"""Silos of one process forming a cluster over real loopback transports and a shared table.

Covers the transport (cross-silo calls, errors, one-way calls, fail-fast, one connection per
pair, handshake), the distributed directory (one activation per grain under races, entries of
a dead silo, forwarding) and placement (each strategy).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest

from orleanspy import (
    Grain,
    MessageRejectedError,
    Silo,
    SiloOptions,
    SiloUnavailableError,
    one_way,
    placement,
)
from orleanspy._util.futures import reply_to
from orleanspy.cluster.config import membership_options_of
from orleanspy.cluster.directory import (
    DirectoryEntry,
    DirectoryPartition,
    DirectoryRing,
)
from orleanspy.cluster.membership import MemoryMembershipTable, SiloStatus
from orleanspy.cluster.transport import query_silo
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.messaging.message import Direction, Message

WAIT = 10.0


class Remembering(Exception):
    pass


class Box(Grain):
    def __init__(self) -> None:
        self.calls = 0
        self.notes: list[str] = []

    async def hit(self) -> int:
        self.calls += 1
        return self.calls

    async def where(self) -> str:
        return self.silo.name

    async def fail(self, text: str) -> None:
        raise Remembering(text)

    async def call_other(self, key: str) -> str:
        return await self.get_grain(Box, key).where()

    async def echo(self, value: Any) -> Any:
        return value

    @one_way
    async def note(self, text: str) -> None:
        self.notes.append(text)

    async def read_notes(self) -> list[str]:
        return list(self.notes)


@placement("random")
class RandomBox(Box):
    pass


@placement("hash_based")
class HashedBox(Box):
    pass


@placement("activation_count")
class CountedBox(Box):
    pass


GRAINS = [Box, RandomBox, HashedBox, CountedBox]


def options(**overrides: Any) -> SiloOptions:
    settings: dict[str, Any] = {
        "membership": "memory", "port": 0, "gateway_port": None, "cluster_id": "unit",
        "probe_period": 0.3, "i_am_alive_period": 0.3, "table_refresh_period": 0.3,
        "response_timeout": WAIT,
    }
    settings.update(overrides)
    return SiloOptions(**settings)


async def start_cluster(n: int, table: MemoryMembershipTable | None = None,
                        **overrides: Any) -> list[Silo]:
    table = table or MemoryMembershipTable()
    silos = [Silo(options(**overrides), grains=GRAINS, membership_table=table) for _ in range(n)]
    for silo in silos:
        await silo.start()
    await wait_view(silos, n)
    return silos


async def wait_view(silos: list[Silo], active: int) -> None:
    for silo in silos:
        assert silo.cluster is not None
        await silo.cluster.wait_for_view(lambda s: len(s.active_silos) == active, WAIT)


@pytest.fixture
async def cluster3() -> AsyncIterator[list[Silo]]:
    silos = await start_cluster(3)
    try:
        yield silos
    finally:
        for silo in silos:
            await silo.stop()


def activations_of(silos: list[Silo], grain_class: type, key: Any) -> list[str]:
    from orleanspy.grains.interface import type_name_of

    gid = GrainId(type_name_of(grain_class), key)
    return [s.name for s in silos if gid in s.catalog.activations]


# -- the directory and placement, pure parts ------------------------------------------------
def test_directory_ring_owner_is_the_same_for_any_silo_order():
    silos = [SiloAddress("127.0.0.1", 5000 + i, 7) for i in range(5)]
    a = DirectoryRing(silos)
    b = DirectoryRing(reversed(silos))
    owners = {a.owner(GrainId("T", i)) for i in range(200)}

    assert all(a.owner(GrainId("T", i)) == b.owner(GrainId("T", i)) for i in range(200))
    assert owners == set(silos)  # every silo owns part of the ring
    assert DirectoryRing([]).owner(GrainId("T", 1)) is None


def test_directory_partition_register_if_absent_keeps_the_first_valid_entry():
    part = DirectoryPartition()
    gid = GrainId("T", "g")
    first = DirectoryEntry(SiloAddress("h", 1, 1), 1)
    second = DirectoryEntry(SiloAddress("h", 2, 1), 1)

    assert part.register(gid, first, lambda silo: True) == first
    assert part.register(gid, second, lambda silo: True) == first
    assert part.register(gid, second, lambda silo: silo != first.silo) == second
    assert not part.unregister(gid, first)
    assert part.unregister(gid, second)
    assert part.lookup(gid) is None


def test_silo_options_probe_timeout_above_period_is_rejected():
    from orleanspy import ConfigurationError

    with pytest.raises(ConfigurationError, match="probe_timeout"):
        membership_options_of(SiloOptions(probe_period=1.0, probe_timeout=2.0))
    with pytest.raises(ConfigurationError, match="membership"):
        SiloOptions(membership="etcd://x")
    assert SiloOptions(membership="redis://x:6379/0").membership == "redis://x:6379/0"
    assert SiloOptions(membership="postgres://x/db").membership == "postgres://x/db"


# -- transport ---------------------------------------------------------------------------
async def test_cluster_call_reaches_the_grain_on_another_silo_and_returns_its_value(cluster3):
    a, b, c = cluster3
    where = await a.get_grain(Box, "x").where()  # prefer-local: placed on a

    assert where == a.name
    assert await b.get_grain(Box, "x").hit() == 1
    assert await c.get_grain(Box, "x").hit() == 2
    assert await c.get_grain(Box, "x").echo({"k": [1, (2, 3)]}) == {"k": [1, (2, 3)]}
    assert activations_of(cluster3, Box, "x") == [a.name]


async def test_cluster_call_raises_the_grains_exception_type_across_silos(cluster3):
    a, b, _ = cluster3
    await a.get_grain(Box, "err").hit()

    with pytest.raises(Remembering, match="nope"):
        await b.get_grain(Box, "err").fail("nope")


async def test_cluster_one_way_call_reaches_a_grain_on_another_silo(cluster3):
    a, b, _ = cluster3
    await a.get_grain(Box, "ow").hit()

    await b.get_grain(Box, "ow").note("n1")
    await b.get_grain(Box, "ow").note("n2")

    # One connection, one activation, one mailbox: the request arrives after both notes.
    assert await b.get_grain(Box, "ow").read_notes() == ["n1", "n2"]


async def test_cluster_grain_to_grain_call_crosses_silos(cluster3):
    a, b, _ = cluster3
    await b.get_grain(Box, "on-b").hit()

    assert await a.get_grain(Box, "on-a").call_other("on-b") == b.name


async def test_cluster_call_to_a_crashed_silo_fails_fast_with_silo_unavailable(cluster3):
    a, b, _ = cluster3
    await b.get_grain(Box, "gone").hit()
    await a.get_grain(Box, "gone").hit()  # a caches: "gone" lives on b
    assert b.cluster is not None
    await b.cluster.abort()  # listener and connections closed, no membership write

    started = time.monotonic()
    with pytest.raises(SiloUnavailableError):
        await a.get_grain(Box, "gone").hit()

    assert time.monotonic() - started < 2.0  # the response timeout is 10 s


async def test_cluster_grains_of_a_dead_silo_reactivate_elsewhere_on_the_next_call(cluster3):
    a, b, c = cluster3
    keys = [f"k{i}" for i in range(20)]
    for key in keys:
        await b.get_grain(Box, key).hit()
    assert b.cluster is not None and a.cluster is not None and a.cluster.membership
    await b.cluster.abort()

    await a.cluster.membership.wait_for(
        lambda s: s.status_of(b.address) is SiloStatus.DEAD, timeout=WAIT
    )
    await wait_view([a, c], 2)
    for key in keys:
        assert await a.get_grain(Box, key).hit() == 1  # a fresh activation
    for key in keys:
        assert len(activations_of([a, c], Box, key)) == 1


async def test_cluster_uses_one_connection_per_silo_pair_even_when_both_connect_at_once():
    silos = await start_cluster(2)
    try:
        a, b = silos
        await asyncio.gather(*(
            s.get_grain(Box, f"{s.name}-{i}").hit() for s in silos for i in range(20)
        ))
        results = await asyncio.gather(*(
            x.get_grain(Box, f"{y.name}-{i}").hit()
            for x in silos for y in silos if x is not y for i in range(20)
        ))

        assert all(r == 2 for r in results)
        assert a.cluster is not None and b.cluster is not None
        async with asyncio.timeout(WAIT):  # a retired duplicate closes once drained
            # No event marks "the peer closed it" on this side: poll the table.
            while len(a.cluster.transport._all) != 1 or len(b.cluster.transport._all) != 1:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert a.cluster.transport._conns[b.address] is not None
    finally:
        for s in silos:
            await s.stop()


async def test_cluster_transport_refuses_a_wrong_cluster_id_or_secret(cluster3):
    a = cluster3[0]
    port = a.address.port

    with pytest.raises(SiloUnavailableError, match="wrong cluster id"):
        await query_silo("127.0.0.1", port, "status", [], cluster_id="other")
    status = await query_silo("127.0.0.1", port, "status", [], cluster_id="unit")

    assert status["silo"] == str(a.address)
    assert status["status"] == "active"
    assert len(status["active_silos"]) == 3


# -- one activation per grain ------------------------------------------------------------
@pytest.mark.parametrize("grain_class", GRAINS)
async def test_cluster_concurrent_first_calls_from_every_silo_leave_one_activation(
    cluster3, grain_class
):
    keys = [f"race-{i}" for i in range(30)]

    results = await asyncio.gather(*(
        s.get_grain(grain_class, key).hit() for key in keys for s in cluster3
    ))

    assert sorted(results) == sorted([1, 2, 3] * len(keys))  # one counter per grain
    for key in keys:
        assert len(activations_of(cluster3, grain_class, key)) == 1, key


async def test_cluster_hash_based_placement_puts_a_grain_on_the_same_silo_from_anywhere(
    cluster3,
):
    placed = {}
    for i, silo in enumerate(cluster3 * 4):
        placed[i] = await silo.get_grain(HashedBox, f"h{i}").where()

    assert len(set(placed.values())) > 1  # spread over silos, not all local
    for i in placed:
        assert activations_of(cluster3, HashedBox, f"h{i}") == [placed[i]]


async def test_cluster_random_and_activation_count_placement_spread_over_silos(cluster3):
    a = cluster3[0]
    for i in range(60):
        await a.get_grain(RandomBox, f"r{i}").hit()
        await a.get_grain(CountedBox, f"c{i}").hit()

    by_silo_random = [sum(1 for i in range(60) if activations_of([s], RandomBox, f"r{i}"))
                      for s in cluster3]
    by_silo_counted = [sum(1 for i in range(60) if activations_of([s], CountedBox, f"c{i}"))
                       for s in cluster3]
    assert all(n > 0 for n in by_silo_random), by_silo_random
    assert max(by_silo_counted) - min(by_silo_counted) <= 6, by_silo_counted


async def test_cluster_forwarding_stops_after_two_hops(cluster3):
    a = cluster3[0]
    assert a.cluster is not None
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    msg = Message(Direction.REQUEST, GrainId("Box", "hops"), "hit", [], None)
    msg.reply = partial(reply_to, fut)
    msg.hops = 2

    a.cluster.route(msg, forwarded=True)

    with pytest.raises(MessageRejectedError, match="forwarded 2 times"):
        await fut


async def test_cluster_graceful_stop_moves_grains_to_the_remaining_silos(cluster3):
    a, b, c = cluster3
    for i in range(10):
        await b.get_grain(Box, f"g{i}").hit()

    await b.stop()
    await wait_view([a, c], 2)

    for i in range(10):
        assert await a.get_grain(Box, f"g{i}").hit() == 1
        assert len(activations_of([a, c], Box, f"g{i}")) == 1
