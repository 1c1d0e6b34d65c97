"""The sink: each row of a DataFrame becomes one event of stream (``namespace``, ``key``).

Columns: ``key`` (required; the stream key, as its value: a string, an integer), ``namespace``
(else the ``namespace`` option), and the event: the column ``event`` if there is one (a JSON
string is parsed; any other value is the event), else the row's other columns as a map.

Idempotent per (writer, batch, partition): a task's rows are enqueued together with the
marker ``"spark:<writerId>:<batch>:<partition>"`` in one SQLite transaction or one Redis
script (``QueueAdapter.enqueue_once``); a retried task, or a micro-batch Spark runs again
after a restart from its checkpoint, finds the marker and publishes nothing. The rows of a
task are therefore written in one go: keep partitions to what one write can hold (millions
of small events, not billions).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from orleanspy.errors import ConfigurationError
from orleanspy.spark.datasource.log import logger
from orleanspy.spark.datasource.options import SinkOptions
from orleanspy.spark.datasource.store import store_for
from orleanspy.streams.adapters.base import COALESCE_MAX, EnqueueItem
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

__all__ = ["BatchWriter", "Published", "StreamWriter"]

#: Spark's local property naming the micro-batch a task belongs to
_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"


class Published(WriterCommitMessage):
    """What one task did: ``events`` published, or none because its marker was there."""

    def __init__(self, events: int, repeated: bool) -> None:
        self.events, self.repeated = events, repeated


def _event(row: Any, names: list[str]) -> Any:
    if "event" in names:
        value = row["event"]
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value.asDict(recursive=True) if hasattr(value, "asDict") else value
    return {n: row[n] for n in names if n not in ("key", "namespace")}


def _batches(rows: Iterator[Any], opts: SinkOptions) -> list[EnqueueItem]:
    """The rows as containers: each stream's events in row order, COALESCE_MAX at most."""
    mapper = HashRingQueueMapper(opts.queues, opts.provider)
    streams: dict[StreamId, list[Any]] = {}
    names: list[str] | None = None
    for row in rows:
        if names is None:
            names = list(row.__fields__)
            if "key" not in names:
                raise ConfigurationError(
                    "format('orleanspy') sink: the DataFrame has no column key; add the "
                    f"stream key as a column named key (columns: {', '.join(names)})")
        namespace = row["namespace"] if "namespace" in names else opts.namespace
        if not namespace:
            raise ConfigurationError(
                "format('orleanspy') sink: no namespace: add a column namespace or set "
                ".option('namespace', 'orders')")
        key = row["key"]
        streams.setdefault(StreamId(str(namespace), key), []).append(_event(row, names))
    return [(mapper.queue_for(sid), sid, events[first:first + COALESCE_MAX])
            for sid, events in streams.items()
            for first in range(0, len(events), COALESCE_MAX)]


def _publish(rows: Iterator[Any], opts: SinkOptions, writer_id: str, batch: str) -> Published:
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    batches = _batches(rows, opts)
    if not batches:
        return Published(0, False)
    marker = f"spark:{writer_id}:{batch}:{partition}"
    store = store_for(opts.url, opts.provider)
    written = store.enqueue_once(marker, batches, opts.remember)
    events = sum(len(e) for _, _, e in batches)
    if not written:
        logger(__name__).info("spark_sink_partition_repeated", marker=marker,
                                  events=events)
    return Published(events if written else 0, not written)


class BatchWriter(DataSourceWriter):
    """``df.write.format("orleanspy")``: one marker per partition of this write (its
    ``writerId`` option, else a fresh id per write)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.writer_id = opts.writer_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> Published:
        return _publish(iterator, self.opts, self.writer_id, "batch")

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        return None


class StreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("orleanspy")``: one marker per (micro-batch, partition); the
    writer id is the ``writerId`` option, else the query's id (kept in its checkpoint)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> Published:
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty(_BATCH_ID) if context is not None else None
        writer_id = self.opts.writer_id or (
            context.getLocalProperty(_QUERY_ID) if context is not None else None)
        if batch is None or not writer_id:
            raise ConfigurationError(
                "format('orleanspy') stream sink: the task does not say its micro-batch or "
                "query (Spark's local properties); set .option('writerId', 'my-query')")
        return _publish(iterator, self.opts, writer_id, batch)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        return None

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        return None
