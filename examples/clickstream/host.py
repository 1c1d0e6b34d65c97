"""A silo process hosting the clickstream pipeline, for ``examples/clickstream/client.py``.

    python -m examples.clickstream.host --gateway-port 30000 --data-dir /tmp/clicks

It prints ``ready <gateway>`` once it serves clients and stops gracefully on SIGTERM or
SIGINT. The generator makes queues x visitors per queue x views per visitor page views.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from examples.clickstream.grains import NAMESPACE, make_pageview, visitor_key
from examples.clickstream.interfaces import VIEWS_DB, VIEWS_QUEUES
from orleanspy import Silo, SiloOptions
from orleanspy.spark import SparkOptions
from orleanspy.streams import (
    GeneratorAdapterFactory,
    GeneratorOptions,
    PersistentStreamProvider,
    StreamProviderOptions,
)
from orleanspy.streams.adapters import SqliteAdapterFactory
from silo.startup import configure_logging, run_silo

GRAINS = "examples.clickstream.grains"
SPARK = SparkOptions(
    app_name="clickstream",
    conf={"spark.ui.enabled": False, "spark.sql.shuffle.partitions": 4,
          "spark.sql.session.timeZone": "UTC"},
)


def stream_provider(queues: int, visitors_per_queue: int,
                    views_per_visitor: int) -> PersistentStreamProvider:
    """The generator of page views: one stream per visitor (``grains.make_pageview``)."""
    return PersistentStreamProvider(
        GeneratorAdapterFactory(GeneratorOptions(
            namespace=NAMESPACE, streams_per_queue=visitors_per_queue,
            events_per_stream=views_per_visitor, payload=make_pageview, keys=visitor_key,
        )),
        StreamProviderOptions(total_queues=queues, batch_size=512, max_delivery_time=600),
    )


def views_provider(data_dir: Path, queues: int = VIEWS_QUEUES) -> PersistentStreamProvider:
    """The durable copy of the page views (``views.db`` in the data folder) that Spark
    reads with the orleanspy source (``grains.ClickAnalytics``). No grain subscribes to its
    namespace: its events are acknowledged as they arrive and kept for a day (retention)."""
    return PersistentStreamProvider(
        SqliteAdapterFactory(str(Path(data_dir).resolve() / VIEWS_DB)),
        StreamProviderOptions(total_queues=queues, retention=86_400.0))


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateway-port", type=int, default=30000)
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--visitors-per-queue", type=int, default=25)
    parser.add_argument("--views-per-visitor", type=int, default=60)
    args = parser.parse_args(argv)
    options = SiloOptions(gateway_port=args.gateway_port, data_dir=str(args.data_dir),
                          storage="memory", reminders="memory")
    provider = stream_provider(args.queues, args.visitors_per_queue, args.views_per_visitor)

    def ready(silo: Silo) -> None:
        print(f"ready {silo.gateway.address}", flush=True)

    return await run_silo(options, [GRAINS], on_ready=ready,
                          stream_providers={"clicks": provider,
                                            "views": views_provider(args.data_dir)},
                          spark=SPARK)


if __name__ == "__main__":
    configure_logging("console", "warning")
    sys.exit(asyncio.run(main()))
