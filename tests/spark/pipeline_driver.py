"""A Spark driver of its own process: a streaming query from an orleanspy stream into Parquet
(Spark's file sink, with a checkpoint), run until it is killed or terminated. The exactly-once
test kills it with kill -9 and starts it again on the same checkpoint.

Run: ``python -m tests.spark.pipeline_driver URL PROVIDER QUEUES OUT CHECKPOINT READER``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def main(url: str, provider: str, queues: str, out: str, checkpoint: str, reader: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from orleanspy.spark.datasource import register

    spark = (SparkSession.builder.master("local[2]").appName("orleanspy-pipeline-test")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.memory", "512m")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    register(spark)
    events = (spark.readStream.format("orleanspy").option("url", url)
              .option("provider", provider).option("queues", queues)
              .option("reader", reader).option("startingOffsets", "earliest")
              .option("maxEventsPerTrigger", "2000").load())
    query = (events.writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("pipeline started", flush=True)
    while not stop.wait(0.2):
        if not query.isActive:
            raise SystemExit(f"query ended: {query.exception()}")
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])
