"""PostgresReminderTable: durable reminder rows in PostgreSQL (table ``reminders``)."""

from __future__ import annotations

import uuid
from typing import Any

from orleanspy._util.postgres import PostgresClient
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import Codec
from orleanspy.reminders.base import ReminderEntry, ReminderTable

__all__ = ["PostgresReminderTable"]

MIGRATIONS = (
    """
    CREATE TABLE reminders (
        grain_canonical TEXT NOT NULL,
        name            TEXT NOT NULL,
        grain_type      TEXT NOT NULL,
        grain_key       BYTEA NOT NULL,
        start_at        DOUBLE PRECISION NOT NULL,
        period          DOUBLE PRECISION NOT NULL,
        etag            TEXT NOT NULL,
        PRIMARY KEY (grain_canonical, name)
    )
    """,
)

_COLUMNS = "grain_type, grain_key, name, start_at, period, etag"
_SELECT_ALL = f"SELECT {_COLUMNS} FROM reminders ORDER BY grain_canonical, name"
_SELECT_ROWS = f"SELECT {_COLUMNS} FROM reminders WHERE grain_canonical = $1 ORDER BY name"
_SELECT_ROW = f"SELECT {_COLUMNS} FROM reminders WHERE grain_canonical = $1 AND name = $2"
_UPSERT = (
    "INSERT INTO reminders "
    "(grain_type, grain_key, grain_canonical, name, start_at, period, etag) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) "
    "ON CONFLICT (grain_canonical, name) DO UPDATE SET "
    "grain_type = excluded.grain_type, grain_key = excluded.grain_key, "
    "start_at = excluded.start_at, period = excluded.period, etag = excluded.etag"
)
_DELETE_ANY = "DELETE FROM reminders WHERE grain_canonical = $1 AND name = $2"
_DELETE_ETAG = "DELETE FROM reminders WHERE grain_canonical = $1 AND name = $2 AND etag = $3"


class PostgresReminderTable(ReminderTable):
    """Reminder rows in the PostgreSQL database of ``url`` (``postgresql://…/db?schema=S``).

    The grain key is stored msgpack-encoded (``Codec``), so it decodes to exactly the key
    written. Every statement commits before the call returns; reads and upserts (the same
    row and etag if sent twice) are retried on a dropped connection, a removal is not.
    """

    def __init__(self, url: str) -> None:
        self.client = PostgresClient(url, "reminders", MIGRATIONS, max_size=4)
        self._codec = Codec()

    def __repr__(self) -> str:
        return f"PostgresReminderTable({self.client!r})"

    async def open(self) -> None:
        await self.client.open()

    async def close(self) -> None:
        await self.client.close()

    def _entry(self, row: Any) -> ReminderEntry:
        grain_type, grain_key, name, start_at, period, etag = row
        return ReminderEntry(GrainId(grain_type, self._codec.unpackb(grain_key)), name,
                             float(start_at), float(period), etag)

    async def read_all(self) -> list[ReminderEntry]:
        rows = await self.client.run("read reminders", lambda c: c.fetch(_SELECT_ALL))
        return [self._entry(row) for row in rows]

    async def read_rows(self, grain_id: GrainId) -> list[ReminderEntry]:
        key = grain_id.canonical()
        rows = await self.client.run("read reminders", lambda c: c.fetch(_SELECT_ROWS, key))
        return [self._entry(row) for row in rows]

    async def read_row(self, grain_id: GrainId, name: str) -> ReminderEntry | None:
        key = grain_id.canonical()
        row = await self.client.run("read a reminder",
                                    lambda c: c.fetchrow(_SELECT_ROW, key, name))
        return None if row is None else self._entry(row)

    async def upsert(self, entry: ReminderEntry) -> str:
        grain_id = entry.grain_id
        etag = uuid.uuid4().hex
        args = (grain_id.type_name, self._codec.packb(grain_id.key), grain_id.canonical(),
                entry.name, float(entry.start_at), float(entry.period), etag)
        await self.client.run("write a reminder", lambda c: c.execute(_UPSERT, *args))
        return etag

    async def remove(self, grain_id: GrainId, name: str, etag: str | None) -> bool:
        key = grain_id.canonical()
        # Not sent again on a lost connection: a second delete after a first one committed
        # would report "nothing removed"; the caller gets the StorageError instead.
        if etag is None:
            status = await self.client.run(
                "remove a reminder", lambda c: c.execute(_DELETE_ANY, key, name),
                idempotent=False)
        else:
            status = await self.client.run(
                "remove a reminder", lambda c: c.execute(_DELETE_ETAG, key, name, etag),
                idempotent=False)
        return bool(int(str(status).rsplit(" ", 1)[-1]))
