"""Spark analytics grains and the stream -> Parquet sink.

``SparkGrain`` runs PySpark jobs on the silo's shared, lazily created SparkSession without
blocking the event loop (``await self.run_job(fn, *args, timeout=...)``), with progress and
cancellation; ``ParquetSink`` lands a stream namespace as date-partitioned Parquet files that
Spark grains then analyse. pyspark, pyarrow and pandas come with ``pip install
'orleanspy[spark]'``; they are imported only when a session or a file is first needed.

See docs/spark.md.
"""

from typing import TYPE_CHECKING

from orleanspy._util.lazy import lazy_exports

if TYPE_CHECKING:
    from orleanspy.spark.convert import to_plain
    from orleanspy.spark.errors import (
        SparkError,
        SparkJobCancelledError,
        SparkJobError,
        SparkJobTimeoutError,
        SparkUnavailableError,
    )
    from orleanspy.spark.grain import SparkGrain
    from orleanspy.spark.job import JobProgress, SparkJob
    from orleanspy.spark.options import ParquetSinkOptions, SparkOptions
    from orleanspy.spark.session import (
        SparkSessionManager,
        SparkStatistics,
        install_spark,
        installed_spark,
        spark_for,
    )
    from orleanspy.spark.sink import ParquetSink, ParquetSinkWriter, SinkStatistics

#: each exported name and the module it is imported from on first use
_EXPORTS = {
    "JobProgress": "orleanspy.spark.job",
    "ParquetSink": "orleanspy.spark.sink",
    "ParquetSinkOptions": "orleanspy.spark.options",
    "ParquetSinkWriter": "orleanspy.spark.sink",
    "SinkStatistics": "orleanspy.spark.sink",
    "SparkError": "orleanspy.spark.errors",
    "SparkGrain": "orleanspy.spark.grain",
    "SparkJob": "orleanspy.spark.job",
    "SparkJobCancelledError": "orleanspy.spark.errors",
    "SparkJobError": "orleanspy.spark.errors",
    "SparkJobTimeoutError": "orleanspy.spark.errors",
    "SparkOptions": "orleanspy.spark.options",
    "SparkSessionManager": "orleanspy.spark.session",
    "SparkStatistics": "orleanspy.spark.session",
    "SparkUnavailableError": "orleanspy.spark.errors",
    "install_spark": "orleanspy.spark.session",
    "installed_spark": "orleanspy.spark.session",
    "spark_for": "orleanspy.spark.session",
    "to_plain": "orleanspy.spark.convert",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = [
    "JobProgress",
    "ParquetSink",
    "ParquetSinkOptions",
    "ParquetSinkWriter",
    "SinkStatistics",
    "SparkError",
    "SparkGrain",
    "SparkJob",
    "SparkJobCancelledError",
    "SparkJobError",
    "SparkJobTimeoutError",
    "SparkOptions",
    "SparkSessionManager",
    "SparkStatistics",
    "SparkUnavailableError",
    "install_spark",
    "installed_spark",
    "spark_for",
    "to_plain",
]
