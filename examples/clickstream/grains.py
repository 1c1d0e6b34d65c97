"""The clickstream pipeline's grains: page views -> real-time counters and Parquet -> Spark.

* The generator adapter makes one stream per visitor in the ``pageviews`` namespace
  (``make_pageview``: deterministic, skewed pages, visits separated by long pauses).
* ``PageViewRouter`` (implicit subscriber, one per visitor) counts each view on the
  ``PageCounter`` grain of its page (the real-time totals) and publishes it to the durable
  ``views`` stream provider (SQLite, namespace ``views``, kept by its retention), which
  Spark reads with the orleanspy source.
* ``PageViewSink`` (implicit subscriber, one per visitor) lands the views as Parquet under
  ``<data_dir>/lake/pageviews/date=YYYY-MM-DD/hour=HH/``.
* ``ClickAnalytics`` (a ``SparkGrain``) reads the ``views`` stream with Spark's orleanspy
  source (``spark.read.format("orleanspy")``) and computes top pages, unique visitors and
  sessions per hour, and per-page totals, to check against the counters and against the
  landed Parquet files.

The classes implement the interfaces of ``examples.clickstream.interfaces``, which clients
import instead of this module.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
from pathlib import Path
from typing import Any

from examples.clickstream.interfaces import (
    LAKE,
    NAMESPACE,
    PAGES,
    VIEWS_DB,
    VIEWS_NAMESPACE,
    VIEWS_QUEUES,
    IClickAnalytics,
    IPageCounter,
    ITally,
)
from orleanspy import Grain, always_interleave
from orleanspy.spark import ParquetSink, ParquetSinkOptions, SparkGrain
from orleanspy.streams import SequenceToken, StreamId, implicit_subscription

WEIGHTS = (30, 14, 18, 9, 12, 7, 6, 4)  # a skewed popularity
SESSION_GAP_MS = 30 * 60 * 1000  # a pause longer than this starts a new session
START = int(dt.datetime(2024, 5, 6, tzinfo=dt.UTC).timestamp() * 1000)

_clock: dict[str, tuple[int, int]] = {}  # visitor -> (n, ts) of its last generated view


def _draw(*parts: object) -> int:
    text = "/".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def _gap_ms(user: str, n: int) -> int:
    """Pause before view ``n``: mostly 10 s..5 min, one in eight 40 min..6 h (a new visit)."""
    r = _draw(user, n, "gap")
    if r % 8 == 0:
        return 40 * 60_000 + r % (320 * 60_000)
    return 10_000 + r % 290_000


def make_pageview(stream_id: StreamId, n: int) -> dict[str, Any]:
    """The n-th page view of a visitor (same inputs, same view: runs are reproducible)."""
    user = str(stream_id.key)
    last = _clock.get(user)
    if last is not None and last[0] == n - 1:
        ts = last[1] + _gap_ms(user, n)
    else:  # not called in order: recompute from the visitor's first view
        ts = START + _draw(user, "start") % (36 * 3_600_000)
        for i in range(1, n + 1):
            ts += _gap_ms(user, i)
    _clock[user] = (n, ts)
    pick = _draw(user, n, "page") % sum(WEIGHTS)
    index = 0
    while pick >= WEIGHTS[index]:
        pick -= WEIGHTS[index]
        index += 1
    return {"user": user, "page": PAGES[index], "ts": ts}


def visitor_key(queue: Any, i: int) -> str:
    return f"visitor-{queue.index:02d}-{i:03d}"


class PageCounter(Grain, IPageCounter):
    """Real-time views of one page."""

    def __init__(self) -> None:
        self.views = 0

    async def record(self, count: int = 1) -> None:
        self.views += count

    async def total(self) -> int:
        return self.views


class Tally(Grain, ITally):
    """How far the pipeline got: views counted in real time and views landed as Parquet."""

    def __init__(self) -> None:
        self.counted = 0
        self.landed = 0
        self.changed = asyncio.Event()

    async def add(self, counted: int = 0, landed: int = 0) -> None:
        self.counted += counted
        self.landed += landed
        self.changed.set()

    @always_interleave
    async def wait_for(self, expected: int) -> dict[str, int]:
        """Return once ``expected`` views are both counted and landed."""
        while self.counted < expected or self.landed < expected:
            self.changed.clear()
            await self.changed.wait()
        return {"counted": self.counted, "landed": self.landed}


@implicit_subscription(NAMESPACE)
class PageViewRouter(Grain):
    """Copies each view of its visitor's stream to the durable ``views`` stream and counts it
    on the page's counter, once per token."""

    def __init__(self) -> None:
        self.last: SequenceToken | None = None

    async def on_next(self, view: dict[str, Any], token: SequenceToken) -> None:
        if self.last is not None and token <= self.last:
            return  # a redelivery after a failed delivery: already counted
        # the durable copy first: a retried delivery may publish a view twice (Spark drops
        # the copies), but counts it once
        await self.get_stream_provider("views").get_stream(VIEWS_NAMESPACE, self.key).on_next(
            view)
        await self.get_grain(IPageCounter, view["page"]).record(1)
        self.last = token
        await self.get_grain(ITally, "all").add(counted=1)


