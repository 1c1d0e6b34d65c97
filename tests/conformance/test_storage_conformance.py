"""GrainStorage providers against the conformance suite, plus SQLite durability."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import threading
from pathlib import Path

import pytest

from orleanspy._util.sqlite import SqliteDatabase
from orleanspy.errors import InconsistentStateError
from orleanspy.ids import GrainId
from orleanspy.storage.base import GrainStorage, StoredState
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.storage.redis import RedisGrainStorage
from orleanspy.storage.sqlite import SqliteGrainStorage
from orleanspy.testing.conformance import DISTINCT_KEYS, GrainStorageConformance, key_shape

REPO_ROOT = Path(__file__).resolve().parents[2]
GRAIN = GrainId("Counter", ("tenant", 7))


class TestMemoryGrainStorageConformance(GrainStorageConformance):
    async def make_storage(self, tmp_path: Path) -> GrainStorage:
        return MemoryGrainStorage()


class TestSqliteGrainStorageConformance(GrainStorageConformance):
    async def make_storage(self, tmp_path: Path) -> GrainStorage:
        return SqliteGrainStorage(str(tmp_path / "state.db"))


class TestRedisGrainStorageConformance(GrainStorageConformance):
    @pytest.fixture(autouse=True)
    def _redis(self, redis_url: str) -> None:
        self.url = redis_url  # Redis reachable (else skipped, or failed under CI)

    async def make_storage(self, tmp_path: Path) -> GrainStorage:
        return RedisGrainStorage(self.url)


class TestSqliteInMemoryGrainStorageConformance(GrainStorageConformance):
    async def make_storage(self, tmp_path: Path) -> GrainStorage:
        return SqliteGrainStorage(":memory:")


# -- SQLite durability -------------------------------------------------------------------


async def test_sqlite_storage_records_survive_close_and_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    first = SqliteGrainStorage(path)
    await first.open()
    etags = {
        key_shape(key): await first.write(GrainId("Counter", key), "state", b"%d" % i, None)
        for i, key in enumerate(DISTINCT_KEYS)
    }
    await first.close()

    second = SqliteGrainStorage(path)
    await second.open()
    try:
        for i, key in enumerate(DISTINCT_KEYS):
            stored = await second.read(GrainId("Counter", key), "state")
            assert stored == StoredState(b"%d" % i, etags[key_shape(key)])
    finally:
        await second.close()


async def test_sqlite_storage_etag_check_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    first = SqliteGrainStorage(path)
    await first.open()
    etag1 = await first.write(GRAIN, "state", b"v1", None)
    etag2 = await first.write(GRAIN, "state", b"v2", etag1)
    await first.close()

    second = SqliteGrainStorage(path)
    await second.open()
    try:
        with pytest.raises(InconsistentStateError) as info:
            await second.write(GRAIN, "state", b"v3", etag1)
        assert info.value.stored_etag == etag2
        etag3 = await second.write(GRAIN, "state", b"v3", etag2)
        assert etag3 not in (etag1, etag2)
    finally:
        await second.close()


async def test_sqlite_storage_clear_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    first = SqliteGrainStorage(path)
    await first.open()
    etag = await first.write(GRAIN, "state", b"v1", None)
    await first.write(GRAIN, "other", b"kept", None)
    await first.clear(GRAIN, "state", etag)
    await first.close()

    second = SqliteGrainStorage(path)
    await second.open()
    try:
        assert await second.read(GRAIN, "state") is None
        kept = await second.read(GRAIN, "other")
        assert kept is not None
        assert kept.data == b"kept"
    finally:
        await second.close()


_KILLED_WRITER = """
import asyncio, os, signal, sys
from orleanspy.ids import GrainId
from orleanspy.storage.redis import RedisGrainStorage
from orleanspy.storage.sqlite import SqliteGrainStorage

