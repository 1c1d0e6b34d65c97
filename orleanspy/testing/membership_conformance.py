"""Conformance suite for membership tables: every clause of ``MembershipTable``.

Subclass ``MembershipTableConformance`` in a test module and implement ``make_table``; pytest
then checks the table contract of ``orleanspy.cluster.membership.table``::

    from orleanspy.testing.membership_conformance import MembershipTableConformance

    class TestMyTable(MembershipTableConformance):
        durable = True  # rows survive close and a new instance on the same storage

        async def make_table(self, tmp_path: Path) -> MembershipTable:
            return MyTable(str(tmp_path / "membership.db"), cluster_id="conformance")

``make_table`` returns a new, unopened table; the suite opens and closes it. For durable
back ends it is called again with the same ``tmp_path`` and must reach the same storage: the
durability clause reopens it, and the shared-storage race runs several instances against one
storage at once. A back end whose instances share nothing (the memory table) sets
``shared_storage = False``. The suite needs pytest and pytest-asyncio.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from orleanspy.cluster.membership.entry import (
    MembershipEntry,
    SiloStatus,
    SuspectVote,
    TableVersion,
)
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.ids import SiloAddress

__all__ = ["MembershipTableConformance", "sample_entry"]

# Upper bound for anything the suite awaits: a hang fails fast.
_WAIT = 20.0
_T0 = 1_712_345_678.125

SILO_A = SiloAddress("10.0.0.1", 11111, 1)
SILO_B = SiloAddress("10.0.0.2", 11111, 1)
SILO_C = SiloAddress("10.0.0.3", 11112, 7)


def sample_entry(
    silo: SiloAddress, status: SiloStatus = SiloStatus.ACTIVE, **changes: object
) -> MembershipEntry:
    """A row with every field set (votes included), for round-trip checks."""
    entry = MembershipEntry(
        silo=silo,
        status=status,
        silo_name=f"silo-{silo.port}-ü✓",
        host_name=f"host-{silo.host}",
        gateway_port=30000 + silo.port % 100,
        start_time=_T0,
        i_am_alive_time=_T0 + 0.5,
    )
    return dataclasses.replace(entry, **changes)  # type: ignore[arg-type]


class MembershipTableConformance:
    """Every clause of the ``MembershipTable`` contract. Subclass and implement ``make_table``."""

    pytestmark = pytest.mark.asyncio

    #: Rows survive ``close`` and a new instance made by ``make_table(tmp_path)``.
    durable = False
    #: Instances made by ``make_table(tmp_path)`` share rows (races across instances run).
    shared_storage = False
    #: Writers in the cross-instance race, and rounds each of them tries.
    race_instances = 4
    race_rounds = 15

    async def make_table(self, tmp_path: Path) -> MembershipTable:
        """Return a new, unopened table (``tmp_path`` is a fresh directory for files)."""
        raise NotImplementedError("implement make_table(tmp_path) in the test class")

    @pytest_asyncio.fixture
    async def table(self, tmp_path: Path) -> AsyncIterator[MembershipTable]:
        provider = await self.make_table(tmp_path)
        await provider.open()
        try:
            yield provider
        finally:
            await provider.close()

    async def _insert(self, table: MembershipTable, entry: MembershipEntry) -> str:
        version = (await table.read_all()).version
        assert await table.insert_row(entry, version)
        row = (await table.read_row(entry.silo)).get(entry.silo)
        assert row is not None
        return row[1]

    # -- read ----------------------------------------------------------------------------
    async def test_read_all_of_new_table_is_empty_at_version_zero(
        self, table: MembershipTable
    ) -> None:
        data = await table.read_all()

        assert data.rows == ()
        assert data.version.version == 0
        assert isinstance(data.version.etag, str)

    async def test_read_row_of_missing_silo_returns_no_row_and_the_version(
        self, table: MembershipTable
    ) -> None:
        await self._insert(table, sample_entry(SILO_A))

        data = await table.read_row(SILO_B)

        assert data.rows == ()
        assert data.get(SILO_B) is None
        assert data.version == (await table.read_all()).version

    async def test_read_row_returns_only_that_row(self, table: MembershipTable) -> None:
        await self._insert(table, sample_entry(SILO_A))
        etag_b = await self._insert(table, sample_entry(SILO_B, SiloStatus.JOINING))

        data = await table.read_row(SILO_B)

        assert data.rows == ((sample_entry(SILO_B, SiloStatus.JOINING), etag_b),)
        assert data.version.version == 2

    async def test_read_all_returns_every_row_with_its_etag(self, table: MembershipTable) -> None:
        expected = {}
        for silo in (SILO_A, SILO_B, SILO_C):
            expected[silo] = (sample_entry(silo), await self._insert(table, sample_entry(silo)))

        data = await table.read_all()

        assert len(data) == 3
        assert {entry.silo: (entry, etag) for entry, etag in data.rows} == expected
        assert data.version.version == 3

    # -- insert --------------------------------------------------------------------------
    async def test_insert_row_at_current_version_stores_row_and_bumps_version(
        self, table: MembershipTable
    ) -> None:
        before = (await table.read_all()).version

        assert await table.insert_row(sample_entry(SILO_A), before) is True

        data = await table.read_all()
        assert data.version.version == before.version + 1
        assert data.version.etag != before.etag
        row = data.get(SILO_A)
        assert row is not None
        assert row[0] == sample_entry(SILO_A)
        assert isinstance(row[1], str)
        assert row[1]

    async def test_insert_row_round_trips_every_field_exactly(
        self, table: MembershipTable
    ) -> None:
        votes = (SuspectVote(SILO_B, _T0 + 1.25), SuspectVote(SILO_C, _T0 + 2.000001))
        entries = [
            sample_entry(SILO_A, SiloStatus.SHUTTING_DOWN, suspect_votes=votes),
            sample_entry(SILO_B, SiloStatus.DEAD, gateway_port=None, silo_name="",
                         host_name=""),
            sample_entry(SILO_C, SiloStatus.JOINING, start_time=0.0, i_am_alive_time=1e-6),
        ]
        for entry in entries:
            await self._insert(table, entry)

        data = await table.read_all()

        for entry in entries:
            row = data.get(entry.silo)
            assert row is not None
            assert row[0] == entry
            assert type(row[0].start_time) is float
            assert type(row[0].i_am_alive_time) is float
            assert row[0].silo.generation == entry.silo.generation

    async def test_insert_row_of_existing_silo_returns_false_and_changes_nothing(
        self, table: MembershipTable
    ) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        before = await table.read_all()

        written = await table.insert_row(sample_entry(SILO_A, SiloStatus.DEAD), before.version)

        assert written is False
        after = await table.read_all()
        assert after.version == before.version
        assert after.rows == ((sample_entry(SILO_A), etag),)

    async def test_insert_row_with_stale_version_returns_false(
        self, table: MembershipTable
    ) -> None:
        stale = (await table.read_all()).version
        await self._insert(table, sample_entry(SILO_A))

        assert await table.insert_row(sample_entry(SILO_B), stale) is False

        data = await table.read_all()
        assert data.get(SILO_B) is None
        assert data.version.version == 1

    async def test_insert_row_with_right_number_but_wrong_etag_returns_false(
        self, table: MembershipTable
    ) -> None:
        version = (await table.read_all()).version

        written = await table.insert_row(
            sample_entry(SILO_A), TableVersion(version.version, version.etag + "-not")
        )

        assert written is False
        assert (await table.read_all()).rows == ()

    async def test_insert_rows_of_other_generations_of_one_endpoint_are_distinct(
        self, table: MembershipTable
    ) -> None:
        old = SiloAddress("10.0.0.1", 11111, 1)
        new = SiloAddress("10.0.0.1", 11111, 2)
        await self._insert(table, sample_entry(old, SiloStatus.DEAD))
        await self._insert(table, sample_entry(new, SiloStatus.JOINING))

        data = await table.read_all()

        assert {e.silo: e.status for e in data.entries()} == {
            old: SiloStatus.DEAD,
            new: SiloStatus.JOINING,
        }

    # -- update --------------------------------------------------------------------------
    async def test_update_row_with_current_etag_and_version_replaces_row(
        self, table: MembershipTable
    ) -> None:
        etag = await self._insert(table, sample_entry(SILO_A, SiloStatus.JOINING))
        before = (await table.read_all()).version
        changed = sample_entry(
            SILO_A, SiloStatus.ACTIVE, suspect_votes=(SuspectVote(SILO_B, _T0 + 3),)
        )

        assert await table.update_row(changed, etag, before) is True

        data = await table.read_all()
        assert data.version.version == before.version + 1
        assert data.version.etag != before.etag
        row = data.get(SILO_A)
        assert row is not None
        assert row[0] == changed
        assert row[1] != etag

    async def test_update_row_with_stale_etag_returns_false_and_changes_nothing(
        self, table: MembershipTable
    ) -> None:
        etag1 = await self._insert(table, sample_entry(SILO_A, SiloStatus.JOINING))
        assert await table.update_row(
            sample_entry(SILO_A), etag1, (await table.read_all()).version
        )
        before = await table.read_all()

        written = await table.update_row(
            sample_entry(SILO_A, SiloStatus.DEAD), etag1, before.version
        )

        assert written is False
        assert await table.read_all() == before

    async def test_update_row_with_stale_version_returns_false_and_changes_nothing(
        self, table: MembershipTable
    ) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        stale = (await table.read_all()).version
        await self._insert(table, sample_entry(SILO_B))
        before = await table.read_all()

        written = await table.update_row(sample_entry(SILO_A, SiloStatus.DEAD), etag, stale)

        assert written is False
        assert await table.read_all() == before

    async def test_update_row_of_missing_silo_returns_false(self, table: MembershipTable) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        version = (await table.read_all()).version

        assert await table.update_row(sample_entry(SILO_B), etag, version) is False

        data = await table.read_all()
        assert data.get(SILO_B) is None
        assert data.version == version

    async def test_update_row_etags_never_repeat(self, table: MembershipTable) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        seen = [etag]
        for i in range(5):
            entry = sample_entry(SILO_A, i_am_alive_time=_T0 + i)
            assert await table.update_row(entry, etag, (await table.read_all()).version)
            row = (await table.read_row(SILO_A)).get(SILO_A)
            assert row is not None
            etag = row[1]
            seen.append(etag)

        assert len(set(seen)) == len(seen)
        assert (await table.read_all()).version.version == 6

    # -- I-am-alive ----------------------------------------------------------------------
    async def test_update_i_am_alive_sets_only_the_time(self, table: MembershipTable) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        before = await table.read_all()

        assert await table.update_i_am_alive(SILO_A, _T0 + 99.75) is True

        after = await table.read_all()
        assert after.version == before.version
        assert after.rows == ((sample_entry(SILO_A, i_am_alive_time=_T0 + 99.75), etag),)

    async def test_update_i_am_alive_does_not_break_a_pending_write(
        self, table: MembershipTable
    ) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        await self._insert(table, sample_entry(SILO_B))
        read = await table.read_all()

        await table.update_i_am_alive(SILO_A, _T0 + 10)
        await table.update_i_am_alive(SILO_B, _T0 + 10)
        written = await table.update_row(sample_entry(SILO_A, SiloStatus.DEAD), etag, read.version)

        assert written is True
        row = (await table.read_row(SILO_A)).get(SILO_A)
        assert row is not None
        assert row[0].status is SiloStatus.DEAD

    async def test_update_i_am_alive_of_missing_silo_returns_false(
        self, table: MembershipTable
    ) -> None:
        assert await table.update_i_am_alive(SILO_A, _T0) is False

        assert (await table.read_all()).rows == ()

    # -- cleanup and delete --------------------------------------------------------------
    async def test_cleanup_defunct_deletes_only_dead_rows_older_than_the_cutoff(
        self, table: MembershipTable
    ) -> None:
        old_dead = SiloAddress("10.0.0.9", 1, 1)
        old_active = SiloAddress("10.0.0.9", 2, 1)
        new_dead = SiloAddress("10.0.0.9", 3, 1)
        await self._insert(table, sample_entry(old_dead, SiloStatus.DEAD, i_am_alive_time=100.0))
        await self._insert(table, sample_entry(old_active, i_am_alive_time=100.0))
        await self._insert(table, sample_entry(new_dead, SiloStatus.DEAD, i_am_alive_time=500.0))
        before = (await table.read_all()).version

        removed = await table.cleanup_defunct(before=200.0)

        assert removed == 1
        data = await table.read_all()
        assert {e.silo for e in data.entries()} == {old_active, new_dead}
        assert data.version == before

    async def test_cleanup_defunct_uses_the_latest_i_am_alive_time(
        self, table: MembershipTable
    ) -> None:
        await self._insert(table, sample_entry(SILO_A, SiloStatus.DEAD, i_am_alive_time=100.0))
        await table.update_i_am_alive(SILO_A, 300.0)

        assert await table.cleanup_defunct(before=200.0) == 0
        assert await table.cleanup_defunct(before=301.0) == 1

    async def test_delete_table_removes_rows_and_resets_the_version(
        self, table: MembershipTable
    ) -> None:
        await self._insert(table, sample_entry(SILO_A))
        await self._insert(table, sample_entry(SILO_B))
        stale = (await table.read_all()).version

        await table.delete_table()

        data = await table.read_all()
        assert data.rows == ()
        assert data.version.version == 0
        assert await table.insert_row(sample_entry(SILO_A), stale) is False
        assert await table.insert_row(sample_entry(SILO_A), data.version) is True

    # -- concurrency ---------------------------------------------------------------------
    async def test_concurrent_inserts_at_one_version_exactly_one_wins(
        self, table: MembershipTable
    ) -> None:
        version = (await table.read_all()).version
        silos = [SiloAddress("10.0.1.1", 11111 + i, 1) for i in range(6)]

        async with asyncio.timeout(_WAIT):
            results = await asyncio.gather(
                *(table.insert_row(sample_entry(silo), version) for silo in silos)
            )

        assert results.count(True) == 1, results
        data = await table.read_all()
        assert [e.silo for e in data.entries()] == [silos[results.index(True)]]
        assert data.version.version == version.version + 1

    async def test_concurrent_updates_of_one_row_exactly_one_wins(
        self, table: MembershipTable
    ) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        version = (await table.read_all()).version
        voters = [SiloAddress("10.0.1.1", 11111 + i, 1) for i in range(6)]
        entries = [
            sample_entry(SILO_A, suspect_votes=(SuspectVote(voter, _T0),)) for voter in voters
        ]

        async with asyncio.timeout(_WAIT):
            results = await asyncio.gather(
                *(table.update_row(entry, etag, version) for entry in entries)
            )

        assert results.count(True) == 1, results
        row = (await table.read_row(SILO_A)).get(SILO_A)
        assert row is not None
        assert row[0] == entries[results.index(True)]

    async def test_concurrent_updates_of_different_rows_at_one_version_exactly_one_wins(
        self, table: MembershipTable
    ) -> None:
        etags = {silo: await self._insert(table, sample_entry(silo)) for silo in (SILO_A, SILO_B,
                                                                                 SILO_C)}
        version = (await table.read_all()).version

        async with asyncio.timeout(_WAIT):
            results = await asyncio.gather(
                *(
                    table.update_row(sample_entry(silo, SiloStatus.DEAD), etag, version)
                    for silo, etag in etags.items()
                )
            )

        assert results.count(True) == 1, results
        dead = [e.silo for e in (await table.read_all()).entries() if e.status is SiloStatus.DEAD]
        assert dead == [list(etags)[results.index(True)]]

    async def test_racing_writers_win_exactly_once_per_version(
        self, table: MembershipTable
    ) -> None:
        await self._insert(table, sample_entry(SILO_A))
        start = (await table.read_all()).version.version
        wins = await self._race([table] * 5, rounds=10)

        await self._check_race(table, wins, start)

    async def test_instances_on_shared_storage_win_exactly_once_per_version(
        self, tmp_path: Path, table: MembershipTable
    ) -> None:
        if not self.shared_storage:
            pytest.skip("instances of this back end share no storage")
        await self._insert(table, sample_entry(SILO_A))
        start = (await table.read_all()).version.version
        peers = [await self.make_table(tmp_path) for _ in range(self.race_instances)]
        try:
            for peer in peers:
                await peer.open()
            wins = await self._race(peers, rounds=self.race_rounds)
        finally:
            for peer in peers:
                await peer.close()

        await self._check_race(table, wins, start)

    async def _race(self, tables: list[MembershipTable], rounds: int) -> list[int]:
        """Each writer reads, yields, and tries to add its vote to SILO_A's row, ``rounds``
        times; returns the versions the successful writes were based on."""
        wins: list[int] = []

        async def writer(table: MembershipTable, n: int) -> None:
            voter = SiloAddress("10.0.2.1", 20000 + n, 1)
            for i in range(rounds):
                data = await table.read_all()
                row = data.get(SILO_A)
                assert row is not None
                entry = dataclasses.replace(
                    row[0], suspect_votes=(SuspectVote(voter, _T0 + i),)
                )
                await asyncio.sleep(0)
                if await table.update_row(entry, row[1], data.version):
                    wins.append(data.version.version)

        async with asyncio.timeout(_WAIT * 3):
            await asyncio.gather(*(writer(t, n) for n, t in enumerate(tables)))
        return wins

    async def _check_race(self, table: MembershipTable, wins: list[int], start: int) -> None:
        end = (await table.read_all()).version.version
        assert sorted(wins) == list(range(start, end)), "one winner per version, no gaps"
        assert wins, "somebody won"

    # -- durability and lifecycle --------------------------------------------------------
    async def test_rows_survive_close_and_reopen(self, tmp_path: Path) -> None:
        if not self.durable:
            pytest.skip("the back end is not durable")
        first = await self.make_table(tmp_path)
        await first.open()
        etag = await self._insert(first, sample_entry(SILO_A))
        await first.update_i_am_alive(SILO_A, _T0 + 42.0)
        version = (await first.read_all()).version
        await first.close()

        second = await self.make_table(tmp_path)
        await second.open()
        try:
            data = await second.read_all()
            assert data.version == version
            assert data.rows == ((sample_entry(SILO_A, i_am_alive_time=_T0 + 42.0), etag),)
            assert await second.update_row(sample_entry(SILO_A, SiloStatus.DEAD), etag, version)
        finally:
            await second.close()

    async def test_open_is_idempotent(self, table: MembershipTable) -> None:
        await self._insert(table, sample_entry(SILO_A))

        await table.open()

        assert len(await table.read_all()) == 1

    async def test_close_is_idempotent_and_later_calls_raise(
        self, table: MembershipTable
    ) -> None:
        await table.close()
        await table.close()

        with pytest.raises(RuntimeError, match="closed"):
            await table.read_all()
