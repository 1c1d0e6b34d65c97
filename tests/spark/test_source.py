"""``format("orleanspy")`` read by Spark: in batch (a backfill) and as a Structured
Streaming source, over a real SQLite queue file, on the tests' shared SparkSession."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from orleanspy.spark import SparkSessionManager
from orleanspy.streams.adapters.sqlite import SqliteQueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

QUEUES = 4
KEYS = range(8)


@pytest.fixture
def spark(spark_manager: SparkSessionManager) -> Iterator[Any]:
    from orleanspy.spark.datasource import register

    session = spark_manager.session_nowait()
    register(session)
    yield session


async def publish(path: Path, numbers: range, namespace: str = "numbers",
                  per_container: int = 5) -> None:
    """Numbers ``numbers`` on each stream ``namespace/KEY``, ``per_container`` per enqueue."""
    adapter = SqliteQueueAdapter("s", str(path))
    await adapter.open()
    mapper = HashRingQueueMapper(QUEUES, "s")
    try:
        for key in KEYS:
            sid = StreamId(namespace, key)
            for first in range(numbers.start, numbers.stop, per_container):
                chunk = [{"n": n, "k": key} for n in range(first, min(first + per_container,
                                                                         numbers.stop))]
                await adapter.enqueue(mapper.queue_for(sid), sid, chunk)
    finally:
        await adapter.close()


def source(spark: Any, path: Path, via: Any = None, **options: str) -> Any:
    read = (via or spark.read).format("orleanspy").option("url", f"sqlite:{path}")
    read = read.option("provider", "s").option("queues", str(QUEUES))
    for name, value in options.items():
        read = read.option(name, value)
    return read


def pairs(rows: list[Any]) -> list[tuple[int, int]]:
    return sorted((int(r["key"]), json.loads(r["event"])["n"]) for r in rows)


def everything(numbers: range) -> list[tuple[int, int]]:
    return sorted((k, n) for k in KEYS for n in numbers)


async def test_batch_read_returns_every_event_once_with_its_token(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "q.db"
    await publish(path, range(40))
    await publish(path, range(3), namespace="other")
    df = source(spark, path, namespaces="numbers").load()
    assert df.columns == ["namespace", "key", "sequence", "index", "time", "event"]
    rows = await asyncio.to_thread(df.collect)
    assert pairs(rows) == everything(range(40))
    first = min(rows, key=lambda r: (r["sequence"], r["index"]))
    assert first["index"] == 0 and first["time"] is not None
    assert {r["index"] for r in rows} == set(range(5))  # five events per container
    everything_df = source(spark, path).load()
    assert await asyncio.to_thread(everything_df.count) == 40 * 8 + 3 * 8


async def test_reads_of_many_pages_keep_each_events_own_token_and_stream(
    spark: Any, tmp_path: Path
) -> None:
    """Pages of two containers (the next page is read while one becomes rows), containers
    of uneven sizes, and streaming ranges that end inside a page: every row carries its
    own event's stream, sequence, index and time."""
    path = tmp_path / "q.db"
    await publish(path, range(23), per_container=4)  # six containers a key, the last of 3
    rows = await asyncio.to_thread(source(spark, path, pageSize="2").load().collect)
    assert pairs(rows) == everything(range(23))
    for r in rows:
        event = json.loads(r["event"])
        assert int(r["key"]) == event["k"] and r["namespace"] == "numbers"
        assert r["index"] == event["n"] % 4  # its place in its container
    by_container: dict[int, list[Any]] = {}
    for r in rows:
        by_container.setdefault(r["sequence"], []).append(r)
    for seq, members in by_container.items():
        assert len({(m["key"], m["time"]) for m in members}) == 1, seq  # one container's
        assert sorted(m["index"] for m in members) == list(range(len(members)))
    stream = source(spark, path, spark.readStream, reader="pages", pageSize="2",
                    startingOffsets="earliest", maxEventsPerTrigger="9").load()
    query = (stream.writeStream.format("memory").queryName("orleanspy_pages")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        await asyncio.to_thread(query.processAllAvailable)
        streamed = spark.sql("SELECT * FROM orleanspy_pages").collect()
        assert sorted((r["sequence"], r["index"], r["event"]) for r in streamed) == sorted(
            (r["sequence"], r["index"], r["event"]) for r in rows)
    finally:
        query.stop()


async def test_a_schema_of_ones_own_takes_the_events_fields(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    await publish(path, range(10))
    df = source(spark, path).schema("key STRING, sequence BIGINT, n BIGINT, k INT, x STRING")
    rows = await asyncio.to_thread(df.load().collect)
    assert sorted((int(r["key"]), r["n"]) for r in rows) == everything(range(10))
    assert all(r["k"] == int(r["key"]) and r["x"] is None for r in rows)


async def test_a_stream_filter_and_a_time_window(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    await publish(path, range(10))
    rows = await asyncio.to_thread(source(spark, path, streams="numbers/3").load().collect)
    assert pairs(rows) == [(3, n) for n in range(10)]
    late = source(spark, path, startingOffsets="4102444800").load()  # 2100: nothing yet
    assert await asyncio.to_thread(late.count) == 0


def test_bad_options_name_the_fix(spark: Any, tmp_path: Path) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    errors = (PySparkException, Py4JJavaError)
    with pytest.raises(errors, match="durable adapter"):
        spark.read.format("orleanspy").option("url", "memory").load().collect()
    with pytest.raises(errors, match="option url is missing"):
        spark.read.format("orleanspy").load().collect()
    with pytest.raises(errors, match="absolute path"):
        spark.read.format("orleanspy").option("url", "sqlite:streams.db").load().collect()
    with pytest.raises(errors, match="startingOffsets"):
        source(spark, tmp_path / "q.db", startingOffsets="yesterday").load().collect()


def hold_of(path: Path, reader: str) -> dict[str, int]:
    with closing(sqlite3.connect(path)) as conn, conn:
        return dict(conn.execute("SELECT queue, seq FROM stream_hold WHERE reader = ?",
                                 (reader,)).fetchall())


async def test_streaming_reads_new_events_exactly_once_and_commits_its_hold(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "q.db"
    await publish(path, range(20))
    stream = source(spark, path, spark.readStream, reader="test-stream",
                    startingOffsets="earliest", maxEventsPerTrigger="40").load()
    query = (stream.writeStream.format("memory").queryName("orleanspy_stream")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        await asyncio.to_thread(query.processAllAvailable)
        await publish(path, range(20, 30))
        await asyncio.to_thread(query.processAllAvailable)
        rows = spark.sql("SELECT * FROM orleanspy_stream").collect()
        assert pairs(rows) == everything(range(30))  # each once: nothing read twice
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert len(sizes) > 1 and max(sizes) <= 40, sizes  # maxEventsPerTrigger
        newest = max(r["sequence"] for r in rows)
        await asyncio.to_thread(query.processAllAvailable)  # the last batch's commit
        holds = hold_of(path, "test-stream")
        assert sorted(holds) == [f"s-{i}" for i in range(QUEUES)]
        assert max(holds.values()) == newest + 1  # committed: the reader needs what follows
    finally:
        query.stop()


async def test_streaming_from_latest_skips_what_was_there(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    await publish(path, range(10))
    stream = source(spark, path, spark.readStream, reader="latest").load()
    query = (stream.writeStream.format("memory").queryName("orleanspy_latest")
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    try:
        await asyncio.to_thread(query.processAllAvailable)
        await publish(path, range(10, 15))
        await asyncio.to_thread(query.processAllAvailable)
        rows = spark.sql("SELECT * FROM orleanspy_latest").collect()
        assert pairs(rows) == everything(range(10, 15))
    finally:
        query.stop()


async def test_batch_read_of_redis_queues(spark: Any, redis_url: str) -> None:
    from orleanspy.streams.adapters.redis import RedisQueueAdapter

    adapter = RedisQueueAdapter("s", redis_url)
    await adapter.open()
    mapper = HashRingQueueMapper(QUEUES, "s")
    try:
        for key in KEYS:
            sid = StreamId("numbers", key)
            await adapter.enqueue(mapper.queue_for(sid), sid, [{"n": n} for n in range(7)])
    finally:
        await adapter.close()
    df = (spark.read.format("orleanspy").option("url", redis_url).option("provider", "s")
          .option("queues", str(QUEUES)).load())
    assert pairs(await asyncio.to_thread(df.collect)) == everything(range(7))
