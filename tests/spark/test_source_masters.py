"""The source on other masters than the tests' shared ``local[2]`` session: ``local[*]`` and a
Spark Connect server (a client process each, reading a SQLite queue file in batch and as a
stream)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from orleanspy.streams.adapters.sqlite import SqliteQueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper
from tests.integration.silo_process import REPO_ROOT, child_env

from .clusters import ConnectServer
from .conftest import have_java

pytestmark = [pytest.mark.spark, pytest.mark.integration]

CLIENT_WAIT = 180.0  # a JVM (or a Connect session) and two queries, on 2 busy cores


async def queue_file(folder: Path) -> Path:
    path = folder / "q.db"
    adapter = SqliteQueueAdapter("s", str(path))
    await adapter.open()
    mapper = HashRingQueueMapper(4, "s")
    try:
        for key in range(6):
            sid = StreamId("numbers", key)
            await adapter.enqueue(mapper.queue_for(sid), sid, list(range(10)))
    finally:
        await adapter.close()
    return path


async def client(where: str, path: Path) -> dict[str, int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.spark.source_client", where, str(path), "4",
        cwd=REPO_ROOT, env=child_env(), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    try:
        async with asyncio.timeout(CLIENT_WAIT):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    result: dict[str, int] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def test_the_source_on_local_star(tmp_path: Path) -> None:
    if not have_java():
        pytest.skip("no Java: install a JDK 17 to run the Spark tests")
    assert await client("local[*]", await queue_file(tmp_path)) == {"batch": 60, "stream": 60}


async def test_the_source_over_spark_connect(spark_connect_server: ConnectServer,
                                             tmp_path: Path) -> None:
    assert await client(spark_connect_server.url, await queue_file(tmp_path)) == {
        "batch": 60, "stream": 60}
