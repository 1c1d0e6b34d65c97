"""Spark grains: the cost of the grain path over direct PySpark, and a free loop under a job.

Figures (baselines measured in the same run, same process, same warm SparkSession):

* ``spark_job``: a warm aggregation (``range(N) -> groupBy(id % 100) -> count``) called as
  ``await grain.method()`` (grain call -> ``run_job`` -> worker thread, job group and tag,
  progress polling, result conversion) against the same function called directly on the
  session (the obvious synchronous PySpark code). Jobs/s; the target is "the grain adds at
  most 10 ms + 5 %", printed as the target ratio.
* ``spark_noop``: a call whose job touches the JVM once (``sc.defaultParallelism``) and starts
  no Spark job: the fixed overhead of the path.
* ``grain_call_p50_under_spark`` / ``grain_call_p99_under_spark``: latency of concurrent grain
  calls (10 callers, one call each per 10 ms) while a 10-second Spark job runs, against the
  same calls with Spark idle. Microseconds; lower is better (the acceptance bar: p99 < 50 ms).
* ``spark_source_sqlite`` / ``spark_source_redis``: events/s through the streaming source
  (``readStream.format("orleanspy")``, Trigger.AvailableNow) into Parquet, against Spark
  reading the same events from JSON-lines files into Parquet, with the same columns and
  values (the source's default schema, each event's token and enqueue time read back from
  the queues); runs
  interleaved (``--source-runs``), medians compared; the target is 0.5x. The ``_batches``
  rows count only the micro-batches' execution (``triggerExecution``), without the query's
  start (for the source: a Python process that plans the offsets).

* ``lake_files_after_compaction`` / ``lake_first_query_after_compaction``: ~45,000 page views
  landed as a ``ParquetSink`` writes them (one file per delivery of 20 events, hourly
  partitions), then compacted (``orleanspy.spark.compaction``): the files of the
  lake, and the time of the first query over it (``spark.read.parquet(lake).groupBy("page")
  .count().collect()``) in a fresh SparkSession of a fresh process; baseline: the same
  before compaction. Lower is better.

Run: ``python benchmarks/spark_grain.py [--json] [--rounds N] [--only lake]
[--only-source] [--source-runs N] [--source-events N] [--redis-url URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import Figure, progress, quiet_logging, report
from orleanspy import Grain, Silo, SiloOptions
from orleanspy.spark import (
    ParquetSinkOptions,
    ParquetSinkWriter,
    SparkGrain,
    SparkJobTimeoutError,
    SparkOptions,
    SparkSessionManager,
    install_spark,
)
from orleanspy.spark.compaction import compact

ROWS = 2_000_000
BUSY_SECONDS = 10.0
LAKE_STREAMS = 45  # x 1,000 events, 20 per delivery: ~2,250 files
LAKE_EVENTS_PER_STREAM = 1_000
LAKE_PER_DELIVERY = 20
LAKE_DAY_MS = 1_709_251_200_000  # 2024-03-01T00:00:00Z, long closed (25 hourly partitions)
FIRST_QUERY = """
import json, sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").appName("bench-lake")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.sparkContext.setJobGroup("first-query", "first query")
t0 = time.perf_counter()
rows = spark.read.parquet(sys.argv[1]).groupBy("page").count().collect()
seconds = time.perf_counter() - t0
tracker = spark.sparkContext.statusTracker()
tasks = sum(tracker.getStageInfo(s).numTasks for j in tracker.getJobIdsForGroup("first-query")
            for s in tracker.getJobInfo(j).stageIds if tracker.getStageInfo(s) is not None)
