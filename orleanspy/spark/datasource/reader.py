"""The source's readers: ``BatchReader`` (``spark.read``) and ``StreamReader``
(``spark.readStream``). A partition is one queue's range of sequences; the driver side
(offsets, holds) and the tasks (``read``) both talk to the provider's storage directly
(``store``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from orleanspy.errors import ReplayUnavailableError
from orleanspy.spark.datasource.log import logger
from orleanspy.spark.datasource.offsets import (
    Offsets,
    queue_rows,
    starting_offsets,
    time_offsets,
)
from orleanspy.spark.datasource.options import SourceOptions
from orleanspy.spark.datasource.rows import RowBuilder
from orleanspy.spark.datasource.store import Store, store_for
from orleanspy.streams.tokens import SequenceToken

__all__ = ["BatchReader", "QueueRange", "StreamReader"]


class QueueRange(InputPartition):
    """Queue ``index``'s containers ``start`` <= sequence < ``end``."""

    def __init__(self, index: int, start: int, end: int) -> None:
        super().__init__((index, start, end))
        self.index, self.start, self.end = index, start, end


def _ranges(start: Offsets, end: Offsets, opts: SourceOptions) -> list[QueueRange]:
    out = []
    for i in range(opts.queues):
        name = f"{opts.provider}-{i}"
        low, high = start.get(name, 0), end.get(name, 0)
        if high > low:
            out.append(QueueRange(i, low, high))
    return out


def _read(opts: SourceOptions, schema: Any, part: QueueRange) -> Iterator[Any]:
    store = store_for(opts.url, opts.provider)
    return queue_rows(store, opts, RowBuilder(schema), store.queue(part.index), part.start,
                      part.end)


class BatchReader(DataSourceReader):
    """Every event from ``startingOffsets`` up to ``endingOffsets`` (as of planning)."""

    def __init__(self, opts: SourceOptions, schema: Any) -> None:
        self.opts, self.schema = opts, schema

    def partitions(self) -> Sequence[InputPartition]:
        store = store_for(self.opts.url, self.opts.provider)
        end = time_offsets(store, self.opts, self.opts.ending)
        return _ranges(starting_offsets(store, self.opts), end, self.opts) or [
            QueueRange(0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRange)
        return _read(self.opts, self.schema, partition)


class StreamReader(DataSourceStreamReader):
    """Micro-batches of every queue's new containers; ``commit`` moves the reader's hold."""

    def __init__(self, opts: SourceOptions, schema: Any) -> None:
        self.opts, self.schema = opts, schema
        self._initial: Offsets | None = None

    def _store(self) -> Store:
        return store_for(self.opts.url, self.opts.provider)

    def _hold(self, offsets: Offsets, skip: frozenset[str] = frozenset()) -> None:
        """Hold (renew) every queue from its offset on, but those in ``skip``."""
        store = self._store()
        holds = {store.queue(i): offsets.get(f"{self.opts.provider}-{i}", 0)
                 for i in range(self.opts.queues) if f"{self.opts.provider}-{i}" not in skip}
        lapsed = store.hold(self.opts.reader, holds, self.opts.hold_seconds)
        if lapsed:
            logger(__name__).warning(
                "spark_source_hold_lapsed", reader=self.opts.reader,
                queues=sorted(str(q) for q in lapsed), hold_seconds=self.opts.hold_seconds,
                fix="the query was stopped or fell behind for longer than holdSeconds: "
                    "events it had not read may have been trimmed; raise holdSeconds")

    def initialOffset(self) -> Offsets:
        # Evaluated once per query: Spark may ask again before the first batch, and the
        # answer must not move (with ``latest`` it would) nor cost the queries again.
        if self._initial is None:
            offsets = starting_offsets(self._store(), self.opts)
            self._hold(offsets)
            self._initial = offsets
        return dict(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_events:
            return ReadMaxRows(self.opts.max_events)
        return ReadAllAvailable()

    def _renew(self, offsets: Offsets) -> dict[str, int]:
        """Hold the queues from ``offsets`` on, but not those further behind than
        ``maxHoldSequences`` (warned); each queue's end (its newest sequence + 1)."""
        store = self._store()
        queues = [store.queue(i) for i in range(self.opts.queues)]
        newest = store.newest(queues)
        end = {str(q): max(offsets.get(str(q), 0), newest[q] + 1) for q in queues}
        bound = self.opts.max_hold
        over = frozenset(n for n in end if bound and end[n] - offsets.get(n, 0) > bound)
        if over:
            logger(__name__).warning(
                "spark_source_hold_not_renewed", reader=self.opts.reader, queues=sorted(over),
                max_hold_sequences=bound, hold_seconds=self.opts.hold_seconds,
                fix="the query is further behind than maxHoldSequences on these queues: its "
                    "hold there lapses after holdSeconds and the provider may trim what it "
                    "has not read; give it more executors or raise maxHoldSequences")
        self._hold(offsets, over)
        return end

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        end = self._renew(start)  # every trigger, also while no data comes
        behind = {name: end[name] - start.get(name, 0) for name in end}
        if max(behind.values(), default=0) > self.opts.warn_behind:
            logger(__name__).warning(
                "spark_source_far_behind", reader=self.opts.reader,
                behind={n: b for n, b in behind.items() if b > self.opts.warn_behind},
                warn_behind=self.opts.warn_behind,
                fix="the query holds this much of the queues back from trimming; give it "
                    "more executors or a larger maxEventsPerTrigger, or stop it and release "
                    "its hold")
        if isinstance(limit, ReadMaxRows):
            end = self._limited(self._store(), start, end, int(limit.max_rows))
        return end

    def _limited(self, store: Store, start: Offsets, end: Offsets, budget: int) -> Offsets:
        """Ends that take at most ``budget`` events in all (at least one container of a
        queue that has any), shared evenly by the queues; counts events by reading the
        containers' headers."""
        share = max(1, budget // self.opts.queues)
        out = dict(start)
        for name, high in end.items():
            pos, taken = start.get(name, 0), 0
            queue = store.queue(int(name.rsplit("-", 1)[1]))
            while pos < high:
                try:
                    containers = store.read(queue, SequenceToken(pos),
                                            min(self.opts.page, share))
                except ReplayUnavailableError:  # the read of the range says what to do
                    pos = high
                    break
                stop = False
                for container in containers:
                    seq = container.token.sequence
                    if seq >= high or (taken and taken + container.count > share):
                        stop = True
                        break
                    taken += container.count
                    pos = seq + 1
                if stop or not containers:
                    break
            out[name] = pos
        return out

    def reportLatestOffset(self) -> Offsets | None:
        return None

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return _ranges(start, end, self.opts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, QueueRange)
        return _read(self.opts, self.schema, partition)

    def commit(self, end: Offsets) -> None:
        self._renew(end)
