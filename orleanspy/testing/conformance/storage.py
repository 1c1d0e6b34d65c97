"""``GrainStorageConformance``: every clause of the ``GrainStorage`` contract
(``orleanspy.storage.base``) as a pytest test class; see the package's docstring for use.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from orleanspy.errors import InconsistentStateError
from orleanspy.ids import GrainId
from orleanspy.storage.base import GrainStorage, StoredState
from orleanspy.testing.conformance.keys import DISTINCT_KEYS, key_shape

__all__ = ["GrainStorageConformance"]

_MIB = 1 << 20


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

