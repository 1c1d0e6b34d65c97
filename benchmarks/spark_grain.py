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

* ``lake_files_after_compaction`` / ``lake_first_query_after_compaction``: ~45,000 page views
  landed as a ``ParquetSink`` writes them (one file per delivery of 20 events, hourly
  partitions), then compacted (``orleanspy.spark.compaction``): the files of the
  lake, and the time of the first query over it (``spark.read.parquet(lake).groupBy("page")
  .count().collect()``) in a fresh SparkSession of a fresh process; baseline: the same
  before compaction. Lower is better.

Run: ``python benchmarks/spark_grain.py [--json] [--rounds N] [--only lake]``.
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


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list of figures")
    parser.add_argument("--rounds", type=int, default=15, help="timed repetitions per job")
    parser.add_argument("--busy-seconds", type=float, default=BUSY_SECONDS)
    parser.add_argument("--only", choices=["lake"], help="run only these figures")
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
            figures = await job_figures(silo, manager.session_nowait(), args.rounds)
            figures += await latency_figures(silo, args.busy_seconds)
    finally:
        await manager.stop()
    figures += lake_figures()
    report(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
