"""The clickstream pipeline end to end, in one process: generator -> counters + Parquet + a
durable stream -> Spark (reading the stream with the orleanspy source).

Run with ``make clickstream`` (or ``python -m examples.clickstream.run``). It prints the
report and exits 0 when Spark's per-page totals equal the real-time counters exactly.

The silo is the one ``examples/clickstream/host.py`` runs as a process; the steps after its
start are those of ``examples/clickstream/client.py``, through the grain interfaces.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from examples.clickstream.client import check, collect
from examples.clickstream.grains import (
    NAMESPACE,
    ClickAnalytics,
    PageCounter,
    PageViewRouter,
    PageViewSink,
    Tally,
)
from examples.clickstream.host import SPARK, stream_provider, views_provider
from examples.clickstream.interfaces import VIEWS_DB
from orleanspy import Silo, SiloOptions
from orleanspy.spark import SparkOptions, SparkSessionManager


def _fresh(data_dir: Path) -> Path:
    """Remove the lake and the views stream of an earlier run; the lake's folder."""
    lake = data_dir / "lake" / NAMESPACE
    shutil.rmtree(lake, ignore_errors=True)
    for stale in data_dir.glob(f"{VIEWS_DB}*"):
        stale.unlink()
    return lake


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
    lake = _fresh(data_dir)
    expected = queues * visitors_per_queue * views_per_visitor
    silo = Silo(
        SiloOptions(gateway_port=None, data_dir=str(data_dir)),
        grains=[PageCounter, Tally, PageViewRouter, PageViewSink, ClickAnalytics],
        stream_providers={"clicks": stream_provider(queues, visitors_per_queue,
                                                    views_per_visitor),
                          "views": views_provider(data_dir)},
        spark=spark,
    )
    async with silo:
        report = await collect(silo, expected, timeout)
    files = sorted(lake.glob("date=*/hour=*/*.parquet"))
    report.update(files=len(files), dates=sorted({f.parent.parent.name for f in files}))
    return report


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
    return check(report)


if __name__ == "__main__":
    from silo.startup import configure_logging

    configure_logging("console", "warning")
    sys.exit(asyncio.run(main()))
