"""SqliteMembershipTable: the embedded default, one SQLite file shared by the silos of a host.

Each write is one ``BEGIN IMMEDIATE`` transaction: it takes the file's write lock first, then
checks the table version (and the row etag) and writes, so the compare-and-swap holds across
processes. Reads run in one deferred transaction, which in WAL mode is one snapshot. The
connection uses ``synchronous=FULL``: these rows are few and small, and a committed death
declaration lost to a power cut would be worse than a slower commit. WAL needs shared memory:
keep the file on a local file system (never NFS). Times are compared across processes, which
is sound because every process of one host reads the same clock.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import uuid
from typing import Any, final

from orleanspy._util.sqlite import SqliteDatabase
from orleanspy.cluster.membership.entry import (
    MembershipEntry,
    MembershipTableData,
    SiloStatus,
    TableVersion,
    decode_entry,
    encode_entry,
)
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.errors import MembershipError, StorageError
from orleanspy.ids import SiloAddress

__all__ = ["SqliteMembershipTable"]

_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS membership_version (
        cluster_id TEXT PRIMARY KEY,
        version    INTEGER NOT NULL,
        etag       TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS membership (
        cluster_id TEXT NOT NULL,
        silo       TEXT NOT NULL,
        status     TEXT NOT NULL,
        row        BLOB NOT NULL,
        etag       TEXT NOT NULL,
        i_am_alive REAL NOT NULL,
        PRIMARY KEY (cluster_id, silo)
    ) WITHOUT ROWID
    """,
)

_KEY_SCHEMA = """
    CREATE TABLE IF NOT EXISTS cluster_key (
        cluster_id TEXT PRIMARY KEY,
        key        BLOB NOT NULL
    )
"""
_INSERT_KEY = "INSERT INTO cluster_key (cluster_id, key) VALUES (?, ?) ON CONFLICT DO NOTHING"
_SELECT_KEY = "SELECT key FROM cluster_key WHERE cluster_id = ?"
_SELECT_IDS = (
    "SELECT cluster_id FROM membership_version UNION SELECT cluster_id FROM membership "
    "ORDER BY cluster_id"
)

_INIT_VERSION = (
    "INSERT INTO membership_version (cluster_id, version, etag) VALUES (?, 0, ?) "
    "ON CONFLICT (cluster_id) DO NOTHING"
)
_SELECT_VERSION = "SELECT version, etag FROM membership_version WHERE cluster_id = ?"
_BUMP_VERSION = (
    "UPDATE membership_version SET version = version + 1, etag = ? "
    "WHERE cluster_id = ? AND version = ? AND etag = ?"
)
_SELECT_ALL = "SELECT row, etag, i_am_alive FROM membership WHERE cluster_id = ? ORDER BY silo"
_SELECT_ROW = "SELECT row, etag, i_am_alive FROM membership WHERE cluster_id = ? AND silo = ?"
_SELECT_ETAG = "SELECT etag FROM membership WHERE cluster_id = ? AND silo = ?"
_INSERT = (
    "INSERT INTO membership (cluster_id, silo, status, row, etag, i_am_alive) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_UPDATE = (
    "UPDATE membership SET status = ?, row = ?, etag = ?, i_am_alive = ? "
    "WHERE cluster_id = ? AND silo = ? AND etag = ?"
)
_UPDATE_ALIVE = "UPDATE membership SET i_am_alive = ? WHERE cluster_id = ? AND silo = ?"
_CLEANUP = ("DELETE FROM membership WHERE cluster_id = ? AND status IN (?, ?) "
            "AND i_am_alive < ?")
_DELETE_ROWS = "DELETE FROM membership WHERE cluster_id = ?"
_RESET_VERSION = "UPDATE membership_version SET version = 0, etag = ? WHERE cluster_id = ?"


def _etag() -> str:
    return uuid.uuid4().hex


def _key(silo: SiloAddress) -> str:
    return f"{silo.host}|{silo.port}|{silo.generation}"


def _row(raw: tuple[Any, ...]) -> tuple[MembershipEntry, str]:
    blob, etag, i_am_alive = raw
    entry = decode_entry(bytes(blob))
    if entry.i_am_alive_time != i_am_alive:  # the column is the truth: heartbeats skip the blob
        entry = dataclasses.replace(entry, i_am_alive_time=float(i_am_alive))
    return entry, str(etag)


def _version(conn: sqlite3.Connection, cluster_id: str) -> TableVersion:
    raw = conn.execute(_SELECT_VERSION, (cluster_id,)).fetchone()
    if raw is None:  # the table was created by open(); a missing row is a reset table
        return TableVersion(0, "")
    return TableVersion(int(raw[0]), str(raw[1]))


def _bump(conn: sqlite3.Connection, cluster_id: str, expected: TableVersion) -> bool:
    cur = conn.execute(_BUMP_VERSION, (_etag(), cluster_id, expected.version, expected.etag))
    return cur.rowcount == 1


# -- transactions (run on the database thread) ---------------------------------------------


def _open(conn: sqlite3.Connection, cluster_id: str) -> None:
    conn.execute("PRAGMA synchronous=FULL")
    with conn:
        conn.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute(_INIT_VERSION, (cluster_id, _etag()))


def _read(conn: sqlite3.Connection, cluster_id: str, silo: str | None) -> MembershipTableData:
    with conn:
        conn.execute("BEGIN")  # one read transaction: one WAL snapshot for version and rows
        version = _version(conn, cluster_id)
        if silo is None:
            raws = conn.execute(_SELECT_ALL, (cluster_id,)).fetchall()
        else:
            raws = conn.execute(_SELECT_ROW, (cluster_id, silo)).fetchall()
    return MembershipTableData(tuple(_row(raw) for raw in raws), version)


