"""MemoryQueueAdapter: bounded in-process queues, the reference adapter and test double (2).

Data path: producer (1) -> ``enqueue`` encodes the events and appends them to the queue -> the
agent's receiver (3) decodes the containers after its read position -> cache (4) -> consumers
(5) -> the purged containers come back through ``messages_delivered`` and leave the queue.

Reads are not destructive: a queue keeps each container until it is acknowledged. A new
receiver of the queue (its agent restarted, or the queue moved to another silo of this process)
starts again at the oldest unacknowledged container, so delivery is at-least-once within the
process, as with SQLite; nothing survives the process. The adapter is rewindable:
``read_from`` reads kept containers again (from a token, optionally of one stream) without
moving the receiver's read position. Use it for tests and for single-process pipelines.

Backpressure: each queue holds at most ``capacity_per_queue`` unacknowledged containers, read
or not, so a backlog of read-but-unacknowledged containers (a slow subscription the agent
serves from the queue) slows the producers down too. A producer that finds its queue full
waits (only its own task is suspended) until an acknowledgement frees room, for at most
``enqueue_timeout`` seconds, then gets ``QueueFullError``. The waiters are futures in a FIFO,
woken one per freed slot, as in ``asyncio.Queue.put``; the fast path creates no future and no
task.

Layout (every operation O(1) amortized, none creates a task): a queue is a table of
entries (sequence, stream id, encoded events, time) in sequence order, kept as one list per
column so that a backlog is no Python object per container for the cyclic garbage collector
to walk, plus the set of sequences not yet acknowledged. An acknowledgement only removes
sequences from that set; the entries of acknowledged containers are skipped by readers and
dropped lazily: the acknowledged prefix by moving a head index (and deleting it once it is
an eighth of the table), the others once they outnumber the kept ones. A receiver remembers
its position as an index, valid until entries are dropped, and the sequence it read last,
from which it finds its place again by bisection after that.
"""

from __future__ import annotations

import asyncio
import contextlib
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final, final

from orleanspy._util.clock import Clock, SystemClock
from orleanspy.errors import ConfigurationError
from orleanspy.messaging.codec import Codec
from orleanspy.streams.adapters.base import (
    BatchContainer,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
    QueueFullError,
)
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken, container_token

__all__ = ["MemoryAdapterFactory", "MemoryQueueAdapter", "MemoryQueueReceiver"]

# Acknowledged entries are dropped from a queue's list (an "epoch" change) when
# - those past the head outnumber the kept entries by _COMPACT_SLACK (all are dropped), or
# - the acknowledged prefix is _PREFIX_MIN entries or more, and an eighth of the list.
# Both cost O(1) amortized per entry dropped, and keep the list within
# 2 x kept + _COMPACT_SLACK entries plus the prefix: few dead entries for the GC to walk.
_COMPACT_SLACK: Final = 1024
_PREFIX_MIN: Final = 256


