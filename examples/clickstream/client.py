"""The clickstream client: waits for the pipeline, reads the counters, asks Spark for the report.

It imports the grain interfaces (``examples.clickstream.interfaces``), never the grains nor
Spark: run it against a silo hosting the pipeline (``python -m examples.clickstream.host``)::

    python -m examples.clickstream.client --gateway 127.0.0.1:30000

It prints the report and exits 0 when Spark's per-page totals equal the real-time counters.
``examples/clickstream/run.py`` runs the same steps against a silo in its own process.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from examples.clickstream.interfaces import LAKE, PAGES, IClickAnalytics, IPageCounter, ITally
from orleanspy import ClusterClient, Silo


async def collect(grains: Silo | ClusterClient, expected: int,
                  timeout: float = 120.0) -> dict[str, Any]:
    """Wait until ``expected`` views are counted and landed, then read every page's counter
    and the Spark report; returns the report plus ``counters`` and ``progress``."""
    started = time.monotonic()
    progress = await grains.get_grain(ITally, "all").with_timeout(timeout).wait_for(expected)
    streamed = time.monotonic() - started
    counters = {page: await grains.get_grain(IPageCounter, page).total() for page in PAGES}
    started = time.monotonic()
    report: dict[str, Any] = await grains.get_grain(
        IClickAnalytics, "daily").with_timeout(timeout).report(LAKE, 5)
    report.update(expected=expected, counters=counters, progress=progress,
                  streamed_seconds=streamed, spark_seconds=time.monotonic() - started)
    return report


def print_report(report: dict[str, Any]) -> None:
    where = (f" -> {report['files']} Parquet files in {', '.join(report['dates'])}"
             if "files" in report else "")
    print(f"  {report['expected']} page views{where} ({report['streamed_seconds']:.1f} s)")
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


def check(report: dict[str, Any]) -> int:
    """Print the report; 0 when Spark's per-page totals equal the real-time counters."""
    print_report(report)
    if report["page_totals"] != report["counters"]:
        print("FAILED: Spark's per-page totals (the views stream) differ from the real-time "
              "counters")
        return 1
    if report["lake_page_totals"] != report["counters"]:
        print("FAILED: the landed Parquet files' per-page totals differ from the counters")
        return 1
    print("done: Spark's per-page totals equal the real-time counters exactly (read from the "
          "views stream, and from the Parquet lake)")
    return 0


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateway", action="append", metavar="HOST:PORT",
                        help="a gateway of the silo (repeatable; default 127.0.0.1:30000)")
    parser.add_argument("--expected", type=int, default=4 * 25 * 60,
                        help="page views the generator makes (queues x visitors per queue x "
                        "views per visitor; default: the host's defaults, 6000)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds to wait for the pipeline and for the report")
    args = parser.parse_args(argv)
    gateways = args.gateway or ["127.0.0.1:30000"]
    async with ClusterClient(gateways=gateways) as client:
        report = await collect(client, args.expected, args.timeout)
    return check(report)


if __name__ == "__main__":
    from silo.startup import configure_logging

    configure_logging("console", "warning")
    sys.exit(asyncio.run(main()))
