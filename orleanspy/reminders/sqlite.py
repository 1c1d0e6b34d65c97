"""SqliteReminderTable: durable reminder rows in a SQLite file (WAL mode)."""

from __future__ import annotations

import uuid
from typing import Any

from orleanspy._util.sqlite import SqliteDatabase
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import Codec
from orleanspy.reminders.base import ReminderEntry, ReminderTable

__all__ = ["SqliteReminderTable"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS reminders (
    grain_type      TEXT NOT NULL,
    grain_key       BLOB NOT NULL,
    grain_canonical TEXT NOT NULL,
    name            TEXT NOT NULL,
    start_at        REAL NOT NULL,
    period          REAL NOT NULL,
    etag            TEXT NOT NULL,
    PRIMARY KEY (grain_canonical, name)
)
"""

_COLUMNS = "grain_type, grain_key, name, start_at, period, etag"
_SELECT_ALL = f"SELECT {_COLUMNS} FROM reminders ORDER BY grain_canonical, name"
_SELECT_ROWS = f"SELECT {_COLUMNS} FROM reminders WHERE grain_canonical = ? ORDER BY name"
_SELECT_ROW = f"SELECT {_COLUMNS} FROM reminders WHERE grain_canonical = ? AND name = ?"
_UPSERT = (
    "INSERT INTO reminders "
    "(grain_type, grain_key, grain_canonical, name, start_at, period, etag) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (grain_canonical, name) DO UPDATE SET "
    "grain_type = excluded.grain_type, grain_key = excluded.grain_key, "
    "start_at = excluded.start_at, period = excluded.period, etag = excluded.etag"
)
_DELETE_ANY = "DELETE FROM reminders WHERE grain_canonical = ? AND name = ?"
_DELETE_ETAG = "DELETE FROM reminders WHERE grain_canonical = ? AND name = ? AND etag = ?"


class SqliteReminderTable(ReminderTable):
    """Reminder rows in table ``reminders`` of the file at ``path``; ``":memory:"`` works.

    The grain key is stored msgpack-encoded (``Codec``) so that it decodes to exactly the key
    that was written (``1`` stays an int, tuples stay tuples). Each statement commits before
    the call returns. Operations before ``open`` open the table; after ``close`` they raise
    ``RuntimeError``.
    """

    __slots__ = ("_codec", "_db", "_opened")

    def __init__(self, path: str) -> None:
        self._db = SqliteDatabase(str(path))
        self._codec = Codec()
        self._opened = False

    def __repr__(self) -> str:
        return f"SqliteReminderTable({self._db.path!r})"

    @property
    def path(self) -> str:
        return self._db.path

    async def open(self) -> None:
        await self._db.execute(_SCHEMA)
        self._opened = True

    async def close(self) -> None:
        await self._db.close()

    def _entry(self, row: tuple[Any, ...]) -> ReminderEntry:
        grain_type, grain_key, name, start_at, period, etag = row
        return ReminderEntry(
            GrainId(grain_type, self._codec.unpackb(grain_key)),
            name,
            float(start_at),
            float(period),
            etag,
        )

    async def read_all(self) -> list[ReminderEntry]:
        if not self._opened:
            await self.open()
        return [self._entry(row) for row in await self._db.fetchall(_SELECT_ALL)]

    async def read_rows(self, grain_id: GrainId) -> list[ReminderEntry]:
        if not self._opened:
            await self.open()
        rows = await self._db.fetchall(_SELECT_ROWS, (grain_id.canonical(),))
        return [self._entry(row) for row in rows]

    async def read_row(self, grain_id: GrainId, name: str) -> ReminderEntry | None:
        if not self._opened:
            await self.open()
        row = await self._db.fetchone(_SELECT_ROW, (grain_id.canonical(), name))
        return None if row is None else self._entry(row)

    async def upsert(self, entry: ReminderEntry) -> str:
        if not self._opened:
            await self.open()
        grain_id = entry.grain_id
        etag = uuid.uuid4().hex
        await self._db.execute(
            _UPSERT,
            (
                grain_id.type_name,
                self._codec.packb(grain_id.key),
                grain_id.canonical(),
                entry.name,
                float(entry.start_at),
                float(entry.period),
                etag,
            ),
        )
        return etag

    async def remove(self, grain_id: GrainId, name: str, etag: str | None) -> bool:
        if not self._opened:
            await self.open()
        if etag is None:
            deleted = await self._db.execute(_DELETE_ANY, (grain_id.canonical(), name))
        else:
            deleted = await self._db.execute(_DELETE_ETAG, (grain_id.canonical(), name, etag))
        return deleted > 0