class _MemoryQueue:
    """One queue: its entries, the sequences not yet acknowledged, the producers waiting.

    The entries are four parallel lists (``sequences``, ``stream_ids``, ``payloads``, ``ats``:
    the time each was enqueued). Entries ``head`` and on hold every unacknowledged container
    (and acknowledged ones not yet dropped) in sequence order; those before ``head`` are all
    acknowledged. ``epoch`` changes whenever entries move to other indexes (a compaction).
    """

    __slots__ = ("ats", "capacity", "epoch", "head", "last_sequence", "payloads", "pending",
                 "putters", "sequences", "stream_ids")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.sequences: list[int] = []
        self.stream_ids: list[StreamId] = []
        self.payloads: list[bytes] = []
        self.ats: list[float] = []
        self.head = 0
        self.epoch = 0
        self.pending: set[int] = set()
        self.last_sequence = 0
        self.putters: deque[asyncio.Future[None]] = deque()

    def index_after(self, sequence: int) -> int:
        """Index of the first entry whose sequence is greater than ``sequence``."""
        return bisect_right(self.sequences, sequence, self.head)

    def index_from(self, sequence: int) -> int:
        """Index of the first entry whose sequence is ``sequence`` or greater."""
        return bisect_left(self.sequences, sequence, self.head)

    def append(self, stream_id: StreamId, payload: bytes, at: float) -> None:
        sequence = self.last_sequence = self.last_sequence + 1
        self.sequences.append(sequence)
        self.stream_ids.append(stream_id)
        self.payloads.append(payload)
        self.ats.append(at)
        self.pending.add(sequence)

    def acknowledge(self, sequences: list[int]) -> None:
        """Forget the containers of ``sequences``; unknown or repeated ones are ignored."""
        pending, seqs, head = self.pending, self.sequences, self.head
        before = len(pending)
        end = len(seqs)
        contiguous = end - head == before  # no acknowledged entry stored past the head
        pending.difference_update(sequences)
        kept = len(pending)
        freed = before - kept
        if not freed:
            return
        if not kept:
            head = end
        elif (
            contiguous
            and seqs[head] == min(sequences)
            and seqs[head + freed - 1] == max(sequences)
        ):
            head += freed  # the usual case: the oldest containers, acknowledged in order
        else:
            while seqs[head] not in pending:
                head += 1
        if end - head - kept > kept + _COMPACT_SLACK:
            # More acknowledged entries past the head than kept ones: drop them all, O(1)
            # amortized since at least half of the entries copied go.
            keep = [i for i in range(head, end) if seqs[i] in pending]
            self.sequences = [seqs[i] for i in keep]
            sids, payloads, ats = self.stream_ids, self.payloads, self.ats
            self.stream_ids = [sids[i] for i in keep]
            self.payloads = [payloads[i] for i in keep]
            self.ats = [ats[i] for i in keep]
            head = 0
            self.epoch += 1
        elif head >= _PREFIX_MIN and head * 8 >= end:
            # moves at most 7 entries per entry dropped
            del seqs[:head], self.stream_ids[:head], self.payloads[:head], self.ats[:head]
            head = 0
            self.epoch += 1
        self.head = head
        if self.putters:
            self.wake_putters(freed)

    def wake_putters(self, n: int) -> None:
        putters = self.putters
        while n > 0 and putters:
            putter = putters.popleft()
            if not putter.done():
                putter.set_result(None)
                n -= 1


class _MemoryBroker:
    """The queues of one provider name, shared by every adapter a factory makes for it."""

    __slots__ = ("capacity", "queues")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.queues: dict[QueueId, _MemoryQueue] = {}

    def queue(self, queue_id: QueueId) -> _MemoryQueue:
        q = self.queues.get(queue_id)
        if q is None:
            q = self.queues[queue_id] = _MemoryQueue(self.capacity)
        return q


def _check_max_count(max_count: int) -> None:
    if max_count < 0:
        raise ValueError(f"max_count must be >= 0, got {max_count}")