@implicit_subscription(NAMESPACE)
class PageViewSink(ParquetSink):
    """Lands every view under ``<data_dir>/lake/pageviews`` (partitioned by date and hour)."""

    sink_options = ParquetSinkOptions(
        path=LAKE, timestamp_field="ts",
        columns={"user": "string", "page": "string", "ts": "int64"},
    )

    async def on_commit(self, files: list[str], events: int) -> None:
        await self.get_grain(ITally, "all").add(landed=events)


def _report_job(spark: Any, data_dir: str, queues: int, path: str, top_n: int,
                gap_ms: int) -> dict[str, Any]:
    """Runs on a Spark worker thread: every aggregate in Spark, small results back. The
    views come from the durable ``views`` stream through the orleanspy source; the landed
    Parquet files give the per-page totals again, to check."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from orleanspy.spark.datasource import register

    register(spark)  # (in this thread: the source is found through its active session)
    data = Path(data_dir).resolve()
    views_db, path = str(data / VIEWS_DB), str(data / path)  # (an absolute path stays)
    views = (spark.read.format("orleanspy")
             .option("url", f"sqlite:{views_db}").option("provider", "views")
             .option("queues", queues).option("namespaces", VIEWS_NAMESPACE)
             .schema("sequence BIGINT, `index` INT, user STRING, page STRING, ts BIGINT")
             .load()
             .dropDuplicates(["user", "ts"]))  # (a view published again by a retry)
    lake = spark.read.parquet(path).groupBy("page").count().collect()
    per_page = views.groupBy("page").agg(
        F.count("*").alias("views"), F.countDistinct("user").alias("visitors")
    )
    totals = {r["page"]: int(r["views"]) for r in per_page.collect()}
    top = per_page.orderBy(F.desc("views"), "page").limit(top_n).collect()
    visitors = views.select(F.countDistinct("user").alias("n")).collect()[0]["n"]
    by_user = Window.partitionBy("user").orderBy("ts", "sequence", "index")
    starts = (
        views.withColumn("prev", F.lag("ts").over(by_user))
        .where(F.col("prev").isNull() | (F.col("ts") - F.col("prev") > gap_ms))
        .withColumn("hour", F.date_trunc("hour", F.timestamp_millis("ts")))
    )
    per_hour = starts.groupBy("hour").count().orderBy("hour").collect()
    return {
        "views": sum(totals.values()),
        "unique_visitors": int(visitors),
        "page_totals": totals,
        "lake_page_totals": {r["page"]: int(r["count"]) for r in lake},
        "top_pages": [{"page": r["page"], "views": int(r["views"]),
                       "visitors": int(r["visitors"])} for r in top],
        "sessions": sum(int(r["count"]) for r in per_hour),
        "sessions_per_hour": [
            {"hour": r["hour"].strftime("%Y-%m-%d %H:00"), "sessions": int(r["count"])}
            for r in per_hour
        ],
    }


class ClickAnalytics(SparkGrain, IClickAnalytics):
    """Analytics over the page views: the durable stream through Spark's orleanspy source,
    and the landed Parquet files."""

    async def report(self, path: str = LAKE, top_n: int = 5) -> dict[str, Any]:
        data = self.silo.options.data_dir
        return await self.run_job(_report_job, data, VIEWS_QUEUES, path, top_n,
                                  SESSION_GAP_MS, timeout=600,
                                  description="clickstream report")
