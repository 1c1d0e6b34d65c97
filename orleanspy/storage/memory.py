"""MemoryGrainStorage: grain state in a dict, for tests and single-process development."""

from __future__ import annotations

import uuid

from orleanspy.errors import InconsistentStateError
from orleanspy.ids import GrainId
from orleanspy.storage.base import GrainStorage, StoredState

__all__ = ["MemoryGrainStorage"]


class MemoryGrainStorage(GrainStorage):
    """Keeps every record in process memory; nothing survives the process.

    Records are keyed by ``grain_id.canonical()`` and the state name, exactly as the durable
    providers key them. Etags are fresh uuid4 hex strings. Every operation completes without
    awaiting, so the etag check and the write are atomic with respect to other tasks.
    """

    __slots__ = ("_records",)

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], StoredState] = {}

    async def read(self, grain_id: GrainId, state_name: str) -> StoredState | None:
        return self._records.get((grain_id.canonical(), state_name))

    async def write(self, grain_id: GrainId, state_name: str, data: bytes, etag: str | None) -> str:
        key = (grain_id.canonical(), state_name)
        self._check_etag(key, grain_id, state_name, etag, "write")
        new_etag = uuid.uuid4().hex
        self._records[key] = StoredState(bytes(data), new_etag)
        return new_etag

    async def clear(self, grain_id: GrainId, state_name: str, etag: str | None) -> None:
        key = (grain_id.canonical(), state_name)
        self._check_etag(key, grain_id, state_name, etag, "clear")
        self._records.pop(key, None)

    def _check_etag(
        self,
        key: tuple[str, str],
        grain_id: GrainId,
        state_name: str,
        etag: str | None,
        action: str,
    ) -> None:
        current = self._records.get(key)
        stored_etag = None if current is None else current.etag
        if stored_etag != etag:
            raise InconsistentStateError(
                f"cannot {action} state {state_name!r} of {grain_id}: stored etag is "
                f"{stored_etag!r}, the caller's etag is {etag!r}",
                stored_etag,
                etag,
            )
