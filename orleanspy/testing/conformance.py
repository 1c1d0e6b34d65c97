"""Conformance suites: pytest test classes that check a provider keeps its contract.

Subclass a suite in a test module and implement its factory hook; pytest then runs every
clause of the contract (``orleanspy.storage.base``, ``orleanspy.reminders.base``) against
your provider::

    from orleanspy.testing.conformance import GrainStorageConformance

    class TestMyStorage(GrainStorageConformance):
        async def make_storage(self, tmp_path: Path) -> GrainStorage:
            return MyStorage(str(tmp_path / "state.db"))

The hook returns a new, unopened provider; the suite opens it before each test and closes
it afterwards. The suites need pytest and pytest-asyncio (any ``asyncio_mode``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from orleanspy.errors import InconsistentStateError
from orleanspy.ids import GrainId, GrainKey
from orleanspy.reminders.base import ReminderEntry, ReminderTable
from orleanspy.storage.base import GrainStorage, StoredState

__all__ = ["DISTINCT_KEYS", "GrainStorageConformance", "ReminderTableConformance", "key_shape"]

#: Grain keys that must all name different records (``1`` is not ``"1"``).
DISTINCT_KEYS: tuple[GrainKey, ...] = (
    1,
    "1",
    0,
    -1,
    2**63 - 1,
    "",
    "i:1",
    "s:1",
    "a,1",
    "(a,1)",
    "a)",
    "a\\",
    "ключ ✓",
    ("a", 1),
    ("a", "1"),
    (("a", 1),),
    ("a", (1,)),
    (),
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "12345678-1234-5678-1234-567812345678",
)

_MIB = 1 << 20


def key_shape(key: Any) -> Any:
    """A key together with the type of each of its parts, for exact round-trip checks."""
    if isinstance(key, (tuple, list)):
        return (type(key), tuple(key_shape(k) for k in key))
    return (type(key), key)


def _blob(size: int) -> bytes:
    """``size`` bytes using every byte value, NUL included, in a non-repeating-looking order."""
    pattern = bytes((i * 167 + 13) % 256 for i in range(251))
    return (pattern * (size // len(pattern) + 1))[:size]


class GrainStorageConformance:
    """Every clause of the ``GrainStorage`` contract. Subclass and implement ``make_storage``."""

    pytestmark = pytest.mark.asyncio

    grain_id = GrainId("ConformanceGrain", "key-1")
    state_name = "state"

    async def make_storage(self, tmp_path: Path) -> GrainStorage:
        """Return a new, unopened provider (``tmp_path`` is a fresh directory for files)."""
        raise NotImplementedError("implement make_storage(tmp_path) in the test class")

    @pytest_asyncio.fixture
    async def storage(self, tmp_path: Path) -> AsyncIterator[GrainStorage]:
        provider = await self.make_storage(tmp_path)
        await provider.open()
        try:
            yield provider
        finally:
            await provider.close()

    # -- read ----------------------------------------------------------------------------
    async def test_read_missing_record_returns_none(self, storage: GrainStorage) -> None:
        assert await storage.read(self.grain_id, self.state_name) is None

    # -- write ---------------------------------------------------------------------------
    async def test_write_with_none_etag_creates_record(self, storage: GrainStorage) -> None:
        etag = await storage.write(self.grain_id, self.state_name, b"v1", None)

        assert isinstance(etag, str)
        assert etag
        stored = await storage.read(self.grain_id, self.state_name)
        assert stored == StoredState(b"v1", etag)
        assert type(stored.data) is bytes

    async def test_write_with_none_etag_on_existing_record_raises_with_both_etags(
        self, storage: GrainStorage
    ) -> None:
        etag = await storage.write(self.grain_id, self.state_name, b"v1", None)

        with pytest.raises(InconsistentStateError) as info:
            await storage.write(self.grain_id, self.state_name, b"v2", None)

        assert info.value.stored_etag == etag
        assert info.value.current_etag is None
        assert await storage.read(self.grain_id, self.state_name) == StoredState(b"v1", etag)

    async def test_write_with_current_etag_replaces_record(self, storage: GrainStorage) -> None:
        etag1 = await storage.write(self.grain_id, self.state_name, b"v1", None)

        etag2 = await storage.write(self.grain_id, self.state_name, b"v2", etag1)

        assert etag2 != etag1
        assert await storage.read(self.grain_id, self.state_name) == StoredState(b"v2", etag2)

    async def test_write_with_stale_etag_raises_and_keeps_record(
        self, storage: GrainStorage
    ) -> None:
        etag1 = await storage.write(self.grain_id, self.state_name, b"v1", None)
        etag2 = await storage.write(self.grain_id, self.state_name, b"v2", etag1)

        with pytest.raises(InconsistentStateError) as info:
            await storage.write(self.grain_id, self.state_name, b"v3", etag1)

        assert info.value.stored_etag == etag2
        assert info.value.current_etag == etag1
        assert await storage.read(self.grain_id, self.state_name) == StoredState(b"v2", etag2)

    async def test_write_with_etag_on_missing_record_raises(self, storage: GrainStorage) -> None:
        with pytest.raises(InconsistentStateError) as info:
            await storage.write(self.grain_id, self.state_name, b"v1", "no-such-etag")

        assert info.value.stored_etag is None
        assert info.value.current_etag == "no-such-etag"
        assert await storage.read(self.grain_id, self.state_name) is None

    async def test_write_returns_new_etag_every_time(self, storage: GrainStorage) -> None:
        seen: list[str] = []
        etag: str | None = None
        for i in range(5):
            etag = await storage.write(self.grain_id, self.state_name, b"v%d" % i, etag)
            seen.append(etag)
        await storage.clear(self.grain_id, self.state_name, etag)
        seen.append(await storage.write(self.grain_id, self.state_name, b"again", None))

        assert len(set(seen)) == len(seen)

    async def test_write_of_same_data_still_changes_etag(self, storage: GrainStorage) -> None:
        etag1 = await storage.write(self.grain_id, self.state_name, b"same", None)

        etag2 = await storage.write(self.grain_id, self.state_name, b"same", etag1)

        assert etag2 != etag1

    async def test_write_concurrent_with_same_etag_exactly_one_wins(
        self, storage: GrainStorage
    ) -> None:
        base = await storage.write(self.grain_id, self.state_name, b"base", None)

        results = await asyncio.gather(
            storage.write(self.grain_id, self.state_name, b"A", base),
            storage.write(self.grain_id, self.state_name, b"B", base),
            return_exceptions=True,
        )

        winners = [r for r in results if isinstance(r, str)]
        losers = [r for r in results if isinstance(r, InconsistentStateError)]
        assert len(winners) == 1, results
        assert len(losers) == 1, results
        stored = await storage.read(self.grain_id, self.state_name)
        assert stored is not None
        assert stored.etag == winners[0]
        assert stored.data == (b"A" if isinstance(results[0], str) else b"B")
        assert losers[0].stored_etag == winners[0]
        assert losers[0].current_etag == base

    async def test_write_concurrent_creates_exactly_one_wins(self, storage: GrainStorage) -> None:
        results = await asyncio.gather(
            *(storage.write(self.grain_id, self.state_name, b"%d" % i, None) for i in range(4)),
            return_exceptions=True,
        )

        winners = [r for r in results if isinstance(r, str)]
        losers = [r for r in results if isinstance(r, InconsistentStateError)]
        assert len(winners) == 1, results
        assert len(losers) == 3, results
        stored = await storage.read(self.grain_id, self.state_name)
        assert stored is not None
        assert stored.etag == winners[0]

    # -- clear ---------------------------------------------------------------------------
    async def test_clear_with_current_etag_removes_record(self, storage: GrainStorage) -> None:
        etag = await storage.write(self.grain_id, self.state_name, b"v1", None)

        await storage.clear(self.grain_id, self.state_name, etag)

        assert await storage.read(self.grain_id, self.state_name) is None

    async def test_clear_with_stale_etag_raises_and_keeps_record(
        self, storage: GrainStorage
    ) -> None:
        etag1 = await storage.write(self.grain_id, self.state_name, b"v1", None)
        etag2 = await storage.write(self.grain_id, self.state_name, b"v2", etag1)

        with pytest.raises(InconsistentStateError) as info:
            await storage.clear(self.grain_id, self.state_name, etag1)

        assert info.value.stored_etag == etag2
        assert info.value.current_etag == etag1
        assert await storage.read(self.grain_id, self.state_name) == StoredState(b"v2", etag2)

    async def test_clear_with_none_etag_on_existing_record_raises(
        self, storage: GrainStorage
    ) -> None:
        etag = await storage.write(self.grain_id, self.state_name, b"v1", None)

        with pytest.raises(InconsistentStateError) as info:
            await storage.clear(self.grain_id, self.state_name, None)

        assert info.value.stored_etag == etag
        assert info.value.current_etag is None
        assert await storage.read(self.grain_id, self.state_name) == StoredState(b"v1", etag)

    async def test_clear_missing_record_with_none_etag_succeeds(
        self, storage: GrainStorage
    ) -> None:
        await storage.clear(self.grain_id, self.state_name, None)

        assert await storage.read(self.grain_id, self.state_name) is None

    async def test_clear_missing_record_with_etag_raises(self, storage: GrainStorage) -> None:
        with pytest.raises(InconsistentStateError) as info:
            await storage.clear(self.grain_id, self.state_name, "no-such-etag")

        assert info.value.stored_etag is None
        assert info.value.current_etag == "no-such-etag"

    async def test_clear_then_write_with_none_etag_creates_record(
        self, storage: GrainStorage
    ) -> None:
        etag = await storage.write(self.grain_id, self.state_name, b"v1", None)
        await storage.clear(self.grain_id, self.state_name, etag)

        new_etag = await storage.write(self.grain_id, self.state_name, b"v2", None)

        assert await storage.read(self.grain_id, self.state_name) == StoredState(b"v2", new_etag)

    async def test_write_with_etag_from_before_clear_raises(self, storage: GrainStorage) -> None:
        etag = await storage.write(self.grain_id, self.state_name, b"v1", None)
        await storage.clear(self.grain_id, self.state_name, etag)

        with pytest.raises(InconsistentStateError):
            await storage.write(self.grain_id, self.state_name, b"v2", etag)

    # -- identity ------------------------------------------------------------------------
    async def test_keys_of_different_types_are_distinct_records(
        self, storage: GrainStorage
    ) -> None:
        grain_ids = [GrainId("ConformanceGrain", key) for key in DISTINCT_KEYS]
        etags = [
            await storage.write(gid, self.state_name, repr(key_shape(gid.key)).encode(), None)
            for gid in grain_ids
        ]

        for gid, etag in zip(grain_ids, etags, strict=True):
            stored = await storage.read(gid, self.state_name)
            assert stored == StoredState(repr(key_shape(gid.key)).encode(), etag), gid

    async def test_type_names_are_distinct_records(self, storage: GrainStorage) -> None:
        first = GrainId("FirstGrain", 1)
        second = GrainId("SecondGrain", 1)
        await storage.write(first, self.state_name, b"first", None)

        assert await storage.read(second, self.state_name) is None
        etag = await storage.write(second, self.state_name, b"second", None)
        assert await storage.read(second, self.state_name) == StoredState(b"second", etag)

    async def test_state_names_are_distinct_records(self, storage: GrainStorage) -> None:
        etag_a = await storage.write(self.grain_id, "a", b"A", None)
        etag_b = await storage.write(self.grain_id, "b", b"B", None)

        await storage.clear(self.grain_id, "a", etag_a)

        assert await storage.read(self.grain_id, "a") is None
        assert await storage.read(self.grain_id, "b") == StoredState(b"B", etag_b)

    async def test_equal_grain_ids_name_the_same_record(self, storage: GrainStorage) -> None:
        key = uuid.UUID("12345678-1234-5678-1234-567812345678")
        etag = await storage.write(GrainId("ConformanceGrain", ("k", key)), "s", b"x", None)

        stored = await storage.read(GrainId("ConformanceGrain", ("k", uuid.UUID(str(key)))), "s")

        assert stored == StoredState(b"x", etag)

    # -- data ----------------------------------------------------------------------------
    async def test_data_large_blob_round_trips(self, storage: GrainStorage) -> None:
        data = _blob(_MIB)

        etag = await storage.write(self.grain_id, self.state_name, data, None)

        assert await storage.read(self.grain_id, self.state_name) == StoredState(data, etag)

    async def test_data_empty_blob_round_trips(self, storage: GrainStorage) -> None:
        etag = await storage.write(self.grain_id, self.state_name, b"", None)

        assert await storage.read(self.grain_id, self.state_name) == StoredState(b"", etag)

    async def test_data_with_every_byte_value_round_trips(self, storage: GrainStorage) -> None:
        data = bytes(range(256)) * 2

        etag = await storage.write(self.grain_id, self.state_name, data, None)

        assert await storage.read(self.grain_id, self.state_name) == StoredState(data, etag)

    # -- lifecycle -----------------------------------------------------------------------
    async def test_close_is_idempotent(self, storage: GrainStorage) -> None:
        await storage.close()
        await storage.close()


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
