"""A SQLite file that cannot be used, or a value changed on disk, is an error naming the file
and the fix — never a traceback from sqlite3, never a value served unnoticed."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from orleanspy.cluster.membership import SqliteMembershipTable
from orleanspy.errors import MembershipError, StorageCorruptionError, StorageError
from orleanspy.ids import GrainId
from orleanspy.reminders.sqlite import SqliteReminderTable
from orleanspy.storage.sqlite import SqliteGrainStorage

GRAIN = GrainId("Account", "alice")


def garbage(path: Path) -> Path:
    path.write_bytes(b"this is not a SQLite database " * 200)
    return path


async def test_a_garbage_file_names_itself_for_every_back_end(tmp_path: Path) -> None:
    path = garbage(tmp_path / "bad.db")
    storage = SqliteGrainStorage(str(path))
    with pytest.raises(StorageCorruptionError, match=r"bad\.db.*not a database.*backup"):
        await storage.read(GRAIN, "balance")
    await storage.close()
    reminders = SqliteReminderTable(str(path))
    with pytest.raises(StorageCorruptionError, match=r"bad\.db"):
        await reminders.read_rows(GRAIN)
    await reminders.close()
    membership = SqliteMembershipTable(str(path))
    with pytest.raises(MembershipError, match=r"bad\.db.*not a database"):
        await membership.read_all()
    await membership.close()


async def test_a_folder_in_place_of_the_file(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    storage = SqliteGrainStorage(str(tmp_path / "dir.db"))
    with pytest.raises(StorageError, match=r"dir\.db.*not a\s+folder"):
        await storage.open()
    await storage.close()


async def test_a_truncated_file_is_reported_as_damaged(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    storage = SqliteGrainStorage(str(path))
    for i in range(300):
        await storage.write(GrainId("Account", i), "balance", b"x" * 500, None)
    await storage.close()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size // 3)
    storage = SqliteGrainStorage(str(path))
    with pytest.raises(StorageCorruptionError, match=r"state\.db.*(malformed|not a database)"):
        for i in range(300):
            await storage.read(GrainId("Account", i), "balance")
    await storage.close()


async def test_a_file_of_another_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE grain_state (name TEXT, value BLOB)")
    storage = SqliteGrainStorage(str(path))
    with pytest.raises(StorageError, match=r"other\.db: table grain_state has no column"):
        await storage.open()
    await storage.close()


async def test_a_value_changed_on_disk_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    storage = SqliteGrainStorage(str(path))
    await storage.write(GRAIN, "balance", b"\x92\x01\x02", None)
    await storage.write(GrainId("Account", "bob"), "balance", b"\x01", None)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE grain_state SET data = ? WHERE grain_id = ?",
                   (b"\x92\x01\x09", GRAIN.canonical()))
    with pytest.raises(StorageCorruptionError, match=r"'balance' of grain .*alice.*checksum"):
        await storage.read(GRAIN, "balance")
    stored = await storage.read(GrainId("Account", "bob"), "balance")  # the others still read
    assert stored is not None and stored.data == b"\x01"
    await storage.close()


async def test_a_row_without_a_checksum_reads_and_gets_one_on_its_next_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "legacy.db"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE grain_state (grain_id TEXT NOT NULL, state_name TEXT NOT "
                   "NULL, data BLOB NOT NULL, etag TEXT NOT NULL, "
                   "PRIMARY KEY (grain_id, state_name))")
        db.execute("INSERT INTO grain_state VALUES (?, 'balance', ?, 'e1')",
                   (GRAIN.canonical(), b"\x05"))
    storage = SqliteGrainStorage(str(path))
    stored = await storage.read(GRAIN, "balance")
    assert stored is not None and (stored.data, stored.etag) == (b"\x05", "e1")
    await storage.write(GRAIN, "balance", b"\x06", "e1")
    await storage.close()
    with closing(sqlite3.connect(path)) as db, db:
        (checksum,) = db.execute("SELECT checksum FROM grain_state").fetchone()
    assert checksum is not None
