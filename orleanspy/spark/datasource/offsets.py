"""Offsets of the source: per queue, the next sequence to read (``{"s-0": 18, ...}``, JSON
as Spark's checkpoint keeps it), and reading one queue's range of them.

A range ``[start, end)`` of a queue names the same containers every time it is read: the
sequences of a queue only grow, a container is visible only once every smaller sequence of
its queue is (one transaction or script assigns and writes it), and the reader's hold keeps
what it has not committed. That is what lets Spark replay a micro-batch after a crash and
get the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from orleanspy.errors import ReplayUnavailableError
from orleanspy.spark.datasource.log import logger
from orleanspy.spark.datasource.options import SourceOptions
from orleanspy.spark.datasource.rows import RowBuilder
from orleanspy.spark.datasource.store import Store
from orleanspy.spark.errors import SparkError
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.ids import QueueId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["DataLossError", "Offsets", "queue_rows", "starting_offsets", "time_offsets"]

Offsets = dict[str, int]


class DataLossError(SparkError):
    """Events the query still needed were trimmed from the queue before it read them."""


def _lost(opts: SourceOptions, queue: QueueId, asked: int,
          exc: ReplayUnavailableError) -> int:
    """Where to go on after ``asked`` is no longer kept: raise, or (``failOnDataLoss``
    false) warn and return the oldest sequence still kept."""
    if opts.fail_on_data_loss:
        raise DataLossError(
            f"orleanspy source {opts.reader!r}: {exc}. The reader's hold lapsed (it was "
            f"stopped or behind for more than holdSeconds = {opts.hold_seconds:g} s) or the "
            "query started from a point no longer kept; raise holdSeconds or the provider's "
            "retention, or set failOnDataLoss to false to go on from the oldest event "
            "kept") from None
    oldest = exc.oldest_token.sequence if exc.oldest_token is not None else asked
    logger(__name__).warning("spark_source_events_lost", reader=opts.reader,
                                 queue=str(queue), first_lost=asked, resumed_at=oldest)
    return int(oldest)


def time_offsets(store: Store, opts: SourceOptions, at: str | float) -> Offsets:
    """Per queue: the next sequence after the newest (``latest``), the oldest kept
    (``earliest``), or the first enqueued at or after a time."""
    queues = [store.queue(i) for i in range(opts.queues)]
    newest = store.newest(queues)  # before the reads: nothing enqueued meanwhile is skipped
    if at == "latest":
        return {str(queue): newest[queue] + 1 for queue in queues}
    start = SequenceToken(0) if at == "earliest" else float(at)
    out: Offsets = {}
    for queue, found in store.first_of_each({queue: start for queue in queues}).items():
        if isinstance(found, ReplayUnavailableError):
            out[str(queue)] = _lost(opts, queue, 0, found)
        else:
            out[str(queue)] = found[0].token.sequence if found else newest[queue] + 1
    return out


def starting_offsets(store: Store, opts: SourceOptions) -> Offsets:
    return time_offsets(store, opts, opts.starting)


def _wanted(opts: SourceOptions) -> Any:
    namespaces, streams = opts.namespaces, opts.streams
    if not namespaces and not streams:
        return None

    def wanted(namespace: str, key: object) -> bool:
        return ((not namespaces or namespace in namespaces)
                and (not streams or f"{namespace}/{key}" in streams))
    return wanted


def queue_rows(store: Store, opts: SourceOptions, builder: RowBuilder, queue: QueueId,
               start: int, end: int) -> Iterator[Any]:
    """Record batches of the events of ``queue``'s containers ``start`` <= seq < ``end``.
    The next page is read while this one becomes rows."""
    wanted = _wanted(opts)

    def page_from(seq: int) -> Future[list[BatchContainer]] | None:
        return store.read_soon(queue, SequenceToken(seq), opts.page) if seq < end else None

    pos = start
    ahead = page_from(pos)
    while ahead is not None:
        try:
            containers = store.result(ahead)
        except ReplayUnavailableError as exc:
            pos = max(pos + 1, _lost(opts, queue, pos, exc))
            ahead = page_from(pos)
            continue
        ahead = None
        if len(containers) == opts.page:
            ahead = page_from(containers[-1].token.sequence + 1)
        for container in containers:
            seq = container.token.sequence
            if seq >= end:
                break
            pos = seq + 1
            sid = container.stream_id
            if wanted is None or wanted(sid.namespace, sid.key):
                yield from builder.add(container)
    if builder.pending:
        yield builder.flush()
