"""Membership tables against the conformance suite, plus SQLite races across processes."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import pytest

from orleanspy.cluster.membership import (
    MembershipTable,
    MemoryMembershipTable,
    SiloStatus,
    SqliteMembershipTable,
)
from orleanspy.cluster.membership.redis import RedisMembershipTable
from orleanspy.errors import MembershipError
from orleanspy.ids import SiloAddress
from orleanspy.testing.membership_conformance import MembershipTableConformance, sample_entry

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0


class TestMemoryMembershipTableConformance(MembershipTableConformance):
    async def make_table(self, tmp_path: Path) -> MembershipTable:
        return MemoryMembershipTable()


class TestSqliteMembershipTableConformance(MembershipTableConformance):
    durable = True
    shared_storage = True

    async def make_table(self, tmp_path: Path) -> MembershipTable:
        return SqliteMembershipTable(str(tmp_path / "membership.db"), cluster_id="conformance")


class TestRedisMembershipTableConformance(MembershipTableConformance):
    durable = True
    shared_storage = True

    @pytest.fixture(autouse=True)
    def _redis(self, redis_url: str) -> None:
        self.url = redis_url  # Redis reachable (else skipped, or failed under CI)

    async def make_table(self, tmp_path: Path) -> MembershipTable:
        return RedisMembershipTable(self.url, cluster_id="conformance")


class TestSqliteInMemoryMembershipTableConformance(MembershipTableConformance):
    async def make_table(self, tmp_path: Path) -> MembershipTable:
        return SqliteMembershipTable(":memory:", cluster_id="conformance")


# -- SQLite specifics --------------------------------------------------------------------

SILO = SiloAddress("127.0.0.1", 11111, 1)


async def test_sqlite_membership_clusters_in_one_file_are_separate(tmp_path: Path) -> None:
    path = str(tmp_path / "membership.db")
    red, blue = SqliteMembershipTable(path, "red"), SqliteMembershipTable(path, "blue")
    try:
        assert await red.insert_row(sample_entry(SILO), (await red.read_all()).version)

        assert (await blue.read_all()).rows == ()
        assert (await blue.read_all()).version.version == 0
        await blue.delete_table()
        assert len(await red.read_all()) == 1
    finally:
        await red.close()
        await blue.close()


async def test_sqlite_membership_uses_wal_and_full_sync(tmp_path: Path) -> None:
    table = SqliteMembershipTable(str(tmp_path / "membership.db"))
    try:
        await table.open()
        mode = await table._db.fetchone("PRAGMA journal_mode")
        sync = await table._db.fetchone("PRAGMA synchronous")
    finally:
        await table.close()

    assert mode == ("wal",)
    assert sync == (2,)  # FULL


async def test_sqlite_membership_malformed_row_raises_membership_error(tmp_path: Path) -> None:
    path = tmp_path / "membership.db"
    table = SqliteMembershipTable(str(path))
    try:
        assert await table.insert_row(sample_entry(SILO), (await table.read_all()).version)
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("UPDATE membership SET row = x'c1'")

        with pytest.raises(MembershipError, match="malformed membership row"):
            await table.read_all()
    finally:
        await table.close()


async def test_sqlite_membership_unusable_path_raises_membership_error(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    table = SqliteMembershipTable(str(tmp_path / "dir.db"))
    try:
        with pytest.raises(MembershipError, match=r"dir\.db"):
            await table.read_all()
    finally:
        await table.close()


def test_sqlite_membership_rejects_empty_cluster_id() -> None:
    with pytest.raises(ValueError, match="cluster_id"):
        SqliteMembershipTable("x.db", cluster_id="")


_RACER = """
import asyncio, dataclasses, json, sys
from orleanspy.cluster.membership import SqliteMembershipTable, SuspectVote
from orleanspy.cluster.membership.redis import RedisMembershipTable
from orleanspy.ids import SiloAddress

async def main(path, n, rounds):
    if path.startswith("redis://"):
        table = RedisMembershipTable(path, cluster_id="race")
    else:
        table = SqliteMembershipTable(path, cluster_id="race")
    target = SiloAddress("127.0.0.1", 11111, 1)
    me = SiloAddress("127.0.0.1", 20000 + n, 1)
    wins = []
    try:
        for i in range(rounds):
            data = await table.read_all()
            entry, etag = data.get(target)
            entry = dataclasses.replace(entry, suspect_votes=(SuspectVote(me, float(i)),))
            if await table.update_row(entry, etag, data.version):
                wins.append(data.version.version)
    finally:
        await table.close()
    print(json.dumps(wins), flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_membership_processes_win_exactly_once_per_version(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Four processes race 40 votes each on one row: each version is won exactly once."""
    table: MembershipTable
    if backend == "redis":
        path = request.getfixturevalue("redis_url")
        table = RedisMembershipTable(path, cluster_id="race")
    else:
        path = str(tmp_path / "membership.db")
        table = SqliteMembershipTable(path, cluster_id="race")
    await table.open()
    assert await table.insert_row(sample_entry(SILO), (await table.read_all()).version)
    start = (await table.read_all()).version.version
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}

    async def racer(n: int) -> list[int]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _RACER, path, str(n), "40",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        wins: list[int] = json.loads(out)
        return wins

    try:
        async with asyncio.timeout(WAIT):
            results = await asyncio.gather(*(racer(n) for n in range(4)))
        end = (await table.read_all()).version.version
        row = (await table.read_row(SILO)).get(SILO)
    finally:
        await table.close()

    wins = sorted(v for result in results for v in result)
    assert wins == list(range(start, end)), "exactly one winner per version, no gaps"
    assert end - start >= 40  # at least every round of one process moved the version
    assert row is not None
    assert row[0].status is SiloStatus.ACTIVE
    assert len(row[0].suspect_votes) == 1
