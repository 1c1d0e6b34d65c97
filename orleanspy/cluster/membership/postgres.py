"""PostgresMembershipTable: the membership table of a cluster in PostgreSQL.

Tables (in the URL's schema): ``membership_version`` (cluster id -> version, etag),
``membership`` (cluster id, silo -> row etag, encoded entry, status, I-am-alive time) and
``membership_keys`` (cluster id -> cluster key). A write is one transaction that locks the
cluster's version row (``SELECT … FOR UPDATE``), so writers of every process queue there;
it checks the version (and the row etag), changes the row and moves the version together.
An I-am-alive touches only the row's time. A read is one statement: rows and version come
from one snapshot.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any, final

from orleanspy._util.postgres import PostgresClient
from orleanspy.cluster.membership.entry import (
    MembershipEntry,
    MembershipTableData,
    SiloStatus,
    TableVersion,
    decode_entry,
    encode_entry,
)
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress

__all__ = ["PostgresMembershipTable"]

MIGRATIONS = (
    """
    CREATE TABLE membership_version (
        cluster_id TEXT PRIMARY KEY,
        version    BIGINT NOT NULL,
        etag       TEXT NOT NULL
    );
    CREATE TABLE membership (
        cluster_id TEXT NOT NULL,
        silo       TEXT NOT NULL,
        etag       TEXT NOT NULL,
        row        BYTEA NOT NULL,
        status     TEXT NOT NULL,
        alive      DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (cluster_id, silo)
    );
    CREATE TABLE membership_keys (
        cluster_id TEXT PRIMARY KEY,
        key        BYTEA NOT NULL
    )
    """,
)

_ENSURE = ("INSERT INTO membership_version (cluster_id, version, etag) VALUES ($1, 0, $2) "
           "ON CONFLICT (cluster_id) DO NOTHING")
_READ = """
SELECT v.version, v.etag, m.silo, m.etag, m.row, m.alive
FROM membership_version v LEFT JOIN membership m ON m.cluster_id = v.cluster_id
WHERE v.cluster_id = $1
"""
_LOCK = "SELECT version, etag FROM membership_version WHERE cluster_id = $1 FOR UPDATE"
_ROW_ETAG = "SELECT etag FROM membership WHERE cluster_id = $1 AND silo = $2"
_PUT = """
INSERT INTO membership (cluster_id, silo, etag, row, status, alive)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (cluster_id, silo) DO UPDATE SET etag = excluded.etag, row = excluded.row,
    status = excluded.status, alive = excluded.alive
