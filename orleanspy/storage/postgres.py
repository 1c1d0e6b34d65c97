"""PostgresGrainStorage: grain state in PostgreSQL, etags as a version column, checksummed.

Table ``grain_state`` (in the URL's schema) holds one row per (grain, state name): the value,
its BLAKE2b checksum (as the SQLite provider keeps it, checked on every read), the version
(the etag, drawn from one sequence so that a record cleared and written again never repeats
an etag) and the token of the write that made it. Each write or clear is one conditional
statement that also returns the stored version, so a conflict costs no second round trip.

A write whose connection the server drops before the reply is settled by its token: the row
carries the token if the write committed (its version is returned), and the write is sent
again if not; nothing acknowledged is lost and nothing is written twice.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from orleanspy._util.postgres import PostgresClient, connection_lost
from orleanspy.errors import InconsistentStateError, StorageCorruptionError, StorageError
from orleanspy.ids import GrainId
from orleanspy.storage.base import GrainStorage, StoredState

__all__ = ["PostgresGrainStorage"]

MIGRATIONS = (
    """
    CREATE SEQUENCE grain_state_version;
    CREATE TABLE grain_state (
        grain_id   TEXT NOT NULL,
        state_name TEXT NOT NULL,
        data       BYTEA NOT NULL,
        checksum   BYTEA NOT NULL,
        version    BIGINT NOT NULL,
        token      UUID NOT NULL,
        PRIMARY KEY (grain_id, state_name)
    )
    """,
)

_SELECT = "SELECT data, checksum, version FROM grain_state WHERE grain_id = $1 AND state_name = $2"
_SELECT_TOKEN = "SELECT version, token FROM grain_state WHERE grain_id = $1 AND state_name = $2"
# -> (new version or NULL, the version stored before the statement or NULL)
_INSERT = """
WITH w AS (
    INSERT INTO grain_state (grain_id, state_name, data, checksum, version, token)
    VALUES ($1, $2, $3, $4, nextval('grain_state_version'), $5)
    ON CONFLICT (grain_id, state_name) DO NOTHING RETURNING version)
SELECT (SELECT version FROM w),
       (SELECT version FROM grain_state WHERE grain_id = $1 AND state_name = $2)
"""
_UPDATE = """
WITH w AS (
    UPDATE grain_state SET data = $3, checksum = $4, version = nextval('grain_state_version'),
        token = $5
    WHERE grain_id = $1 AND state_name = $2 AND version = $6 RETURNING version)
SELECT (SELECT version FROM w),
       (SELECT version FROM grain_state WHERE grain_id = $1 AND state_name = $2)
"""
_DELETE = """
WITH w AS (DELETE FROM grain_state WHERE grain_id = $1 AND state_name = $2 AND version = $3
           RETURNING version)
SELECT (SELECT version FROM w),
       (SELECT version FROM grain_state WHERE grain_id = $1 AND state_name = $2)
"""


def checksum(data: bytes) -> bytes:
    """The checksum stored with a value (the SQLite provider's)."""
    return hashlib.blake2b(data, digest_size=16).digest()


def _version(etag: str | None) -> int | None:
    """The version an etag names; -1 for text that names none (it matches no row)."""
    if etag is None:
        return None
    return int(etag) if etag.isdigit() and len(etag) < 19 else -1


class PostgresGrainStorage(GrainStorage):
    """Grain state in the PostgreSQL database of ``url`` (``postgresql://…/db?schema=S``).

    Operations before ``open`` open the storage; after ``close`` they raise ``RuntimeError``.
    """

    def __init__(self, url: str) -> None:
        self.client = PostgresClient(url, "storage", MIGRATIONS)

    def __repr__(self) -> str:
        return f"PostgresGrainStorage({self.client!r})"

    async def open(self) -> None:
        await self.client.open()

    async def close(self) -> None:
        await self.client.close()

    async def read(self, grain_id: GrainId, state_name: str) -> StoredState | None:
        key = grain_id.canonical()
        row = await self.client.run(
            "read grain state", lambda conn: conn.fetchrow(_SELECT, key, state_name))
        if row is None:
            return None
        data = bytes(row[0])
        if bytes(row[1]) != checksum(data):
            raise StorageCorruptionError(
                f"state {state_name!r} of grain {grain_id} in PostgreSQL table "
                f"{self.client.schema}.grain_state does not match its checksum: it was changed "
                "outside orleanspy; restore it from a backup, or clear the state to start over"
            )
        return StoredState(data, str(row[2]))

    async def write(self, grain_id: GrainId, state_name: str, data: bytes,
                    etag: str | None) -> str:
        key, data = grain_id.canonical(), bytes(data)
        token, expected = uuid.uuid4(), _version(etag)
        args: tuple[Any, ...] = (key, state_name, data, checksum(data), token)
        sql = _INSERT if expected is None else _UPDATE
        if expected is not None:
            args = (*args, expected)
        for _ in range(3):
            try:
                row = await self.client.run(
                    "write grain state", lambda conn: conn.fetchrow(sql, *args),
                    idempotent=False)
            except StorageError as exc:
                if exc.__cause__ is None or not connection_lost(exc.__cause__):
                    raise
                # Did the write commit before the connection went? Its token says.
                stored = await self.client.run(
                    "read grain state", lambda conn: conn.fetchrow(_SELECT_TOKEN, key,
                                                                   state_name))
                if stored is not None and stored[1] == token:
                    return str(stored[0])
                continue
            if row[0] is None:
                self._conflict("write", grain_id, state_name, row[1], etag)
            return str(row[0])
        raise self.client.failed("write grain state", ConnectionError("connection lost"))

    async def clear(self, grain_id: GrainId, state_name: str, etag: str | None) -> None:
        key, expected = grain_id.canonical(), _version(etag)
        if expected is None:
            row = await self.client.run(
                "read grain state", lambda conn: conn.fetchrow(_SELECT_TOKEN, key, state_name))
            if row is not None:
                self._conflict("clear", grain_id, state_name, row[0], etag)
            return
        for _ in range(3):
            try:
                result = await self.client.run(
                    "clear grain state",
                    lambda conn: conn.fetchrow(_DELETE, key, state_name, expected),
                    idempotent=False)
            except StorageError as exc:
                if exc.__cause__ is None or not connection_lost(exc.__cause__):
                    raise
                # Did the delete commit before the connection went? The row says.
                stored = await self.client.run(
                    "read grain state", lambda conn: conn.fetchrow(_SELECT_TOKEN, key,
                                                                   state_name))
                if stored is None:
                    return
                if stored[0] != expected:
                    self._conflict("clear", grain_id, state_name, stored[0], etag)
                continue
            if result[0] is None:
                self._conflict("clear", grain_id, state_name, result[1], etag)
            return
        raise self.client.failed("clear grain state", ConnectionError("connection lost"))

    @staticmethod
    def _conflict(action: str, grain_id: GrainId, state_name: str, stored: int | None,
                  etag: str | None) -> None:
        stored_etag = None if stored is None else str(stored)
        raise InconsistentStateError(
            f"cannot {action} state {state_name!r} of {grain_id}: stored etag is "
            f"{stored_etag!r}, the caller's etag is {etag!r}",
            stored_etag,
            etag,
        )