def _insert(
    conn: sqlite3.Connection, cluster_id: str, entry: MembershipEntry, expected: TableVersion
) -> bool:
    key = _key(entry.silo)
    if conn.execute(_SELECT_ETAG, (cluster_id, key)).fetchone() is not None:
        return False
    if not _bump(conn, cluster_id, expected):
        return False
    conn.execute(
        _INSERT,
        (cluster_id, key, entry.status.value, encode_entry(entry), _etag(),
         entry.i_am_alive_time),
    )
    return True


def _update(
    conn: sqlite3.Connection,
    cluster_id: str,
    entry: MembershipEntry,
    etag: str,
    expected: TableVersion,
) -> bool:
    key = _key(entry.silo)
    stored = conn.execute(_SELECT_ETAG, (cluster_id, key)).fetchone()
    if stored is None or stored[0] != etag:
        return False
    if not _bump(conn, cluster_id, expected):
        return False
    conn.execute(
        _UPDATE,
        (entry.status.value, encode_entry(entry), _etag(), entry.i_am_alive_time,
         cluster_id, key, etag),
    )
    return True


def _cluster_key(conn: sqlite3.Connection, cluster_id: str, fresh: bytes) -> bytes:
    conn.execute(_KEY_SCHEMA)
    conn.execute(_INSERT_KEY, (cluster_id, fresh))
    return bytes(conn.execute(_SELECT_KEY, (cluster_id,)).fetchone()[0])


def _delete_table(conn: sqlite3.Connection, cluster_id: str) -> None:
    conn.execute(_DELETE_ROWS, (cluster_id,))
    conn.execute(_RESET_VERSION, (_etag(), cluster_id))


@final
class SqliteMembershipTable(MembershipTable):
    """The rows of cluster ``cluster_id`` in tables ``membership`` and ``membership_version``
    of the file at ``path`` (several clusters can share one file). ``":memory:"`` works
    within one instance."""

    __slots__ = ("_cluster_id", "_db", "_opened")

    def __init__(self, path: str, cluster_id: str = "dev") -> None:
        if not cluster_id:
            raise ValueError("SqliteMembershipTable needs a non-empty cluster_id")
        self._db = SqliteDatabase(str(path))
        self._cluster_id = cluster_id
        self._opened = False

    def __repr__(self) -> str:
        return f"SqliteMembershipTable({self._db.path!r}, cluster_id={self._cluster_id!r})"

    @property
    def path(self) -> str:
        return self._db.path

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    def _failed(self, action: str, exc: sqlite3.Error | StorageError) -> MembershipError:
        return MembershipError(
            f"membership table {self._db.path!r} (cluster {self._cluster_id!r}): cannot "
            f"{action}: {exc}. Check that the file is on a local disk and writable, and that no "
            "other program holds a long transaction on it."
        )

    async def open(self) -> None:
        if self._opened:
            return
        try:
            await self._db.run(_open, self._cluster_id)
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed("create the schema", exc) from exc
        self._opened = True

    async def close(self) -> None:
        await self._db.close()

    async def cluster_key(self) -> bytes:
        """The cluster's key, kept in the file (the first silo makes it): every process that
        can read the file is inside the cluster's trust boundary."""
        try:
            return await self._db.transaction(_cluster_key, self._cluster_id, os.urandom(32))
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed("read the cluster key", exc) from exc

    async def cluster_ids(self) -> list[str]:
        await self.open()
        try:
            rows = await self._db.fetchall(_SELECT_IDS)
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed("list the clusters", exc) from exc
        return [str(row[0]) for row in rows]

    async def read_all(self) -> MembershipTableData:
        await self.open()
        try:
            return await self._db.run(_read, self._cluster_id, None)
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed("read the rows", exc) from exc

    async def read_row(self, silo: SiloAddress) -> MembershipTableData:
        await self.open()
        try:
            return await self._db.run(_read, self._cluster_id, _key(silo))
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed(f"read the row of {silo}", exc) from exc

    async def insert_row(self, entry: MembershipEntry, table_version: TableVersion) -> bool:
        await self.open()
        try:
            return await self._db.transaction(_insert, self._cluster_id, entry, table_version)
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed(f"insert the row of {entry.silo}", exc) from exc

    async def update_row(
        self, entry: MembershipEntry, etag: str, table_version: TableVersion
    ) -> bool:
        await self.open()
        try:
            return await self._db.transaction(
                _update, self._cluster_id, entry, etag, table_version
            )
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed(f"update the row of {entry.silo}", exc) from exc

    async def update_i_am_alive(self, silo: SiloAddress, time: float) -> bool:
        await self.open()
        try:
            changed = await self._db.execute(
                _UPDATE_ALIVE, (float(time), self._cluster_id, _key(silo))
            )
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed(f"update the I-am-alive time of {silo}", exc) from exc
        return changed == 1

    async def cleanup_defunct(self, before: float) -> int:
        await self.open()
        try:
            return await self._db.execute(
                _CLEANUP, (self._cluster_id, SiloStatus.DEAD.value, SiloStatus.STOPPED.value,
                           float(before))
            )
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed("delete defunct rows", exc) from exc

    async def delete_table(self) -> None:
        await self.open()
        try:
            await self._db.transaction(_delete_table, self._cluster_id)
        except (sqlite3.Error, StorageError) as exc:
            raise self._failed("delete the table", exc) from exc
