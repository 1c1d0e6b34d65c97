"""Files that may hold a secret are private: a SQLite database is created 0600 (its -wal and
-shm follow it) in a folder made 0700, and the cluster key is not read from a membership file
that group or others can read unless that is accepted explicitly."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orleanspy import ConfigurationError
from orleanspy._util.sqlite import SqliteDatabase, readable_by_others
from orleanspy.cluster.config import check_private, cluster_key
from orleanspy.cluster.membership import SqliteMembershipTable


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


async def test_a_database_is_created_private_in_a_private_folder(tmp_path: Path) -> None:
    path = tmp_path / "made" / "state.db"
    db = SqliteDatabase(str(path))
    await db.execute("CREATE TABLE t (x)")
    await db.execute("INSERT INTO t VALUES (1)")
    try:
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
        assert [mode(p) for p in files] == [0o600] * 3
        assert mode(path.parent) == 0o700
        assert readable_by_others(str(path)) == []
    finally:
        await db.close()


async def test_an_existing_database_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    db = SqliteDatabase(str(path))
    await db.execute("CREATE TABLE t (x)")
    await db.close()
    assert mode(path) == 0o644
    assert readable_by_others(str(path))[0] == (str(path), 0o644)


async def test_the_cluster_key_is_not_read_from_a_readable_membership_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "membership.db"
    table = SqliteMembershipTable(str(path))
    key = await cluster_key(None, table)  # a fresh file: private, the key is made
    assert len(key) == 32
    path.chmod(0o640)
    with pytest.raises(ConfigurationError, match=r"mode 0640.*chmod 600 .*membership\.db"):
        await cluster_key(None, table)
    assert await cluster_key(None, table, allow_readable=True) == key
    assert await cluster_key("k" * 16, table) == b"k" * 16  # configured: the file holds none
    await table.close()


def test_check_private_names_every_readable_file_and_the_flag(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("x" * 16)
    key.chmod(0o600)
    check_private(str(key), "it holds the cluster key")
    key.chmod(0o604)
    with pytest.raises(ConfigurationError) as e:
        check_private(str(key), "it holds the cluster key")
    assert f"{key} (mode 0604)" in str(e.value)
    assert "--allow-readable-secrets" in str(e.value)