async def main():
    storage = SqliteGrainStorage(sys.argv[1])
    await storage.open()
    etag = await storage.write(GrainId("Counter", ("tenant", 7)), "state", b"committed", None)
    print(etag, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
async def test_sqlite_storage_committed_write_survives_kill_9(tmp_path: Path) -> None:
    path = str(tmp_path / "state.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _KILLED_WRITER,
        path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    etag = out.decode().strip()

    storage = SqliteGrainStorage(path)
    await storage.open()
    try:
        assert await storage.read(GRAIN, "state") == StoredState(b"committed", etag)
    finally:
        await storage.close()


async def test_sqlite_storage_two_instances_on_one_file_exactly_one_writer_wins(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "state.db")
    first, second = SqliteGrainStorage(path), SqliteGrainStorage(path)
    await first.open()
    await second.open()
    try:
        base = await first.write(GRAIN, "state", b"base", None)

        results = await asyncio.gather(
            first.write(GRAIN, "state", b"first", base),
            second.write(GRAIN, "state", b"second", base),
            return_exceptions=True,
        )

        winners = [r for r in results if isinstance(r, str)]
        assert len(winners) == 1, results
        assert sum(isinstance(r, InconsistentStateError) for r in results) == 1, results
        stored = await second.read(GRAIN, "state")
        assert stored is not None
        assert stored.etag == winners[0]
    finally:
        await first.close()
        await second.close()


async def test_sqlite_storage_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "state.db"
    storage = SqliteGrainStorage(str(path))
    await storage.open()
    try:
        await storage.write(GRAIN, "state", b"v", None)
    finally:
        await storage.close()

    assert path.is_file()


async def test_sqlite_storage_operation_after_close_raises(tmp_path: Path) -> None:
    storage = SqliteGrainStorage(str(tmp_path / "state.db"))
    await storage.open()
    await storage.close()

    with pytest.raises(RuntimeError, match="closed"):
        await storage.read(GRAIN, "state")


async def test_sqlite_storage_operation_before_open_opens(tmp_path: Path) -> None:
    storage = SqliteGrainStorage(str(tmp_path / "state.db"))
    try:
        etag = await storage.write(GRAIN, "state", b"v", None)
        assert await storage.read(GRAIN, "state") == StoredState(b"v", etag)
    finally:
        await storage.close()


# -- SqliteDatabase ----------------------------------------------------------------------


async def test_sqlite_database_uses_wal_normal_sync_and_busy_timeout(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "x.db"))
    try:
        assert await db.fetchone("PRAGMA journal_mode") == ("wal",)
        assert await db.fetchone("PRAGMA synchronous") == (1,)  # NORMAL
        assert await db.fetchone("PRAGMA busy_timeout") == (5000,)
    finally:
        await db.close()


async def test_sqlite_database_runs_every_call_on_one_thread(tmp_path: Path) -> None:
    db = SqliteDatabase(str(tmp_path / "x.db"))

    def thread_id(conn: sqlite3.Connection) -> int:
        return threading.get_ident()

    try:
        idents = await asyncio.gather(*(db.run(thread_id) for _ in range(8)))
    finally:
        await db.close()

    assert len(set(idents)) == 1
    assert idents[0] != threading.get_ident()


async def test_sqlite_database_memory_path_round_trips_rows() -> None:
    db = SqliteDatabase(":memory:")
    try:
        await db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)")
        await db.executemany("INSERT INTO t VALUES (?, ?)", [(1, "a"), (2, "b")])
        assert await db.execute("UPDATE t SET v = 'c' WHERE k = ?", (2,)) == 1
        assert await db.fetchall("SELECT k, v FROM t ORDER BY k") == [(1, "a"), (2, "c")]
        assert await db.fetchone("SELECT v FROM t WHERE k = ?", (3,)) is None
    finally:
        await db.close()


async def test_sqlite_database_transaction_rolls_back_on_error() -> None:
    db = SqliteDatabase(":memory:")

    def insert_then_fail(conn: sqlite3.Connection, value: str) -> None:
        conn.execute("INSERT INTO t VALUES (?)", (value,))
        raise ValueError("boom")

    try:
        await db.execute("CREATE TABLE t (v TEXT)")
        with pytest.raises(ValueError, match="boom"):
            await db.transaction(insert_then_fail, "lost")
        assert await db.fetchall("SELECT v FROM t") == []
    finally:
        await db.close()


async def test_sqlite_database_close_is_idempotent_and_waits_for_pending_calls(
    tmp_path: Path,
) -> None:
    db = SqliteDatabase(str(tmp_path / "x.db"))
    await db.execute("CREATE TABLE t (v INTEGER)")
    # Tasks start in creation order: the insert is submitted before either close.
    pending = asyncio.create_task(db.execute("INSERT INTO t VALUES (1)"))

    await asyncio.gather(db.close(), db.close())
    await db.close()

    assert await pending == 1
    assert db.closed
    with pytest.raises(RuntimeError, match="closed"):
        await db.fetchall("SELECT v FROM t")
    reopened = SqliteDatabase(str(tmp_path / "x.db"))
    try:
        assert await reopened.fetchall("SELECT v FROM t") == [(1,)]
    finally:
        await reopened.close()
