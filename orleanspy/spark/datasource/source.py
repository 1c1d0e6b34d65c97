"""``OrleansPyDataSource``: the ``"orleanspy"`` format of Spark's Python data source API."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from orleanspy.spark.datasource.options import FORMAT, SinkOptions, SourceOptions
from orleanspy.spark.datasource.reader import BatchReader, StreamReader
from orleanspy.spark.datasource.rows import DEFAULT_SCHEMA
from orleanspy.spark.datasource.writer import BatchWriter, StreamWriter

__all__ = ["OrleansPyDataSource", "register"]


class OrleansPyDataSource(DataSource):
    """Read and write the events of an orleanspy stream provider's durable queues."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return DEFAULT_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return BatchReader(SourceOptions.parse(self.options, streaming=False), schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return StreamReader(SourceOptions.parse(self.options, streaming=True), schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(SinkOptions.parse(self.options))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(SinkOptions.parse(self.options))


def register(spark: Any) -> None:
    """Make ``format("orleanspy")`` available on ``spark`` (a SparkSession), and make
    ``spark`` the active session of the calling thread.

    Classic Spark finds a Python data source through the active session of the thread that
    builds the query (``load``, ``save``, ``start``): call ``register`` in every thread that
    does, e.g. first thing in a Spark grain's job function (it is cheap and idempotent).
    """
    spark.dataSource.register(OrleansPyDataSource)
    jvm = getattr(spark, "_jvm", None)  # classic only; Spark Connect has no JVM here
    if jvm is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
