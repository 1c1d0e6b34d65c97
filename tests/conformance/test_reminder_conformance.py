"""ReminderTable providers against the conformance suite, plus SQLite durability."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from orleanspy.ids import GrainId
from orleanspy.reminders.base import ReminderEntry, ReminderTable
from orleanspy.reminders.memory import MemoryReminderTable
from orleanspy.reminders.redis import RedisReminderTable
from orleanspy.reminders.sqlite import SqliteReminderTable
from orleanspy.storage.sqlite import SqliteGrainStorage
from orleanspy.testing.conformance import DISTINCT_KEYS, ReminderTableConformance, key_shape

REPO_ROOT = Path(__file__).resolve().parents[2]
GRAIN = GrainId("Alarm", ("tenant", 7))


class TestMemoryReminderTableConformance(ReminderTableConformance):
    async def make_table(self, tmp_path: Path) -> ReminderTable:
        return MemoryReminderTable()


class TestSqliteReminderTableConformance(ReminderTableConformance):
    async def make_table(self, tmp_path: Path) -> ReminderTable:
        return SqliteReminderTable(str(tmp_path / "reminders.db"))


class TestRedisReminderTableConformance(ReminderTableConformance):
    @pytest.fixture(autouse=True)
    def _redis(self, redis_url: str) -> None:
        self.url = redis_url  # Redis reachable (else skipped, or failed under CI)

    async def make_table(self, tmp_path: Path) -> ReminderTable:
        return RedisReminderTable(self.url)


class TestSqliteInMemoryReminderTableConformance(ReminderTableConformance):
    async def make_table(self, tmp_path: Path) -> ReminderTable:
        return SqliteReminderTable(":memory:")


# -- SQLite durability -------------------------------------------------------------------


async def test_sqlite_reminders_rows_survive_close_and_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "reminders.db")
    first = SqliteReminderTable(path)
    await first.open()
    expected: set[tuple[str, str, float, float, str]] = set()
    for i, key in enumerate(DISTINCT_KEYS):
        entry = ReminderEntry(GrainId("Alarm", key), f"r{i}", 1_700_000_000.5 + i, 30.0)
        etag = await first.upsert(entry)
        expected.add((repr(key_shape(key)), entry.name, entry.start_at, entry.period, etag))
    await first.close()

    second = SqliteReminderTable(path)
    await second.open()
    try:
        rows = await second.read_all()
    finally:
        await second.close()

    assert {
        (repr(key_shape(r.grain_id.key)), r.name, r.start_at, r.period, r.etag) for r in rows
    } == expected
    assert {r.grain_id.type_name for r in rows} == {"Alarm"}


async def test_sqlite_reminders_remove_survives_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "reminders.db")
    first = SqliteReminderTable(path)
    await first.open()
    etag_a = await first.upsert(ReminderEntry(GRAIN, "a", 10.0, 1.0))
    etag_b = await first.upsert(ReminderEntry(GRAIN, "b", 20.0, 2.0))
    assert await first.remove(GRAIN, "a", etag_a)
    await first.close()

    second = SqliteReminderTable(path)
    await second.open()
    try:
        assert await second.read_rows(GRAIN) == [ReminderEntry(GRAIN, "b", 20.0, 2.0, etag_b)]
        assert await second.remove(GRAIN, "b", etag_b) is True
    finally:
        await second.close()


_KILLED_WRITER = """
import asyncio, os, signal, sys
from orleanspy.ids import GrainId
from orleanspy.reminders.base import ReminderEntry
from orleanspy.reminders.sqlite import SqliteReminderTable

async def main():
    table = SqliteReminderTable(sys.argv[1])
    await table.open()
    etag = await table.upsert(ReminderEntry(GrainId("Alarm", ("tenant", 7)), "tick", 5.0, 1.5))
    print(etag, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
async def test_sqlite_reminders_committed_upsert_survives_kill_9(tmp_path: Path) -> None:
    path = str(tmp_path / "reminders.db")
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

    table = SqliteReminderTable(path)
    await table.open()
    try:
        assert await table.read_all() == [ReminderEntry(GRAIN, "tick", 5.0, 1.5, etag)]
    finally:
        await table.close()


async def test_sqlite_reminders_two_instances_on_one_file_exactly_one_remove_wins(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "reminders.db")
    first, second = SqliteReminderTable(path), SqliteReminderTable(path)
    await first.open()
    await second.open()
    try:
        etag = await first.upsert(ReminderEntry(GRAIN, "tick", 1.0, 1.0))

        results = await asyncio.gather(
            first.remove(GRAIN, "tick", etag), second.remove(GRAIN, "tick", etag)
        )

        assert sorted(results) == [False, True]
        assert await second.read_row(GRAIN, "tick") is None
    finally:
        await first.close()
        await second.close()


async def test_sqlite_reminders_share_a_file_with_grain_storage(tmp_path: Path) -> None:
    path = str(tmp_path / "silo.db")
    table, storage = SqliteReminderTable(path), SqliteGrainStorage(path)
    await table.open()
    await storage.open()
    try:
        etag = await table.upsert(ReminderEntry(GRAIN, "tick", 1.0, 2.0))
        await storage.write(GRAIN, "state", b"data", None)

        assert await table.read_all() == [ReminderEntry(GRAIN, "tick", 1.0, 2.0, etag)]
        stored = await storage.read(GRAIN, "state")
        assert stored is not None
        assert stored.data == b"data"
    finally:
        await table.close()
        await storage.close()


async def test_sqlite_reminders_operation_after_close_raises(tmp_path: Path) -> None:
    table = SqliteReminderTable(str(tmp_path / "reminders.db"))
    await table.open()
    await table.close()

    with pytest.raises(RuntimeError, match="closed"):
        await table.read_all()


async def test_sqlite_reminders_creates_parent_directories(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "reminders.db"
    table = SqliteReminderTable(str(path))
    await table.open()
    await table.close()

    assert path.is_file()
