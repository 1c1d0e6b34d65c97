"""Reads an orleanspy SQLite stream queue file with ``format("orleanspy")`` in batch and as a
stream (Trigger.AvailableNow into memory), on a master of the caller's choice: ``local[*]``
(classic) or ``sc://HOST:PORT`` (Spark Connect). Prints one JSON line: the rows each read.

Run: ``python -m tests.spark.source_client MASTER_OR_URL QUEUE_FILE QUEUES``.
"""

from __future__ import annotations

import json
import os
import sys


def main(where: str, path: str, queues: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from orleanspy.spark.datasource import register

    builder = SparkSession.builder.appName("orleanspy-source-client")
    if where.startswith("sc://"):
        builder = builder.remote(where)
    else:
        builder = (builder.master(where).config("spark.ui.enabled", "false")
                   .config("spark.sql.shuffle.partitions", "2"))
    spark = builder.getOrCreate()
    register(spark)
    options = {"url": f"sqlite:{path}", "provider": "s", "queues": queues}
    batch = spark.read.format("orleanspy").options(**options).load().count()
    stream = (spark.readStream.format("orleanspy").options(**options)
              .option("startingOffsets", "earliest").option("reader", "client").load())
    query = (stream.writeStream.format("memory").queryName("orleanspy_client")
             .trigger(availableNow=True).start())
    query.awaitTermination()
    streamed = spark.sql("SELECT count(*) AS n FROM orleanspy_client").collect()[0]["n"]
    print(json.dumps({"batch": batch, "stream": streamed}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
