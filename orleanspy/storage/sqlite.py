"""SqliteGrainStorage: grain state in a SQLite file (WAL mode), etag-checked, checksummed.

Each row carries a BLAKE2b checksum (16 bytes) of its value, written with it and checked on
every read: a value changed on disk outside orleanspy, or damaged, raises
``StorageCorruptionError`` instead of being served. Rows written without one (an older file)
are read as they are and get one on their next write.
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid

from orleanspy._util.sqlite import SqliteDatabase, check_columns
from orleanspy.errors import InconsistentStateError, StorageCorruptionError
from orleanspy.ids import GrainId
from orleanspy.storage.base import GrainStorage, StoredState

__all__ = ["SqliteGrainStorage"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS grain_state (
    grain_id   TEXT NOT NULL,
    state_name TEXT NOT NULL,
    data       BLOB NOT NULL,
    etag       TEXT NOT NULL,
    checksum   BLOB,
    PRIMARY KEY (grain_id, state_name)
)
"""
_COLUMNS = ("grain_id", "state_name", "data", "etag")
_ADD_CHECKSUM = "ALTER TABLE grain_state ADD COLUMN checksum BLOB"

_SELECT = "SELECT data, etag, checksum FROM grain_state WHERE grain_id = ? AND state_name = ?"
_SELECT_ETAG = "SELECT etag FROM grain_state WHERE grain_id = ? AND state_name = ?"
_INSERT = (
    "INSERT INTO grain_state (grain_id, state_name, data, etag, checksum) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (grain_id, state_name) DO NOTHING"
)
_UPDATE = (
    "UPDATE grain_state SET data = ?, etag = ?, checksum = ? "
    "WHERE grain_id = ? AND state_name = ? AND etag = ?"
)


def checksum(data: bytes) -> bytes:
    """The checksum stored with a value."""
    return hashlib.blake2b(data, digest_size=16).digest()


def _open(conn: sqlite3.Connection, path: str) -> None:
    with conn:
        conn.execute(_SCHEMA)
    check_columns(conn, path, "grain_state", _COLUMNS)
    have = {row[1] for row in conn.execute("PRAGMA table_info(grain_state)")}
    if "checksum" not in have:
        with conn:
            conn.execute(_ADD_CHECKSUM)
_DELETE = "DELETE FROM grain_state WHERE grain_id = ? AND state_name = ? AND etag = ?"


def _conflict(
    conn: sqlite3.Connection,
    key: str,
    state_name: str,
    etag: str | None,
    action: str,
) -> InconsistentStateError:
    row = conn.execute(_SELECT_ETAG, (key, state_name)).fetchone()
    stored_etag = None if row is None else row[0]
    return InconsistentStateError(
        f"cannot {action} state {state_name!r} of {key}: stored etag is {stored_etag!r}, "
        f"the caller's etag is {etag!r}",
        stored_etag,
        etag,
    )


def _write(
    conn: sqlite3.Connection,
    key: str,
    state_name: str,
    data: bytes,
    etag: str | None,
    new_etag: str,
) -> None:
    if etag is None:
        cur = conn.execute(_INSERT, (key, state_name, data, new_etag, checksum(data)))
    else:
        cur = conn.execute(_UPDATE, (data, new_etag, checksum(data), key, state_name, etag))
    if cur.rowcount != 1:
        raise _conflict(conn, key, state_name, etag, "write")


def _clear(conn: sqlite3.Connection, key: str, state_name: str, etag: str | None) -> None:
    if etag is None:
        # Clearing with no etag succeeds only when there is nothing to clear.
        if conn.execute(_SELECT_ETAG, (key, state_name)).fetchone() is not None:
            raise _conflict(conn, key, state_name, etag, "clear")
        return
    if conn.execute(_DELETE, (key, state_name, etag)).rowcount != 1:
        raise _conflict(conn, key, state_name, etag, "clear")


class SqliteGrainStorage(GrainStorage):
    """One row per (grain, state name) in table ``grain_state`` of the file at ``path``.

    The etag check and the write run in one ``BEGIN IMMEDIATE`` transaction on the database
    thread (a compare-and-swap), so concurrent writers, in this process or another one sharing
    the file, cannot both win. Etags are uuid4 hex strings. ``path`` may be ``":memory:"``.
    Operations before ``open`` open the storage; after ``close`` they raise ``RuntimeError``.
    """

    __slots__ = ("_db", "_opened")

    def __init__(self, path: str) -> None:
        self._db = SqliteDatabase(str(path))
        self._opened = False

    def __repr__(self) -> str:
        return f"SqliteGrainStorage({self._db.path!r})"

    @property
    def path(self) -> str:
        return self._db.path

    async def open(self) -> None:
        await self._db.run(_open, self._db.path)
        self._opened = True

    async def close(self) -> None:
        await self._db.close()

    async def read(self, grain_id: GrainId, state_name: str) -> StoredState | None:
        if not self._opened:
            await self.open()
        row = await self._db.fetchone(_SELECT, (grain_id.canonical(), state_name))
        if row is None:
            return None
        data = bytes(row[0])
        if row[2] is not None and bytes(row[2]) != checksum(data):
            raise StorageCorruptionError(
                f"state {state_name!r} of grain {grain_id} in SQLite file {self._db.path} does "
                "not match its checksum: it was changed outside orleanspy or the file is "
                "damaged; restore the file from a backup, or clear the state to start over"
            )
        return StoredState(data, row[1])

    async def write(self, grain_id: GrainId, state_name: str, data: bytes, etag: str | None) -> str:
        if not self._opened:
            await self.open()
        new_etag = uuid.uuid4().hex
        await self._db.transaction(
            _write, grain_id.canonical(), state_name, bytes(data), etag, new_etag
        )
        return new_etag

    async def clear(self, grain_id: GrainId, state_name: str, etag: str | None) -> None:
        if not self._opened:
            await self.open()
        await self._db.transaction(_clear, grain_id.canonical(), state_name, etag)
