"""MemoryReminderTable: reminder rows in a dict, for tests and single-process development."""

from __future__ import annotations

import dataclasses
import uuid

from orleanspy.ids import GrainId
from orleanspy.reminders.base import ReminderEntry, ReminderTable

__all__ = ["MemoryReminderTable"]


class MemoryReminderTable(ReminderTable):
    """Keeps reminder rows in process memory; nothing survives the process.

    Rows are keyed by ``grain_id.canonical()`` and the reminder name, as in the durable
    tables. Etags are fresh uuid4 hex strings; times are stored as floats. Rows come back
    ordered by grain and name.
    """

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, ReminderEntry]] = {}

    async def read_all(self) -> list[ReminderEntry]:
        return [
            row
            for canonical in sorted(self._rows)
            for _, row in sorted(self._rows[canonical].items())
        ]

    async def read_rows(self, grain_id: GrainId) -> list[ReminderEntry]:
        rows = self._rows.get(grain_id.canonical(), {})
        return [row for _, row in sorted(rows.items())]

    async def read_row(self, grain_id: GrainId, name: str) -> ReminderEntry | None:
        return self._rows.get(grain_id.canonical(), {}).get(name)

    async def upsert(self, entry: ReminderEntry) -> str:
        etag = uuid.uuid4().hex
        stored = dataclasses.replace(
            entry, start_at=float(entry.start_at), period=float(entry.period), etag=etag
        )
        self._rows.setdefault(entry.grain_id.canonical(), {})[entry.name] = stored
        return etag

    async def remove(self, grain_id: GrainId, name: str, etag: str | None) -> bool:
        canonical = grain_id.canonical()
        rows = self._rows.get(canonical)
        if rows is None:
            return False
        row = rows.get(name)
        if row is None or (etag is not None and row.etag != etag):
            return False
        del rows[name]
        if not rows:
            del self._rows[canonical]
        return True
