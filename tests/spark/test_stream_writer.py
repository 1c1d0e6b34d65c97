"""``df.write`` / ``df.writeStream`` ``.format("orleanspy")``: rows become events, and a
partition Spark writes again (a retried write, a micro-batch run again after a restart from
its checkpoint) publishes nothing twice."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orleanspy.spark import SparkSessionManager
from orleanspy.streams.adapters.sqlite import SqliteQueueAdapter
from orleanspy.streams.ids import QueueId
from orleanspy.streams.tokens import SequenceToken

QUEUES = 4


@pytest.fixture
def spark(spark_manager: SparkSessionManager) -> Iterator[Any]:
    from orleanspy.spark.datasource import register

    session = spark_manager.session_nowait()
    register(session)
    yield session


async def published(path: Path) -> list[tuple[str, Any, Any]]:
    """(namespace, key, event) of every event in the queues, in queue and token order."""
    adapter = SqliteQueueAdapter("s", str(path))
    await adapter.open()
    try:
        out = []
        for i in range(QUEUES):
            for c in await adapter.read_range(QueueId("s", i), SequenceToken(0), 100_000):
                out += [(c.stream_id.namespace, c.stream_id.key, e) for e in c.events]
        return out
    finally:
        await adapter.close()


def sink(writer: Any, path: Path, **options: str) -> Any:
    w = writer.format("orleanspy").option("url", f"sqlite:{path}").option("provider", "s")
    w = w.option("queues", str(QUEUES))
    for name, value in options.items():
        w = w.option(name, value)
    return w


async def test_a_batch_write_publishes_each_row_once_even_when_run_again(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "q.db"
    df = spark.range(100).selectExpr("CAST(id % 5 AS STRING) AS key", "id AS n",
                                     "'x' AS tag").repartition(3)
    write = sink(df.write.mode("append"), path, namespace="orders", writerId="backfill-1")
    write.save()
    events = await published(path)
    assert sorted(e["n"] for _, _, e in events) == list(range(100))
    assert {(ns, key) for ns, key, _ in events} == {("orders", str(k)) for k in range(5)}
    assert all(e["tag"] == "x" and set(e) == {"n", "tag"} for _, _, e in events)
    write.save()  # the same write (same writerId) once more
    assert len(await published(path)) == 100
    other = sink(df.write.mode("append"), path, namespace="orders", writerId="backfill-2")
    other.save()  # another write publishes anew
    assert len(await published(path)) == 200


async def test_an_event_column_and_a_namespace_column(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    df = spark.range(2).selectExpr(
        "IF(id = 0, 'a', 'b') AS namespace", "CAST(id + 1 AS INT) AS key",
        """IF(id = 0, '{"v": [1, 2]}', 'plain text') AS event""")
    sink(df.write.mode("append"), path).save()
    assert sorted(await published(path), key=str) == [("a", 1, {"v": [1, 2]}),
                                                      ("b", 2, "plain text")]
    no_key = spark.range(3).selectExpr("id AS n")
    with pytest.raises(Exception, match="no column key"):
        sink(no_key.write.mode("append"), path, namespace="x").save()


async def test_a_micro_batch_run_again_from_the_checkpoint_publishes_nothing_twice(
    spark: Any, tmp_path: Path
) -> None:
    path, rows, checkpoint = tmp_path / "q.db", tmp_path / "rows", tmp_path / "ck"
    spark.range(60).selectExpr("CAST(id % 6 AS STRING) AS key", "id AS n").repartition(2) \
        .write.parquet(str(rows / "part-a"))

    def run() -> list[tuple[int, int]]:
        """Run the query to the end of its input: (batch id, rows) of its micro-batches."""
        stream = spark.readStream.schema("key STRING, n BIGINT").parquet(str(rows / "*"))
        query = sink(stream.writeStream, path, namespace="replayed") \
            .option("checkpointLocation", str(checkpoint)).start()
        try:
            query.processAllAvailable()
            return [(p["batchId"], p["numInputRows"]) for p in query.recentProgress
                    if p["numInputRows"]]
        finally:
            query.stop()

    assert run() == [(0, 60)]
    assert sorted(e["n"] for _, _, e in await published(path)) == list(range(60))
    # the micro-batch's commit is lost (a crash after the sink wrote): Spark runs it again
    commits = checkpoint / "commits"
    for entry in commits.iterdir():
        if entry.is_file():
            entry.unlink()
    shutil.rmtree(checkpoint / "state", ignore_errors=True)
    assert run() == [(0, 60)]  # micro-batch 0 again, all its rows written again
    assert sorted(e["n"] for _, _, e in await published(path)) == list(range(60))
    spark.range(60, 70).selectExpr("CAST(id % 6 AS STRING) AS key", "id AS n") \
        .write.parquet(str(rows / "part-b"))
    assert run() == [(1, 10)]  # a new micro-batch publishes its rows
    assert sorted(e["n"] for _, _, e in await published(path)) == list(range(70))
