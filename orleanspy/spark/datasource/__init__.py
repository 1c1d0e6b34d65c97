"""Spark reads and writes orleanspy streams: ``format("orleanspy")`` for ``spark.read``,
``spark.readStream``, ``df.write`` and ``df.writeStream`` (PySpark's Python data source API).

```python
from orleanspy.spark.datasource import register
register(spark)
events = (spark.readStream.format("orleanspy")
          .option("url", "redis://127.0.0.1:6379/0?prefix=app").option("provider", "s")
          .option("queues", 8).option("reader", "clicks-to-lake").load())
```

Importing this package imports pyspark. See docs/spark.md, "Pipeline: streams into and
out of Spark".
"""

from orleanspy.spark.datasource.offsets import DataLossError
from orleanspy.spark.datasource.options import FORMAT, SinkOptions, SourceOptions
from orleanspy.spark.datasource.rows import DEFAULT_SCHEMA
from orleanspy.spark.datasource.source import OrleansPyDataSource, register

__all__ = [
    "DEFAULT_SCHEMA",
    "FORMAT",
    "DataLossError",
    "OrleansPyDataSource",
    "SinkOptions",
    "SourceOptions",
    "register",
]