print(json.dumps({"seconds": seconds, "tasks": tasks, "rows": sum(r["count"] for r in rows)}))
spark.stop()
"""


def aggregate(spark: Any, rows: int) -> list[Any]:
    return spark.range(rows).selectExpr("id % 100 AS k").groupBy("k").count().collect()


def noop(spark: Any) -> int:
    return int(spark.sparkContext.defaultParallelism)


def forever(spark: Any) -> Any:
    return spark.range(0, 10**12, 1, 2).selectExpr("sum(id % 7)").collect()


class BenchAnalytics(SparkGrain):
    async def aggregate(self, rows: int) -> list[dict[str, Any]]:
        return await self.run_job(aggregate, rows)

    async def noop(self) -> int:
        return await self.run_job(noop)

    async def busy(self, seconds: float) -> bool:
        try:
            await self.run_job(forever, timeout=seconds)
        except SparkJobTimeoutError:
            return True
        return False


class Echo(Grain):
    async def ping(self, x: int) -> int:
        return x


def _median_time(samples: list[float]) -> float:
    return statistics.median(samples)


async def job_figures(silo: Silo, spark: Any, rounds: int) -> list[Figure]:
    grain = silo.get_grain(BenchAnalytics, "bench")
    figures = []
    for name, direct, via_grain in (
        ("spark_job", lambda: aggregate(spark, ROWS), lambda: grain.aggregate(ROWS)),
        ("spark_noop", lambda: noop(spark), lambda: grain.noop()),
    ):
        direct()  # warm both paths
        await via_grain()
        ours: list[float] = []
        base: list[float] = []
        for _ in range(rounds):  # interleaved, so that drift hits both alike
            t0 = time.perf_counter()
            direct()
            base.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await via_grain()
            ours.append(time.perf_counter() - t0)
        t_ours, t_base = _median_time(ours), _median_time(base)
        allowed = t_base * 1.05 + 0.010
        figures.append(Figure(
            name, 1 / t_ours, "jobs/s", 1 / t_base, t_base / allowed,
            f"median of {rounds}: grain {t_ours * 1000:.1f} ms, direct {t_base * 1000:.1f} ms, "
            f"overhead {(t_ours - t_base) * 1000:+.1f} ms; target = at most 10 ms + 5 %",
        ))
        progress(f"{name}: grain {t_ours * 1000:.1f} ms, direct {t_base * 1000:.1f} ms")
    return figures


async def call_latencies(silo: Silo, seconds: float) -> list[float]:
    refs = [silo.get_grain(Echo, i) for i in range(10)]
    latencies: list[float] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds

    async def caller(ref: Any) -> None:
        while loop.time() < end:
            t0 = time.perf_counter()
            await ref.ping(1)
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(caller(r) for r in refs))
    return latencies


async def latency_figures(silo: Silo, seconds: float) -> list[Figure]:
    idle = await call_latencies(silo, 3.0)
    grain = silo.get_grain(BenchAnalytics, "busy")
    job = asyncio.ensure_future(grain.with_timeout(seconds + 30).busy(seconds))
    await asyncio.sleep(1.0)  # let the job get going (its tasks are running after ~0.5 s)
    busy = await call_latencies(silo, seconds - 1.5)
    still_running = not job.done()
    timed_out = await job
    progress(f"latency under Spark: job ran throughout={still_running}, cancelled at its "
             f"timeout={timed_out}, {len(busy)} calls")

    def pct(values: list[float], q: int) -> float:
        return statistics.quantiles(values, n=100)[q - 1] * 1e6

    progress(f"grain calls under Spark: p50 {pct(busy, 50) / 1000:.2f} ms, p99 "
             f"{pct(busy, 99) / 1000:.2f} ms (idle: p50 {pct(idle, 50) / 1000:.2f} ms, p99 "
             f"{pct(idle, 99) / 1000:.2f} ms)")
    return [
        Figure("grain_call_p50_under_spark", pct(busy, 50), "us", pct(idle, 50), 0.0,
               "lower is better; baseline: the same calls with Spark idle"),
        Figure("grain_call_p99_under_spark", pct(busy, 99), "us", pct(idle, 99), 0.0,
               f"lower is better; acceptance p99 < 50 ms: "
               f"{'met' if pct(busy, 99) < 50_000 else 'MISSED'}"),
    ]


def land_small_files(root: Path) -> int:
    """Land the trial's page views as the sink writes them: one file per delivery."""
    writer = ParquetSinkWriter(root, ParquetSinkOptions(
        fsync=False, columns={"user": "string", "page": "string", "ts": "int64"}))
    step = 90_000  # 40 events an hour: each delivery of 20 fills half an hour, one file
    for s in range(LAKE_STREAMS):
        for first in range(0, LAKE_EVENTS_PER_STREAM, LAKE_PER_DELIVERY):
            events = [({"user": f"u{s}", "page": f"/p{(s * 7 + n) % 50}",
                        "ts": LAKE_DAY_MS + n * step}, (n, 0))
                      for n in range(first, first + LAKE_PER_DELIVERY)]
            writer.write(f"pageviews.u{s}", f"u{s}", events)
    return LAKE_STREAMS * LAKE_EVENTS_PER_STREAM


