"""The clickstream pipeline end to end, in one silo: generator -> counters + Parquet -> Spark.

Run with ``make clickstream`` (or ``python -m examples.clickstream.run``). It prints the
report and exits 0 when Spark's per-page totals equal the real-time counters exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from examples.clickstream.grains import (
    NAMESPACE,
    PAGES,
    ClickAnalytics,
    PageCounter,
    PageViewRouter,
    PageViewSink,
    Tally,
    make_pageview,
    visitor_key,
)
from orleanspy import Silo, SiloOptions
from orleanspy.spark import SparkOptions, SparkSessionManager
from orleanspy.streams import (
    GeneratorAdapterFactory,
    GeneratorOptions,
    PersistentStreamProvider,
    StreamProviderOptions,
)

SPARK = SparkOptions(
    app_name="clickstream",
    conf={"spark.ui.enabled": False, "spark.sql.shuffle.partitions": 4,
          "spark.sql.session.timeZone": "UTC"},
)


async def run_pipeline(
    data_dir: Path,
    *,
    queues: int = 4,
    visitors_per_queue: int = 25,
    views_per_visitor: int = 60,
    spark: SparkOptions | SparkSessionManager = SPARK,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Run the pipeline once on a fresh ``data_dir``; returns the report plus the counters."""
    lake = data_dir / "lake" / NAMESPACE
    shutil.rmtree(lake, ignore_errors=True)
    expected = queues * visitors_per_queue * views_per_visitor
    provider = PersistentStreamProvider(
        GeneratorAdapterFactory(GeneratorOptions(
            namespace=NAMESPACE, streams_per_queue=visitors_per_queue,
            events_per_stream=views_per_visitor, payload=make_pageview, keys=visitor_key,
        )),
        StreamProviderOptions(total_queues=queues, batch_size=512, max_delivery_time=600),
    )
    silo = Silo(
        SiloOptions(gateway_port=None, data_dir=str(data_dir)),
        grains=[PageCounter, Tally, PageViewRouter, PageViewSink, ClickAnalytics],
        stream_providers={"clicks": provider},
        spark=spark,
    )
    started = time.monotonic()
    async with silo:
        progress = await silo.get_grain(Tally, "all").with_timeout(timeout).wait_for(expected)
        streamed = time.monotonic() - started
        counters = {page: await silo.get_grain(PageCounter, page).total() for page in PAGES}
        started = time.monotonic()
        report: dict[str, Any] = await silo.get_grain(ClickAnalytics, "daily").with_timeout(
            timeout).report(str(lake), 5)
        analysed = time.monotonic() - started
    files = sorted(lake.glob("date=*/*.parquet"))
    report.update(expected=expected, counters=counters, progress=progress,
                  files=len(files), dates=sorted({f.parent.name for f in files}),
                  streamed_seconds=streamed, spark_seconds=analysed)
    return report


def print_report(report: dict[str, Any]) -> None:
    print(f"  {report['expected']} page views -> {report['files']} Parquet files in "
          f"{', '.join(report['dates'])} ({report['streamed_seconds']:.1f} s)")
    print(f"  Spark report in {report['spark_seconds']:.1f} s: {report['views']} views, "
          f"{report['unique_visitors']} unique visitors, {report['sessions']} sessions")
    print("  top pages:")
    for row in report["top_pages"]:
        print(f"    {row['page']:<12} {row['views']:>6} views  {row['visitors']:>4} visitors")
    print("  sessions per hour (first 6):")
    for row in report["sessions_per_hour"][:6]:
        print(f"    {row['hour']}  {row['sessions']:>4}")
    print("  page          real-time      Spark")
    for page, count in sorted(report["counters"].items()):
        spark = report["page_totals"].get(page, 0)
        mark = "" if spark == count else "   MISMATCH"
        print(f"    {page:<12} {count:>9} {spark:>10}{mark}")


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--visitors-per-queue", type=int, default=25)
    parser.add_argument("--views-per-visitor", type=int, default=60)
    parser.add_argument("--master", default=None, help="Spark master (default local[*])")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeatable), e.g. "
                             "spark.driver.host=10.0.0.5 for a cluster's executors to reach")
    parser.add_argument("--data-dir", default=None,
                        help="keep the data here (default: a temporary folder)")
    args = parser.parse_args(argv)
    conf = dict(SPARK.conf)
    for item in args.spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--spark-conf takes KEY=VALUE, got {item!r}")
        conf[key] = value
    options = SparkOptions(master=args.master or SPARK.master, app_name=SPARK.app_name,
                           conf=conf)
    print("clickstream: generator -> real-time counters + Parquet sink -> Spark grain")
    with tempfile.TemporaryDirectory(prefix="orleanspy-clickstream-") as tmp:
        data_dir = Path(args.data_dir) if args.data_dir else Path(tmp)
        report = await run_pipeline(
            data_dir, visitors_per_queue=args.visitors_per_queue,
            views_per_visitor=args.views_per_visitor, spark=options,
        )
    print_report(report)
    if report["page_totals"] != report["counters"]:
        print("FAILED: Spark's per-page totals differ from the real-time counters")
        return 1
    print("done: Spark's per-page totals equal the real-time counters exactly")
    return 0


if __name__ == "__main__":
    from silo.startup import configure_logging

    configure_logging("console", "warning")
    sys.exit(asyncio.run(main()))