@final
class MemoryQueueReceiver(QueueAdapterReceiver):
    """Reads one memory queue past its own position; acknowledgements remove containers.

    The position is ``_index`` (into the queue's entries, valid while the queue's epoch is
    ``_epoch``) and ``_last_sequence``, the sequence of the last entry passed.
    """

    __slots__ = ("_codec", "_epoch", "_index", "_last_sequence", "_queue", "_queue_id", "_state")

    def __init__(self, queue_id: QueueId, queue: _MemoryQueue) -> None:
        self._queue_id = queue_id
        self._queue = queue
        self._codec = Codec()
        self._state = "new"
        self._last_sequence = 0
        self._index = 0
        self._epoch = -1  # no valid index yet: find it from _last_sequence

    def __repr__(self) -> str:
        return f"MemoryQueueReceiver({self._queue_id})"

    @property
    def queue(self) -> QueueId:
        return self._queue_id

    def _check_ready(self, action: str) -> None:
        if self._state != "ready":
            when = "before initialize()" if self._state == "new" else "after shutdown()"
            raise RuntimeError(f"cannot {action} on {self!r} {when}")

    async def initialize(self) -> None:
        """Start at the oldest unacknowledged container of the queue."""
        if self._state == "new":
            self._state = "ready"

    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        _check_max_count(max_count)
        self._check_ready("get_messages()")
        q = self._queue
        seqs = q.sequences
        if self._epoch == q.epoch:
            i = self._index
            if i < q.head:
                i = q.head  # everything in between was acknowledged meanwhile
        else:
            i = q.index_after(self._last_sequence)
            self._epoch = q.epoch
        end = len(seqs)
        if i >= end or max_count == 0:
            self._index = i
            return []
        pending, unpack, encoded = q.pending, self._codec.unpackb, BatchContainer.encoded
        sids, payloads, ats = q.stream_ids, q.payloads, q.ats
        if end - q.head == len(pending):  # no acknowledged entry stored past the head
            stop = min(end, i + max_count)
            self._index = stop
            self._last_sequence = seqs[stop - 1]
            return [
                encoded(sid, container_token(seq), payload, unpack, None, at)
                for seq, sid, payload, at in zip(
                    seqs[i:stop], sids[i:stop], payloads[i:stop], ats[i:stop], strict=True)
            ]
        batch: list[BatchContainer] = []
        append = batch.append
        while i < end:
            sequence = seqs[i]
            if sequence in pending:
                append(encoded(sids[i], container_token(sequence), payloads[i], unpack, None,
                               ats[i]))
                if len(batch) == max_count:
                    i += 1
                    break
            i += 1
        self._index = i
        self._last_sequence = seqs[i - 1]
        return batch

    async def read_from(
        self, token: SequenceToken, max_count: int, stream_id: StreamId | None = None
    ) -> list[BatchContainer]:
        _check_max_count(max_count)
        self._check_ready("read_from()")
        if max_count == 0:
            return []
        q = self._queue
        seqs, sids, payloads, ats = q.sequences, q.stream_ids, q.payloads, q.ats
        pending, unpack = q.pending, self._codec.unpackb
        batch: list[BatchContainer] = []
        for i in range(q.index_from(token.sequence), len(seqs)):
            sequence, sid = seqs[i], sids[i]
            if sequence in pending and (stream_id is None or sid == stream_id):
                batch.append(BatchContainer.encoded(sid, container_token(sequence),
                                                    payloads[i], unpack, None, ats[i]))
                if len(batch) == max_count:
                    break
        return batch

    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        self._check_ready("messages_delivered()")
        if batch:
            self._queue.acknowledge([c.token.sequence for c in batch])

    async def shutdown(self) -> None:
        # Reads never wait, so there is no read in flight to wait for.
        self._state = "stopped"