"""
_BUMP = "UPDATE membership_version SET version = version + 1, etag = $2 WHERE cluster_id = $1"
_ALIVE = "UPDATE membership SET alive = $3 WHERE cluster_id = $1 AND silo = $2"
_CLEANUP = ("DELETE FROM membership WHERE cluster_id = $1 AND status IN ($2, $3) "
            "AND alive < $4")
_RESET = """
INSERT INTO membership_version (cluster_id, version, etag) VALUES ($1, 0, $2)
ON CONFLICT (cluster_id) DO UPDATE SET version = 0, etag = excluded.etag
"""
_CLUSTERS = ("SELECT cluster_id FROM membership_version UNION "
             "SELECT cluster_id FROM membership ORDER BY 1")
_KEY_PUT = ("INSERT INTO membership_keys (cluster_id, key) VALUES ($1, $2) "
            "ON CONFLICT (cluster_id) DO NOTHING")
_KEY_GET = "SELECT key FROM membership_keys WHERE cluster_id = $1"


def _silo_field(silo: SiloAddress) -> str:
    return f"{silo.host}:{silo.port}@{silo.generation}"


def _count(status: str) -> int:
    return int(status.rsplit(" ", 1)[-1])


@final
class PostgresMembershipTable(MembershipTable):
    """Rows of cluster ``cluster_id`` in the PostgreSQL database of ``url``."""

    def __init__(self, url: str, cluster_id: str = "dev") -> None:
        if not cluster_id:
            raise ValueError("PostgresMembershipTable needs a non-empty cluster_id")
        self.url = url
        self.cluster_id = cluster_id
        self.client = PostgresClient(url, "membership", MIGRATIONS, error=MembershipError,
                                     max_size=4)
        self._ensured = False
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresMembershipTable({self.client!r}, {self.cluster_id!r})"

    async def _run(self, action: str, fn: Any, *, idempotent: bool = True) -> Any:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if not self._ensured:
            await self.client.run("create the version row", lambda c: c.execute(
                _ENSURE, self.cluster_id, uuid.uuid4().hex))
            self._ensured = True
        return await self.client.run(action, fn, idempotent=idempotent)

    async def open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        await self.client.open()

    async def close(self) -> None:
        self._closed = True
        await self.client.close()

    async def read_all(self) -> MembershipTableData:
        records = await self._run("read the table", lambda c: c.fetch(_READ, self.cluster_id))
        if not records:  # the version row went between the two statements (a reset)
            self._ensured = False
            return await self.read_all()
        out = []
        for record in records:
            if record[2] is None:
                continue
            entry = dataclasses.replace(decode_entry(bytes(record[4])),
                                        i_am_alive_time=float(record[5]))
            out.append((entry, str(record[3])))
        out.sort(key=lambda row: (row[0].silo.host, row[0].silo.port, row[0].silo.generation))
        return MembershipTableData(tuple(out),
                                   TableVersion(int(records[0][0]), str(records[0][1])))

    async def read_row(self, silo: SiloAddress) -> MembershipTableData:
        data = await self.read_all()
        row = data.get(silo)
        return MembershipTableData(() if row is None else (row,), data.version)

    async def _write(self, entry: MembershipEntry, etag: str | None,
                     table_version: TableVersion) -> bool:
        silo = _silo_field(entry.silo)
        row = encode_entry(entry)

        async def go(conn: Any) -> bool:
            async with conn.transaction():
                version = await conn.fetchrow(_LOCK, self.cluster_id)
                if version is None or (int(version[0]), version[1]) != (
                        table_version.version, table_version.etag):
                    return False
                stored = await conn.fetchval(_ROW_ETAG, self.cluster_id, silo)
                if stored != etag:
                    return False
                await conn.execute(_PUT, self.cluster_id, silo, uuid.uuid4().hex, row,
                                   entry.status.value, float(entry.i_am_alive_time))
                await conn.execute(_BUMP, self.cluster_id, uuid.uuid4().hex)
                return True

        return bool(await self._run("write a row", go, idempotent=False))

    async def insert_row(self, entry: MembershipEntry, table_version: TableVersion) -> bool:
        return await self._write(entry, None, table_version)

    async def update_row(
        self, entry: MembershipEntry, etag: str, table_version: TableVersion
    ) -> bool:
        if not etag:
            return False
        return await self._write(entry, etag, table_version)

    async def update_i_am_alive(self, silo: SiloAddress, time: float) -> bool:
        status = await self._run("write I-am-alive", lambda c: c.execute(
            _ALIVE, self.cluster_id, _silo_field(silo), float(time)))
        return _count(status) == 1

    async def cleanup_defunct(self, before: float) -> int:
        status = await self._run("delete defunct rows", lambda c: c.execute(
            _CLEANUP, self.cluster_id, SiloStatus.DEAD.value, SiloStatus.STOPPED.value,
            float(before)))
        return _count(status)

    async def delete_table(self) -> None:
        async def go(conn: Any) -> None:
            async with conn.transaction():
                await conn.execute("DELETE FROM membership WHERE cluster_id = $1",
                                   self.cluster_id)
                await conn.execute(_RESET, self.cluster_id, uuid.uuid4().hex)

        await self._run("delete the table", go)

    async def cluster_ids(self) -> list[str]:
        rows = await self._run("list clusters", lambda c: c.fetch(_CLUSTERS))
        return [str(row[0]) for row in rows]

    async def cluster_key(self) -> bytes:
        """A random key stored with the table by the first silo that asks."""
        async def go(conn: Any) -> bytes:
            await conn.execute(_KEY_PUT, self.cluster_id, os.urandom(32))
            return bytes(await conn.fetchval(_KEY_GET, self.cluster_id))

        key: bytes = await self._run("read the cluster key", go)
        return key
