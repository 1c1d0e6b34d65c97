"""MembershipService: several services over one table, a fake network decides who reaches whom.

Most tests use ``STEPPED`` options (hour-long periods: the loops never fire) and drive the
steps themselves (``probe_round``, ``refresh``) with a ``FakeClock``; the last ones run the
loops with ``MembershipOptions.fast()``: on the ``FakeClock`` (advanced step by step), and
over one SQLite file in real time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from orleanspy.cluster.membership import (
    MembershipOptions,
    MembershipService,
    MembershipSnapshot,
    MembershipTable,
    MemoryMembershipTable,
    SiloStatus,
    SqliteMembershipTable,
)
from orleanspy.diagnostics import Diagnostics, SiloStatusChanged
from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress
from orleanspy.testing import EventCollector, EventRecorder, FakeClock

WAIT = 5.0
HOUR = 3600.0
STEPPED = MembershipOptions(
    probe_period=HOUR,
    probe_timeout=1.0,
    i_am_alive_period=HOUR,
    table_refresh_period=HOUR,
    defunct_silo_cleanup_period=None,
)
ACTIVE, DEAD = SiloStatus.ACTIVE, SiloStatus.DEAD


def silo(n: int, generation: int = 1) -> SiloAddress:
    return SiloAddress("127.0.0.1", 11110 + n, generation)


A, B, C, D = silo(1), silo(2), silo(3), silo(4)


class FakeNetwork:
    """Who reaches whom: a silo answers if its service is registered and answers probes, and
    the link between the two is not cut. Every probe is recorded in ``probes``."""

    def __init__(self) -> None:
        self.services: dict[SiloAddress, MembershipService] = {}
        self.cut: set[frozenset[SiloAddress]] = set()
        self.probes = EventCollector()

    def reachable(self, source: SiloAddress, target: SiloAddress) -> bool:
        service = self.services.get(target)
        return (
            service is not None
            and frozenset((source, target)) not in self.cut
            and service.handle_probe()
        )

    def cut_link(self, a: SiloAddress, b: SiloAddress) -> None:
        self.cut.add(frozenset((a, b)))

    def heal_link(self, a: SiloAddress, b: SiloAddress) -> None:
        self.cut.discard(frozenset((a, b)))

    def isolate(self, target: SiloAddress) -> None:
        for other in self.services:
            if other != target:
                self.cut_link(target, other)


class FakeProber:
    """The Prober and Gossiper of one silo on a ``FakeNetwork``."""

    def __init__(self, network: FakeNetwork, me: SiloAddress) -> None:
        self.network = network
        self.me = me

    async def probe(self, silo: SiloAddress, timeout: float) -> bool:
        ok = self.network.reachable(self.me, silo)
        self.network.probes.record((self.me, silo, ok))
        return ok

    async def probe_indirect(
        self, intermediary: SiloAddress, target: SiloAddress, timeout: float
    ) -> bool | None:
        if not self.network.reachable(self.me, intermediary):
            return None
        return await self.network.services[intermediary].handle_indirect_probe(target, timeout)

    async def gossip(self, silo: SiloAddress, version: int) -> None:
        if self.network.reachable(self.me, silo):
            await self.network.services[silo].on_gossip(version)


class Harness:
    """Services of one cluster sharing ``table``, ``clock`` and ``network``."""

    def __init__(self, table: MembershipTable, clock: FakeClock | None = None) -> None:
        self.table = table
        self.clock = clock or FakeClock()
        self.network = FakeNetwork()
        self.dead_callbacks: list[SiloAddress] = []
        self.all: list[MembershipService] = []

    def make(
        self,
        address: SiloAddress,
        options: MembershipOptions = STEPPED,
        *,
        gossip: bool = False,
        table: MembershipTable | None = None,
        clock: Any = "default",
        diagnostics: Diagnostics | None = None,
    ) -> MembershipService:
        prober = FakeProber(self.network, address)
        service = MembershipService(
            table or self.table,
            address,
            prober,
            options=options,
            clock=self.clock if clock == "default" else clock,
            gossiper=prober if gossip else None,
            silo_name=f"silo-{address.port}",
            on_declared_dead=lambda: self.dead_callbacks.append(address),
            rng=random.Random(7),
            diagnostics=diagnostics,
        )
        self.network.services[address] = service
        self.all.append(service)
        return service

    async def start(self, *addresses: SiloAddress, **kwargs: Any) -> list[MembershipService]:
        """Start silos one after the other, then let every running silo read the table."""
        services = []
        for address in addresses:
            service = self.make(address, **kwargs)
            async with asyncio.timeout(WAIT):
                await service.start()
            services.append(service)
        for service in self.all:
            if service.handle_probe():
                await service.refresh()
        return services

    async def status(self, address: SiloAddress) -> SiloStatus:
        row = (await self.table.read_row(address)).get(address)
        assert row is not None
        return row[0].status

    async def stop_all(self) -> None:
        async with asyncio.timeout(WAIT * 2):
            for service in reversed(self.all):
                await service.stop()


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Harness]:
    harness = Harness(MemoryMembershipTable())
    yield harness
    await harness.stop_all()


async def rounds(service: MembershipService, n: int) -> None:
    for _ in range(n):
        await service.probe_round()


# -- join --------------------------------------------------------------------------------


async def test_membership_first_silo_joins_and_becomes_active(cluster: Harness) -> None:
    (a,) = await cluster.start(A)

    assert a.status is ACTIVE
    assert a.snapshot.active_silos == (A,)
    row = (await cluster.table.read_row(A)).get(A)
    assert row is not None
    assert row[0].status is ACTIVE
    assert row[0].silo_name == "silo-11111"
    assert row[0].start_time == cluster.clock.time()
    assert a.snapshot.version == (await cluster.table.read_all()).version.version


async def test_membership_joining_silo_probes_every_active_silo_before_becoming_active(
    cluster: Harness,
) -> None:
    await cluster.start(A, B)
    c = cluster.make(C)
    statuses_when_probing: list[SiloStatus | None] = []
    original = FakeProber.probe

    async def probe(self: FakeProber, target: SiloAddress, timeout: float) -> bool:
        if self.me == C:
            statuses_when_probing.append(await cluster.status(C))
        return await original(self, target, timeout)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FakeProber, "probe", probe)
        async with asyncio.timeout(WAIT):
            await c.start()

    probed_by_c = {target for source, target, _ in cluster.network.probes.events if source == C}
    assert probed_by_c == {A, B}
    assert statuses_when_probing == [SiloStatus.JOINING, SiloStatus.JOINING]
    assert c.snapshot.active_silos == (A, B, C)


async def test_membership_join_waits_for_an_unreachable_active_silo(cluster: Harness) -> None:
    await cluster.start(A)
    cluster.network.cut_link(A, B)
    b = cluster.make(B, MembershipOptions.fast(max_join_attempt_time=HOUR))
    joining = asyncio.create_task(b.start())

    await cluster.network.probes.wait_for(lambda ev: (B, A, False) in ev, WAIT)
    assert not joining.done()
    assert await cluster.status(B) is SiloStatus.JOINING
    cluster.network.heal_link(A, B)
    await cluster.clock.run_for(b.options.probe_period)  # the join retries after a period
    async with asyncio.timeout(WAIT):
        await joining

    assert b.status is ACTIVE


async def test_membership_join_gives_up_after_max_join_attempt_time_and_marks_itself_stopped(
    cluster: Harness,
) -> None:
    await cluster.start(A)
    cluster.network.cut_link(A, B)
    b = cluster.make(B, MembershipOptions.fast(max_join_attempt_time=60.0))
    joining = asyncio.create_task(b.start())
    await cluster.network.probes.wait_for(lambda ev: (B, A, False) in ev, WAIT)

    cluster.clock.advance(60.0)
    unreachable = r"could not reach the active silos 127\.0\.0\.1:11111"
    with pytest.raises(MembershipError, match=unreachable):
        async with asyncio.timeout(WAIT):
            await joining

    assert await cluster.status(B) is SiloStatus.STOPPED
    assert not b.handle_probe()


async def test_membership_join_does_not_wait_for_a_stale_active_silo(cluster: Harness) -> None:
    a, _ = await cluster.start(A, B)
    await a.abort()  # crashed: it answers no probe and writes no more I-am-alive
    cluster.clock.advance(STEPPED.i_am_alive_expiration + 1)
    await cluster.all[1].heartbeat()

    (c,) = await cluster.start(C)

    assert c.status is ACTIVE
    assert (C, A, False) not in cluster.network.probes.events


async def test_membership_restart_declares_the_older_generation_dead(cluster: Harness) -> None:
    old, _ = await cluster.start(silo(1, generation=1), B)
    await old.abort()

    (new,) = await cluster.start(silo(1, generation=2))

    assert await cluster.status(silo(1, generation=1)) is DEAD
    assert new.status is ACTIVE
    assert new.snapshot.active_silos == (silo(1, generation=2), B)


async def test_membership_older_generation_cannot_join_next_to_a_newer_one(
    cluster: Harness,
) -> None:
    await cluster.start(silo(1, generation=5))
    stale = cluster.make(silo(1, generation=4))

    with pytest.raises(MembershipError, match="newer generation"):
        await stale.start()

    assert (await cluster.table.read_row(silo(1, generation=4))).rows == ()


async def test_membership_dead_address_cannot_join_again(cluster: Harness) -> None:
    (a,) = await cluster.start(A)
    await a.stop()
    again = cluster.make(A)

    with pytest.raises(MembershipError, match="already DEAD"):
        await again.start()


async def test_membership_start_twice_raises(cluster: Harness) -> None:
    (a,) = await cluster.start(A)

    with pytest.raises(RuntimeError, match="already called"):
        await a.start()


# -- leave -------------------------------------------------------------------------------


async def test_membership_graceful_leave_writes_shutting_down_then_stopped(
    cluster: Harness,
) -> None:
    a, b = await cluster.start(A, B)

    await b.begin_shutdown()
    assert await cluster.status(B) is SiloStatus.SHUTTING_DOWN
    assert b.handle_probe()  # still answers while it drains
    await b.stop()
    await b.stop()  # idempotent

    assert await cluster.status(B) is SiloStatus.STOPPED  # a crash would read DEAD
    assert not b.handle_probe()
    before = a.snapshot
    after = await a.refresh()
    assert [(c.silo, c.previous, c.current) for c in after.changes_since(before)] == [
        (B, ACTIVE, SiloStatus.STOPPED)
    ]
    assert after.active_silos == (A,)


async def test_membership_stop_without_start_writes_nothing(cluster: Harness) -> None:
    a = cluster.make(A)

    await a.stop()

    assert (await cluster.table.read_all()).rows == ()


# -- failure detection -------------------------------------------------------------------


async def test_membership_crashed_silo_is_declared_dead_by_a_failed_indirect_probe(
    cluster: Harness,
) -> None:
    a, _, c = await cluster.start(A, B, C)
    await c.abort()

    await a.probe_round()
    assert await cluster.status(C) is ACTIVE  # one miss: nothing yet
    await a.probe_round()  # second miss: B cannot reach C either: A and B vote at once

    row = (await cluster.table.read_row(C)).get(C)
    assert row is not None
    assert row[0].status is DEAD
    assert {vote.voter for vote in row[0].suspect_votes} == {A, B}
    assert a.snapshot.status_of(C) is DEAD
    assert C not in a.monitored_silos
    stats = a.statistics()
    assert stats.silos_declared_dead == 1
    assert stats.votes_cast == 2
    assert stats.indirect_probes == 1


async def test_membership_without_indirect_probes_two_voters_declare_death(
    cluster: Harness,
) -> None:
    options = MembershipOptions(
        probe_period=HOUR, probe_timeout=1.0, i_am_alive_period=HOUR,
        table_refresh_period=HOUR, defunct_silo_cleanup_period=None,
        enable_indirect_probes=False,
    )
    a, b, _, d = await cluster.start(A, B, C, D, options=options)
    await d.abort()

    await rounds(a, 2)
    assert (await cluster.table.read_row(D)).get(D)[0].suspect_votes == ()  # type: ignore[index]
    await a.probe_round()  # third miss: A votes; 4 active silos need 2 votes
    row = (await cluster.table.read_row(D)).get(D)
    assert row is not None
    assert row[0].status is ACTIVE
    assert [vote.voter for vote in row[0].suspect_votes] == [A]

    await rounds(b, 3)

    row = (await cluster.table.read_row(D)).get(D)
    assert row is not None
    assert row[0].status is DEAD
    assert [vote.voter for vote in row[0].suspect_votes] == [A, B]


async def test_membership_two_silo_cluster_one_vote_declares_death(cluster: Harness) -> None:
    a, b = await cluster.start(A, B)
    await b.abort()

    await rounds(a, 2)  # no third silo to ask: wait for the missed-probes limit
    assert await cluster.status(B) is ACTIVE
    await a.probe_round()

    assert await cluster.status(B) is DEAD


async def test_membership_expired_votes_do_not_count(cluster: Harness) -> None:
    options = MembershipOptions(
        probe_period=HOUR, probe_timeout=1.0, i_am_alive_period=HOUR,
        table_refresh_period=HOUR, defunct_silo_cleanup_period=None,
        enable_indirect_probes=False,
    )
    a, b, _, d = await cluster.start(A, B, C, D, options=options)
    await d.abort()
    await rounds(a, 3)  # A's vote

    cluster.clock.advance(options.death_vote_expiration_timeout + 1)
    await rounds(b, 3)  # B's vote: A's has expired

    row = (await cluster.table.read_row(D)).get(D)
    assert row is not None
    assert row[0].status is ACTIVE
    assert [vote.voter for vote in row[0].suspect_votes] == [B]


async def test_membership_indirect_probe_saves_a_silo_from_a_false_suspicion(
    cluster: Harness,
) -> None:
    a, b, _ = await cluster.start(A, B, C)
    cluster.network.cut_link(A, C)  # only the A-C link is broken; B still reaches C

    await rounds(a, 6)

    row = (await cluster.table.read_row(C)).get(C)
    assert row is not None
    assert row[0].status is ACTIVE
    assert row[0].suspect_votes == ()
    assert a.statistics().indirect_probes == 3  # on every second miss
    assert a.statistics().votes_cast == 0
    assert b.statistics().probes_sent >= 3  # B probed C for A


async def test_membership_unreachable_intermediary_leaves_the_vote_to_direct_misses(
    cluster: Harness,
) -> None:
    a, _, c = await cluster.start(A, B, C)
    await c.abort()
    cluster.network.cut_link(A, B)  # A cannot ask B, and B does not vote for A's sake

    await rounds(a, 3)

    row = (await cluster.table.read_row(C)).get(C)
    assert row is not None
    assert [vote.voter for vote in row[0].suspect_votes] == [A]
    assert row[0].status is ACTIVE  # 3 active silos need 2 votes


async def test_membership_probes_again_answered_reset_the_missed_count(
    cluster: Harness,
) -> None:
    a, _ = await cluster.start(A, B)
    cluster.network.cut_link(A, B)
    await rounds(a, 2)
    cluster.network.heal_link(A, B)
    await a.probe_round()
    cluster.network.cut_link(A, B)

    await rounds(a, 2)

    assert await cluster.status(B) is ACTIVE  # never three misses in a row


async def test_membership_each_silo_monitors_num_probed_silos_others(cluster: Harness) -> None:
    addresses = [silo(n) for n in range(1, 9)]
    services = await cluster.start(*addresses)
    for service in services:
        await service.refresh()

    monitored_by: dict[SiloAddress, int] = dict.fromkeys(addresses, 0)
    for service in services:
        assert len(service.monitored_silos) == 3
        assert service.silo not in service.monitored_silos
        for target in service.monitored_silos:
            monitored_by[target] += 1
    assert min(monitored_by.values()) >= 1


async def test_membership_a_suspected_silo_is_watched_by_every_silo(cluster: Harness) -> None:
    addresses = [silo(n) for n in range(1, 9)]
    services = await cluster.start(*addresses)
    target = addresses[-1]
    watcher = next(s for s in services if target in s.monitored_silos)
    others = [s for s in services if s is not watcher and s.silo != target]
    assert any(target not in s.monitored_silos for s in others)

    assert await watcher.suspect(target)
    for service in others:
        await service.refresh()

    assert all(target in s.monitored_silos for s in others)


async def test_membership_suspect_of_itself_or_a_missing_silo(cluster: Harness) -> None:
    a, _ = await cluster.start(A, B)

    with pytest.raises(ValueError, match="itself"):
        await a.suspect(A)
    assert await a.suspect(C) is False  # no such row: nothing to vote on
    assert await cluster.status(A) is ACTIVE


# -- declared dead -----------------------------------------------------------------------


async def test_membership_silo_that_reads_itself_dead_stops_and_calls_back(
    cluster: Harness,
) -> None:
    a, _, c = await cluster.start(A, B, C)
    cluster.network.isolate(C)  # C runs on, but nobody reaches it
    await rounds(a, 2)
    assert await cluster.status(C) is DEAD
    assert c.status is ACTIVE  # C has not read the table since
    snapshots: list[MembershipSnapshot] = []

    async def follow() -> None:
        snapshots.extend([snapshot async for snapshot in c.updates()])

    follower = asyncio.create_task(follow())
    heard = EventCollector()

    async def listener(snapshot: MembershipSnapshot) -> None:
        heard.record(snapshot.status_of(C))

    c.add_listener(listener)
    await heard.wait_count(1, WAIT)
    await c.refresh()
    async with asyncio.timeout(WAIT):
        await follower  # the updates of a dead silo end

    await heard.wait_for(lambda ev: ev[-1] is DEAD, WAIT)  # listeners hear it too

    assert c.declared_dead
    assert c.status is DEAD
    assert cluster.dead_callbacks == [C]
    assert not c.handle_probe()
    assert snapshots[-1].status_of(C) is DEAD
    probes_before = c.statistics().probes_sent
    await c.probe_round()
    assert c.statistics().probes_sent == probes_before  # a dead silo probes nobody
    await c.stop()
    assert cluster.dead_callbacks == [C]


async def test_membership_silo_declared_dead_while_joining_fails_to_start(
    cluster: Harness,
) -> None:
    await cluster.start(A)
    cluster.network.cut_link(A, B)
    b = cluster.make(B, MembershipOptions.fast(max_join_attempt_time=HOUR))
    joining = asyncio.create_task(b.start())
    await cluster.network.probes.wait_for(lambda ev: (B, A, False) in ev, WAIT)

    assert await cluster.all[0].suspect(B)  # two active silos: one vote is enough
    await cluster.clock.run_for(b.options.probe_period)  # B's next join attempt reads it
    with pytest.raises(MembershipError):
        async with asyncio.timeout(WAIT):
            await joining

    assert b.declared_dead
    assert cluster.dead_callbacks == [B]


# -- notifications -----------------------------------------------------------------------


async def test_membership_emits_silo_status_changed_for_each_change_in_its_view(
    cluster: Harness,
) -> None:
    hub = Diagnostics()
    with EventRecorder(hub) as rec:
        (a,) = await cluster.start(A, diagnostics=hub)
        mine = await rec.wait_event(SiloStatusChanged, lambda e: e.status == "active")
        assert (mine.silo, mine.subject) == (f"{A.host}:{A.port}", str(A))
        await cluster.start(B)
        await a.refresh()
        b_active = (str(B), "active")
        await rec.wait_event(SiloStatusChanged, lambda e: (e.subject, e.status) == b_active)
        assert await a.suspect(B)  # two active silos: one vote is enough
        b_dead = (str(B), "dead")
        await rec.wait_event(SiloStatusChanged, lambda e: (e.subject, e.status) == b_dead)
        seen = len(rec.of(SiloStatusChanged))
        await a.refresh()  # nothing changed: nothing emitted
        assert len(rec.of(SiloStatusChanged)) == seen


async def test_membership_listener_sees_increasing_versions_of_joins_and_deaths(
    cluster: Harness,
) -> None:
    (a,) = await cluster.start(A)
    seen = EventCollector()

    async def listener(snapshot: MembershipSnapshot) -> None:
        seen.record(snapshot)

    a.add_listener(listener)
    await seen.wait_count(1, WAIT)
    _, c = await cluster.start(B, C)
    await a.refresh()
    await seen.wait_for(lambda ev: ev[-1].active_silos == (A, B, C), WAIT)
    await c.abort()
    await rounds(a, 2)

    events = await seen.wait_for(lambda ev: ev[-1].status_of(C) is DEAD, WAIT)
    versions = [snapshot.version for snapshot in events]
    assert versions == sorted(set(versions))
    assert events[0].active_silos == (A,)


async def test_membership_failing_listener_keeps_receiving(cluster: Harness) -> None:
    (a,) = await cluster.start(A)
    calls = EventCollector()

    async def listener(snapshot: MembershipSnapshot) -> None:
        calls.record(snapshot.version)
        raise ValueError("listener bug")

    a.add_listener(listener)
    await calls.wait_count(1, WAIT)
    await cluster.start(B)
    await a.refresh()

    versions = await calls.wait_count(2, WAIT)  # times out if the raise unsubscribed it
    assert versions[1] > versions[0]


async def test_membership_removed_listener_receives_nothing_more(cluster: Harness) -> None:
    (a,) = await cluster.start(A)
    calls = EventCollector()

    async def listener(snapshot: MembershipSnapshot) -> None:
        calls.record(snapshot.version)

    remove = a.add_listener(listener)
    await calls.wait_count(1, WAIT)
    remove()
    await asyncio.sleep(0)
    await cluster.start(B)
    await a.refresh()
    await a.wait_for(lambda s: s.status_of(B) is ACTIVE, WAIT)

    assert len(calls.events) == 1


async def test_membership_wait_for_returns_the_first_matching_snapshot(
    cluster: Harness,
) -> None:
    (a,) = await cluster.start(A)
    waiting = asyncio.create_task(
        a.wait_for(lambda s: s.status_of(B) is ACTIVE, timeout=WAIT)
    )
    await asyncio.sleep(0)
    assert not waiting.done()

    await cluster.start(B)
    await a.refresh()

    snapshot = await waiting
    assert snapshot.active_silos == (A, B)


async def test_membership_wait_for_raises_when_the_service_stops(cluster: Harness) -> None:
    (a,) = await cluster.start(A)
    waiting = asyncio.create_task(a.wait_for(lambda s: False, timeout=WAIT))
    await asyncio.sleep(0)

    await a.stop()

    with pytest.raises(MembershipError, match="stopped"):
        await waiting


async def test_membership_gossip_makes_other_silos_refresh_at_once(cluster: Harness) -> None:
    a, b = await cluster.start(A, B, gossip=True)
    c = cluster.make(C, gossip=True)
    async with asyncio.timeout(WAIT):
        await c.start()
    assert a.snapshot.active_silos == (A, B, C)  # C's join was gossiped to A
    await c.abort()

    await rounds(a, 2)

    assert b.snapshot.status_of(C) is DEAD  # without a refresh of its own


# -- defunct rows ------------------------------------------------------------------------


async def test_membership_cleanup_deletes_old_stopped_rows_by_the_lowest_active_silo(
    cluster: Harness,
) -> None:
    a, b, c = await cluster.start(A, B, C)
    await c.stop()
    await a.refresh()
    await b.refresh()

    assert await a.cleanup_defunct() == 0
    cluster.clock.advance(a.options.defunct_silo_expiration + 1)
    await a.heartbeat()
    await b.heartbeat()

    assert await b.cleanup_defunct() == 0  # not the lowest active address: leaves it to A
    assert await a.cleanup_defunct() == 1
    assert [e.silo for e in (await cluster.table.read_all()).entries()] == [A, B]


# -- real loops --------------------------------------------------------------------------


async def test_membership_loops_detect_a_crash_within_5_seconds(cluster: Harness) -> None:
    services = await cluster.start(A, B, C, options=MembershipOptions.fast())
    clock = cluster.clock
    await services[2].abort()
    crashed_at = clock.monotonic()

    async with asyncio.timeout(WAIT):
        while not all(s.snapshot.status_of(C) is DEAD for s in services[:2]):
            await clock.run_for(0.1)  # the loops' probes, votes and refreshes, in fake time

    assert clock.monotonic() - crashed_at < 5.0


async def test_membership_instances_over_one_sqlite_file(tmp_path: Path) -> None:
    path = str(tmp_path / "membership.db")
    tables = [SqliteMembershipTable(path, cluster_id="unit") for _ in range(4)]
    harness = Harness(tables[0], clock=None)
    options = MembershipOptions.fast()
    try:
        services = [
            harness.make(address, options, table=table, clock=None)
            for address, table in zip((A, B, C, D), tables, strict=True)
        ]
        async with asyncio.timeout(WAIT):
            await asyncio.gather(*(service.start() for service in services))
            for service in services:
                await service.wait_for(lambda s: len(s.active_silos) == 4)

        await services[3].abort()  # D crashes
        await services[2].stop()  # C leaves

        async with asyncio.timeout(5.0):
            for service in services[:2]:
                snapshot = await service.wait_for(
                    lambda s: s.status_of(D) is DEAD and s.status_of(C) is SiloStatus.STOPPED
                )
                assert snapshot.active_silos == (A, B)
        assert not any(service.declared_dead for service in services)
    finally:
        await harness.stop_all()
        for table in tables:
            await table.close()
