"""``ReminderTableConformance``: every clause of the ``ReminderTable`` contract
(``orleanspy.reminders.base``) as a pytest test class; see the package's docstring for use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from orleanspy.ids import GrainId
from orleanspy.reminders.base import ReminderEntry, ReminderTable
from orleanspy.testing.conformance.keys import DISTINCT_KEYS, key_shape

__all__ = ["ReminderTableConformance"]


class ReminderTableConformance:
    """Every clause of the ``ReminderTable`` contract. Subclass and implement ``make_table``."""

    pytestmark = pytest.mark.asyncio

    grain_id = GrainId("ConformanceGrain", "key-1")

    async def make_table(self, tmp_path: Path) -> ReminderTable:
        """Return a new, unopened table (``tmp_path`` is a fresh directory for files)."""
        raise NotImplementedError("implement make_table(tmp_path) in the test class")

    @pytest_asyncio.fixture
    async def table(self, tmp_path: Path) -> AsyncIterator[ReminderTable]:
        provider = await self.make_table(tmp_path)
        await provider.open()
        try:
            yield provider
        finally:
            await provider.close()

    def entry(
        self,
        name: str = "tick",
        grain_id: GrainId | None = None,
        start_at: float = 1_700_000_000.25,
        period: float = 60.0,
    ) -> ReminderEntry:
        return ReminderEntry(grain_id or self.grain_id, name, start_at, period)

    # -- read ----------------------------------------------------------------------------
    async def test_read_row_missing_returns_none(self, table: ReminderTable) -> None:
        assert await table.read_row(self.grain_id, "tick") is None

    async def test_read_rows_of_grain_without_rows_returns_empty_list(
        self, table: ReminderTable
    ) -> None:
        assert await table.read_rows(self.grain_id) == []

    async def test_read_all_of_empty_table_returns_empty_list(self, table: ReminderTable) -> None:
        assert await table.read_all() == []

    async def test_read_rows_returns_only_that_grains_rows(self, table: ReminderTable) -> None:
        other = GrainId("ConformanceGrain", "key-2")
        etag_a = await table.upsert(self.entry("a"))
        etag_b = await table.upsert(self.entry("b", period=5.0))
        await table.upsert(self.entry("a", grain_id=other))

        rows = await table.read_rows(self.grain_id)

        assert sorted(rows, key=lambda e: e.name) == [
            ReminderEntry(self.grain_id, "a", 1_700_000_000.25, 60.0, etag_a),
            ReminderEntry(self.grain_id, "b", 1_700_000_000.25, 5.0, etag_b),
        ]

    async def test_read_all_returns_every_row(self, table: ReminderTable) -> None:
        other = GrainId("OtherGrain", 7)
        expected: set[ReminderEntry] = set()
        for entry in (self.entry("a"), self.entry("b"), self.entry("a", grain_id=other)):
            etag = await table.upsert(entry)
            expected.add(ReminderEntry(entry.grain_id, entry.name, entry.start_at, 60.0, etag))

        rows = await table.read_all()

        assert len(rows) == 3
        assert set(rows) == expected

    # -- upsert --------------------------------------------------------------------------
    async def test_upsert_inserts_row_with_returned_etag(self, table: ReminderTable) -> None:
        entry = self.entry()

        etag = await table.upsert(entry)

        assert isinstance(etag, str)
        assert etag
        assert await table.read_row(self.grain_id, "tick") == ReminderEntry(
            self.grain_id, "tick", entry.start_at, entry.period, etag
        )

    async def test_upsert_replaces_row_and_changes_etag(self, table: ReminderTable) -> None:
        etag1 = await table.upsert(self.entry(start_at=100.0, period=10.0))

        etag2 = await table.upsert(self.entry(start_at=200.5, period=20.5))

        assert etag2 != etag1
        assert await table.read_row(self.grain_id, "tick") == ReminderEntry(
            self.grain_id, "tick", 200.5, 20.5, etag2
        )
        assert len(await table.read_rows(self.grain_id)) == 1

    async def test_upsert_ignores_etag_of_given_entry(self, table: ReminderTable) -> None:
        given = ReminderEntry(self.grain_id, "tick", 1.0, 2.0, etag="caller-made-this-up")

        etag = await table.upsert(given)

        assert etag != "caller-made-this-up"
        row = await table.read_row(self.grain_id, "tick")
        assert row is not None
        assert row.etag == etag

    async def test_upsert_etag_differs_from_every_earlier_etag(self, table: ReminderTable) -> None:
        seen = [await table.upsert(self.entry(period=float(i + 1))) for i in range(5)]
        assert await table.remove(self.grain_id, "tick", seen[-1])
        seen.append(await table.upsert(self.entry()))

        assert len(set(seen)) == len(seen)

    async def test_upsert_concurrent_returns_distinct_etags(self, table: ReminderTable) -> None:
        etags = await asyncio.gather(
            *(table.upsert(self.entry(period=float(i + 1))) for i in range(4))
        )

        assert len(set(etags)) == 4
        row = await table.read_row(self.grain_id, "tick")
        assert row is not None
        assert row.etag in etags
        assert row.period == float(etags.index(row.etag) + 1)

    async def test_upsert_times_round_trip_exactly(self, table: ReminderTable) -> None:
        entry = self.entry(start_at=1_712_345_678.123456, period=0.001)

        etag = await table.upsert(entry)

        row = await table.read_row(self.grain_id, "tick")
        assert row == ReminderEntry(self.grain_id, "tick", 1_712_345_678.123456, 0.001, etag)
        assert type(row.start_at) is float
        assert type(row.period) is float

    # -- remove --------------------------------------------------------------------------
    async def test_remove_with_current_etag_deletes_row(self, table: ReminderTable) -> None:
        etag = await table.upsert(self.entry())

        assert await table.remove(self.grain_id, "tick", etag) is True

        assert await table.read_row(self.grain_id, "tick") is None
        assert await table.read_rows(self.grain_id) == []
        assert await table.read_all() == []

    async def test_remove_with_stale_etag_keeps_row(self, table: ReminderTable) -> None:
        etag1 = await table.upsert(self.entry())
        etag2 = await table.upsert(self.entry())

        assert await table.remove(self.grain_id, "tick", etag1) is False

        row = await table.read_row(self.grain_id, "tick")
        assert row is not None
        assert row.etag == etag2

    async def test_remove_with_none_etag_deletes_row(self, table: ReminderTable) -> None:
        await table.upsert(self.entry())

        assert await table.remove(self.grain_id, "tick", None) is True

        assert await table.read_row(self.grain_id, "tick") is None

    async def test_remove_missing_row_returns_false(self, table: ReminderTable) -> None:
        assert await table.remove(self.grain_id, "tick", None) is False
        assert await table.remove(self.grain_id, "tick", "no-such-etag") is False

    async def test_remove_deletes_only_that_row(self, table: ReminderTable) -> None:
        etag_a = await table.upsert(self.entry("a"))
        etag_b = await table.upsert(self.entry("b"))

        assert await table.remove(self.grain_id, "a", etag_a) is True

        rows = await table.read_rows(self.grain_id)
        assert [(row.name, row.etag) for row in rows] == [("b", etag_b)]

    async def test_remove_concurrent_with_same_etag_exactly_one_wins(
        self, table: ReminderTable
    ) -> None:
        etag = await table.upsert(self.entry())

        results = await asyncio.gather(
            table.remove(self.grain_id, "tick", etag),
            table.remove(self.grain_id, "tick", etag),
        )

        assert sorted(results) == [False, True]
        assert await table.read_row(self.grain_id, "tick") is None

    # -- identity ------------------------------------------------------------------------
    async def test_grain_keys_round_trip_exactly(self, table: ReminderTable) -> None:
        etags: dict[str, str] = {}
        for key in DISTINCT_KEYS:
            etags[repr(key_shape(key))] = await table.upsert(
                self.entry(grain_id=GrainId("ConformanceGrain", key))
            )

        rows = await table.read_all()

        assert len(rows) == len(DISTINCT_KEYS)
        assert {repr(key_shape(row.grain_id.key)): row.etag for row in rows} == etags
        for key in DISTINCT_KEYS:
            gid = GrainId("ConformanceGrain", key)
            (row,) = await table.read_rows(gid)
            assert key_shape(row.grain_id.key) == key_shape(key)
            assert row.grain_id == gid
            assert row.grain_id.canonical() == gid.canonical()
            assert await table.read_row(gid, "tick") == row

    async def test_type_names_are_distinct_rows(self, table: ReminderTable) -> None:
        first = GrainId("FirstGrain", 1)
        second = GrainId("SecondGrain", 1)
        await table.upsert(self.entry(grain_id=first))

        assert await table.read_rows(second) == []
        assert await table.remove(second, "tick", None) is False
        (row,) = await table.read_all()
        assert row.grain_id == first
        assert row.grain_id.type_name == "FirstGrain"

    # -- lifecycle -----------------------------------------------------------------------
    async def test_close_is_idempotent(self, table: ReminderTable) -> None:
        await table.close()
        await table.close()