def first_query(root: Path) -> dict[str, Any]:
    """The first query over ``root`` in a fresh SparkSession of a fresh process."""
    out = subprocess.run([sys.executable, "-c", FIRST_QUERY, str(root)], check=True,
                         capture_output=True, text=True, timeout=600)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def lake_figures() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="bench-lake-") as tmp:
        root = Path(tmp) / "pageviews"
        events = land_small_files(root)
        files_before = len(list(root.rglob("*.parquet")))
        before = first_query(root)
        t0 = time.perf_counter()
        result = compact(root)
        compact_seconds = time.perf_counter() - t0
        files_after = len(list(root.rglob("*.parquet")))
        after = first_query(root)
    assert before["rows"] == after["rows"] == events, (before, after, events)
    progress(f"lake: {events} events, {files_before} -> {files_after} files "
             f"({result.partitions} partitions, compaction {compact_seconds:.1f} s); first "
             f"query {before['seconds']:.2f} s / {before['tasks']} tasks -> "
             f"{after['seconds']:.2f} s / {after['tasks']} tasks")
    return [
        Figure("lake_files_after_compaction", files_after, "files", files_before, 0.0,
               f"lower is better; {events} events, one file per delivery of "
               f"{LAKE_PER_DELIVERY}; compaction took {compact_seconds:.1f} s"),
        Figure("lake_first_query_after_compaction", after["seconds"] * 1000, "ms",
               before["seconds"] * 1000, 0.0,
               f"lower is better; fresh SparkSession and process each; tasks "
               f"{before['tasks']} -> {after['tasks']}"),
    ]


SOURCE_EVENTS = 500_000
SOURCE_QUEUES = 8
PER_CONTAINER = 50  # events per enqueue (a stream's events coalesce into containers)


async def _fill_queues(adapter: Any, events: int) -> list[dict[str, Any]]:
    """``events`` page views on 64 streams, ``PER_CONTAINER`` per container; the rows the
    source produces for them (every column of its default schema, read back from the
    queues), for the file baseline."""
    from datetime import UTC, datetime

    from orleanspy.streams.ids import StreamId
    from orleanspy.streams.mapper import HashRingQueueMapper
    from orleanspy.streams.tokens import SequenceToken

    mapper = HashRingQueueMapper(SOURCE_QUEUES, "s")
    sent = 0
    while sent < events:
        sid = StreamId("pageviews", f"user-{(sent // PER_CONTAINER) % 64}")
        batch = [{"user": sid.key, "page": f"/p/{(sent + i) % 97}", "ts": 1_767_225_600_000
                  + sent + i} for i in range(min(PER_CONTAINER, events - sent))]
        await adapter.enqueue(mapper.queue_for(sid), sid, batch)
        sent += len(batch)
    rows: list[dict[str, Any]] = []
    for queue in mapper.all_queues():
        containers = await adapter.read_range(queue, SequenceToken(0), events)
        for c in containers:
            at = datetime.fromtimestamp(c.enqueued_at, UTC).isoformat(timespec="milliseconds")
            rows += [{"namespace": c.stream_id.namespace, "key": str(c.stream_id.key),
                      "sequence": c.token.sequence, "index": i, "time": at, "event": e}
                     for i, e in enumerate(c.values())]
    assert len(rows) == events, (len(rows), events)
    return rows


def _json_files(rows: list[dict[str, Any]], folder: Path) -> None:
    import json

    folder.mkdir(parents=True)
    per_file = len(rows) // SOURCE_QUEUES + 1
    for i in range(SOURCE_QUEUES):
        with (folder / f"part-{i}.json").open("w", encoding="utf-8") as f:
            for row in rows[i * per_file:(i + 1) * per_file]:
                f.write(json.dumps({**row, "event": json.dumps(row["event"])}) + "\n")


def _drain(stream: Any, out: Path) -> tuple[float, float]:
    """Run ``stream`` into Parquet at ``out`` to the end of its input: seconds from start
    to end, and seconds its micro-batches with input took (``triggerExecution``)."""
    t0 = time.perf_counter()
    query = (stream.writeStream.format("parquet").option("path", str(out / "data"))
             .option("checkpointLocation", str(out / "ck")).trigger(availableNow=True)
             .start())
    query.awaitTermination()
    wall = time.perf_counter() - t0
    busy = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress
               if p["numInputRows"]) / 1000
    return wall, busy