@final
class MemoryQueueAdapter(QueueAdapter):
    """Bounded, rewindable queues in this process; see the module docstring for the semantics.

    Adapters made by one factory for the same provider name share their queues, so the
    silos of an in-process test cluster given the same factory see each other's events.
    """

    __slots__ = ("_broker", "_clock", "_codec", "_enqueue_timeout", "_name", "_state")

    def __init__(self, name: str, broker: _MemoryBroker, enqueue_timeout: float | None) -> None:
        self._clock: Clock = SystemClock()
        self._name = name
        self._broker = broker
        self._enqueue_timeout = enqueue_timeout
        self._codec = Codec()
        self._state = "new"

    def __repr__(self) -> str:
        return f"MemoryQueueAdapter({self._name!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_rewindable(self) -> bool:
        return True

    def use_clock(self, clock: Clock) -> None:
        self._clock = clock

    async def open(self) -> None:
        if self._state == "new":
            self._state = "open"

    async def close(self) -> None:
        self._state = "closed"

    def queue_length(self, queue: QueueId) -> int:
        """Containers kept in ``queue``: enqueued and not yet acknowledged (read or not).

        This is what ``capacity_per_queue`` bounds.
        """
        q = self._broker.queues.get(queue)
        return 0 if q is None else len(q.pending)

    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        await self._put(self._broker.queue(queue), queue, stream_id, events)

    def sender(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], Awaitable[None]]:
        """``enqueue`` with the queue found once: a stream publishes without a lookup."""
        return partial(self._put, self._broker.queue(queue), queue, stream_id)

    def immediate_sender(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], bool]:
        """``_put`` without a coroutine while the queue has room (the usual case)."""
        return partial(self._put_now, self._broker.queue(queue), stream_id)

    def _put_now(self, q: _MemoryQueue, stream_id: StreamId, events: Sequence[Any]) -> bool:
        if self._state != "open" or not events or len(q.pending) >= q.capacity:
            return False  # ``_put`` says why, or waits for room
        q.append(stream_id, self._codec.packb(events if type(events) is list else list(events)),
                 self._clock.time())
        return True

    async def _put(
        self, q: _MemoryQueue, queue: QueueId, stream_id: StreamId, events: Sequence[Any]
    ) -> None:
        if self._put_now(q, stream_id, events):
            return
        # Not enqueued: closed, no events, or the queue is full.
        if self._state != "open":
            self._check_open("enqueue()")
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        payload = self._codec.packb(events if type(events) is list else list(events))
        await self._wait_for_room(queue, q)
        if self._state != "open":
            q.wake_putters(1)  # the room we were given goes to the next producer
            self._check_open("enqueue()")
        q.append(stream_id, payload, self._clock.time())

    async def _wait_for_room(self, queue: QueueId, q: _MemoryQueue) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with self._clock.timeout(self._enqueue_timeout):
                while len(q.pending) >= q.capacity:
                    putter = loop.create_future()
                    q.putters.append(putter)
                    try:
                        await putter
                    except BaseException:
                        putter.cancel()
                        with contextlib.suppress(ValueError):
                            q.putters.remove(putter)
                        if not putter.cancelled() and len(q.pending) < q.capacity:
                            q.wake_putters(1)  # we were woken but give up: pass the slot on
                        raise
        except TimeoutError:
            raise QueueFullError(
                f"queue {queue} stayed full ({q.capacity} containers) for "
                f"{self._enqueue_timeout} s; consumers are not keeping up (containers leave "
                "the queue when the agent acknowledges them)",
                str(queue),
                q.capacity,
            ) from None

    def create_receiver(self, queue: QueueId) -> MemoryQueueReceiver:
        self._check_open("create_receiver()")
        return MemoryQueueReceiver(queue, self._broker.queue(queue))


@final
class MemoryAdapterFactory(QueueAdapterFactory):
    """Makes memory adapters; those for the same provider name share their queues.

    Args:
        capacity_per_queue: unacknowledged containers a queue holds before producers wait,
            >= 1.
        enqueue_timeout: seconds a producer waits for room before ``QueueFullError``
            (0: fail at once; None: wait forever).

    Raises:
        ConfigurationError: a bad value (the message names it).
    """

    __slots__ = ("_brokers", "_capacity", "_enqueue_timeout")

    def __init__(
        self, capacity_per_queue: int = 100_000, enqueue_timeout: float | None = 30.0
    ) -> None:
        if (
            isinstance(capacity_per_queue, bool)
            or not isinstance(capacity_per_queue, int)
            or (capacity_per_queue < 1)
        ):
            raise ConfigurationError(
                "MemoryAdapterFactory.capacity_per_queue must be an int >= 1, "
                f"got {capacity_per_queue!r}"
            )
        if enqueue_timeout is not None and not enqueue_timeout >= 0:
            raise ConfigurationError(
                "MemoryAdapterFactory.enqueue_timeout must be >= 0 seconds or None, "
                f"got {enqueue_timeout!r}"
            )
        self._capacity = capacity_per_queue
        self._enqueue_timeout = enqueue_timeout
        self._brokers: dict[str, _MemoryBroker] = {}

    def __repr__(self) -> str:
        return (
            f"MemoryAdapterFactory(capacity_per_queue={self._capacity}, "
            f"enqueue_timeout={self._enqueue_timeout})"
        )

    def create_adapter(self, provider_name: str) -> MemoryQueueAdapter:
        broker = self._brokers.get(provider_name)
        if broker is None:
            broker = self._brokers[provider_name] = _MemoryBroker(self._capacity)
        return MemoryQueueAdapter(provider_name, broker, self._enqueue_timeout)
