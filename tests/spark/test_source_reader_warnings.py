"""The stream reader's offsets, hold and warnings, called as Spark's source runner calls them
(``initialOffset``, ``latestOffset``, ``commit``), in this process, on a SQLite queue file."""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from orleanspy.streams.adapters.sqlite import SqliteQueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from orleanspy.spark.datasource import SourceOptions
from orleanspy.spark.datasource.reader import StreamReader

SID = StreamId("numbers", 1)


async def publish(path: Path, containers: int, per_container: int = 10) -> None:
    adapter = SqliteQueueAdapter("s", str(path))
    await adapter.open()
    queue = HashRingQueueMapper(1, "s").queue_for(SID)
    try:
        for c in range(containers):
            await adapter.enqueue(queue, SID, list(range(c * per_container,
                                                         (c + 1) * per_container)))
    finally:
        await adapter.close()


def reader(path: Path, **options: str) -> StreamReader:
    opts = SourceOptions.parse({"url": f"sqlite:{path}", "provider": "s", "queues": "1",
                                "reader": "r", **options}, streaming=True)
    return StreamReader(opts, None)


def held(path: Path) -> tuple[int, float]:
    with closing(sqlite3.connect(path)) as conn, conn:
        row = conn.execute("SELECT seq, expires FROM stream_hold WHERE reader = 'r'").fetchone()
    return int(row[0]), float(row[1])


async def test_offsets_move_the_hold_and_a_limit_takes_whole_containers(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    await publish(path, 5)
    source = reader(path, startingOffsets="earliest", maxEventsPerTrigger="25")
    start = source.initialOffset()
    assert start == {"s-0": 1} and held(path)[0] == 1
    assert source.getDefaultReadLimit() == ReadMaxRows(25)
    end = source.latestOffset(start, ReadMaxRows(25))
    assert end == {"s-0": 3}  # two containers of 10; a third would pass 25
    assert source.latestOffset(start, ReadAllAvailable()) == {"s-0": 6}
    source.commit(end)
    assert held(path)[0] == 3
    source.commit(start)  # a hold never moves back
    assert held(path)[0] == 3


async def test_a_query_far_behind_says_so(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    await publish(path, 5)
    source = reader(path, startingOffsets="earliest", warnBehind="3")
    start = source.initialOffset()
    with capture_logs() as logs:
        source.latestOffset(start, ReadAllAvailable())
    assert [e["event"] for e in logs] == ["spark_source_far_behind"]
    assert logs[0]["behind"] == {"s-0": 5} and "fix" in logs[0]


async def test_a_lapsed_hold_says_so_when_the_query_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    await publish(path, 2)
    source = reader(path, startingOffsets="earliest", holdSeconds="60")
    start = source.initialOffset()
    assert held(path)[1] > time.time() + 50
    # the query was away for longer than holdSeconds
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE stream_hold SET expires = ?", (time.time() - 1,))
    with capture_logs() as logs:
        source.latestOffset(start, ReadAllAvailable())
    lapsed = [e for e in logs if e["event"] == "spark_source_hold_lapsed"]
    assert lapsed and lapsed[0]["queues"] == ["s-0"] and "holdSeconds" in lapsed[0]["fix"]


async def test_a_query_further_behind_than_its_bound_stops_holding_there(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.db"
    await publish(path, 5)
    source = reader(path, startingOffsets="earliest", maxHoldSequences="3")
    start = source.initialOffset()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE stream_hold SET expires = 1")  # as if set long ago
    with capture_logs() as logs:
        source.latestOffset(start, ReadAllAvailable())
    assert [e["event"] for e in logs] == ["spark_source_hold_not_renewed"]
    assert logs[0]["queues"] == ["s-0"] and "maxHoldSequences" in logs[0]["fix"]
    assert held(path)[1] == 1  # not renewed: the provider may trim once it is past
    source.commit({"s-0": 5})  # caught up: held again
    assert held(path) > (4, time.time())