async def source_figures(spark: Any, runs: int, events: int,
                         redis_url: str | None) -> list[Figure]:
    """The streaming source into Parquet against JSON-lines files into Parquet."""
    import tempfile

    from orleanspy.spark.datasource import register
    from orleanspy.spark.datasource.rows import DEFAULT_SCHEMA
    from orleanspy.streams.adapters.redis import RedisQueueAdapter
    from orleanspy.streams.adapters.sqlite import SqliteQueueAdapter

    register(spark)
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        backends: list[tuple[str, str, Any]] = [
            ("sqlite", f"sqlite:{folder / 'q.db'}", SqliteQueueAdapter("s", str(folder /
                                                                              "q.db")))]
        if redis_url:
            url = f"{redis_url}?prefix=bench-spark-source-{os.getpid()}"
            backends.append(("redis", url, RedisQueueAdapter("s", url)))
        rows: list[dict[str, Any]] = []
        for _, _, adapter in backends:
            await adapter.open()
            rows = await _fill_queues(adapter, events)
        _json_files(rows, folder / "json")
        files = spark.readStream.schema(DEFAULT_SCHEMA).json(
            str(folder / "json"))
        for name, url, adapter in backends:
            source = (spark.readStream.format("orleanspy").option("url", url)
                      .option("provider", "s").option("queues", str(SOURCE_QUEUES))
                      .option("startingOffsets", "earliest"))
            ours: list[tuple[float, float]] = []
            base: list[tuple[float, float]] = []
            for run in range(runs):  # interleaved, so that drift hits both alike
                base.append(_drain(files, folder / f"files-{name}-{run}"))
                ours.append(_drain(source.option("reader", f"bench-{run}").load(),
                                   folder / f"{name}-{run}"))
                count = spark.read.parquet(str(folder / f"{name}-{run}" / "data")).count()
                assert count == events, f"{name}: {count} rows in Parquet, not {events}"
            for suffix, pick, what in (("", 0, "start to end, query start included"),
                                       ("_batches", 1, "micro-batch execution only")):
                t_ours = _median_time([o[pick] for o in ours])
                t_base = _median_time([b[pick] for b in base])
                figures.append(Figure(
                    f"spark_source_{name}{suffix}", events / t_ours, "events/s",
                    events / t_base, 0.5,
                    f"median of {runs}, {what}: {events} events, source {t_ours:.2f} s, "
                    f"JSON-lines files {t_base:.2f} s; target >= 0.5x the file source"))
                progress(f"spark_source_{name}{suffix}: source {t_ours:.2f} s, files "
                         f"{t_base:.2f} s")
            if name == "redis":
                client = adapter.client
                keys = [k async for k in client.redis.scan_iter(match=client.key("*"))]
                if keys:
                    await client.run(client.redis.delete(*keys))
            await adapter.close()
    return figures


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list of figures")
    parser.add_argument("--rounds", type=int, default=15, help="timed repetitions per job")
    parser.add_argument("--busy-seconds", type=float, default=BUSY_SECONDS)
    parser.add_argument("--only", choices=["lake"], help="run only these figures")
    parser.add_argument("--source-runs", type=int, default=3,
                        help="interleaved runs of the streaming source against files")
    parser.add_argument("--source-events", type=int, default=SOURCE_EVENTS)
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"),
                        help="also measure the source on this Redis (default: $REDIS_URL)")
    parser.add_argument("--only-source", action="store_true",
                        help="measure the streaming source only")
    args = parser.parse_args()
    quiet_logging()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.only == "lake":
        report(lake_figures(), args.json)
        return 0
    manager = SparkSessionManager(SparkOptions(
        master="local[2]", app_name="bench-spark-grain",
        conf={"spark.ui.enabled": False, "spark.sql.shuffle.partitions": 2},
    ))
    progress("starting the SparkSession (about 6-10 s)...")
    await manager.start(warm_up=True)
    silo = Silo(SiloOptions(gateway_port=None), grains=[BenchAnalytics, Echo])
    install_spark(silo, manager)
    try:
        async with silo:
            figures = [] if args.only_source else await job_figures(
                silo, manager.session_nowait(), args.rounds)
            if not args.only_source:
                figures += await latency_figures(silo, args.busy_seconds)
            figures += await source_figures(manager.session_nowait(), args.source_runs,
                                            args.source_events, args.redis_url)
    finally:
        await manager.stop()
    if not args.only_source:
        figures += lake_figures()
    report(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
