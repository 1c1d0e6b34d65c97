"""The membership suite's clauses on single rows: read, insert, update, I-am-alive, cleanup
and delete, each a compare-and-swap on the row's etag and the table version.
"""

from __future__ import annotations

from orleanspy.cluster.membership.entry import SiloStatus, SuspectVote, TableVersion
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.ids import SiloAddress
from orleanspy.testing.membership_conformance.kit import (
    SILO_A,
    SILO_B,
    SILO_C,
    T0,
    MembershipTableKit,
    sample_entry,
)

__all__ = ["RowClauses"]


class RowClauses(MembershipTableKit):
    """Reading and writing rows, one writer at a time."""

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
        votes = (SuspectVote(SILO_B, T0 + 1.25), SuspectVote(SILO_C, T0 + 2.000001))
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
            SILO_A, SiloStatus.ACTIVE, suspect_votes=(SuspectVote(SILO_B, T0 + 3),)
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
            entry = sample_entry(SILO_A, i_am_alive_time=T0 + i)
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

        assert await table.update_i_am_alive(SILO_A, T0 + 99.75) is True

        after = await table.read_all()
        assert after.version == before.version
        assert after.rows == ((sample_entry(SILO_A, i_am_alive_time=T0 + 99.75), etag),)

    async def test_update_i_am_alive_does_not_break_a_pending_write(
        self, table: MembershipTable
    ) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        await self._insert(table, sample_entry(SILO_B))
        read = await table.read_all()

        await table.update_i_am_alive(SILO_A, T0 + 10)
        await table.update_i_am_alive(SILO_B, T0 + 10)
        written = await table.update_row(sample_entry(SILO_A, SiloStatus.DEAD), etag, read.version)

        assert written is True
        row = (await table.read_row(SILO_A)).get(SILO_A)
        assert row is not None
        assert row[0].status is SiloStatus.DEAD

    async def test_update_i_am_alive_of_missing_silo_returns_false(
        self, table: MembershipTable
    ) -> None:
        assert await table.update_i_am_alive(SILO_A, T0) is False

        assert (await table.read_all()).rows == ()

    # -- cleanup and delete --------------------------------------------------------------
    async def test_cleanup_defunct_deletes_only_dead_and_stopped_rows_older_than_the_cutoff(
        self, table: MembershipTable
    ) -> None:
        old_dead = SiloAddress("10.0.0.9", 1, 1)
        old_active = SiloAddress("10.0.0.9", 2, 1)
        new_dead = SiloAddress("10.0.0.9", 3, 1)
        old_stopped = SiloAddress("10.0.0.9", 4, 1)
        new_stopped = SiloAddress("10.0.0.9", 5, 1)
        old_leaving = SiloAddress("10.0.0.9", 6, 1)
        await self._insert(table, sample_entry(old_dead, SiloStatus.DEAD, i_am_alive_time=100.0))
        await self._insert(table, sample_entry(old_active, i_am_alive_time=100.0))
        await self._insert(table, sample_entry(new_dead, SiloStatus.DEAD, i_am_alive_time=500.0))
        await self._insert(table, sample_entry(old_stopped, SiloStatus.STOPPED,
                                               i_am_alive_time=100.0))
        await self._insert(table, sample_entry(new_stopped, SiloStatus.STOPPED,
                                               i_am_alive_time=500.0))
        await self._insert(table, sample_entry(old_leaving, SiloStatus.SHUTTING_DOWN,
                                               i_am_alive_time=100.0))
        before = (await table.read_all()).version

        removed = await table.cleanup_defunct(before=200.0)

        assert removed == 2
        data = await table.read_all()
        assert {e.silo for e in data.entries()} == {old_active, new_dead, new_stopped,
                                                    old_leaving}
        assert {e.silo: e.status for e in data.entries()}[new_stopped] is SiloStatus.STOPPED
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
