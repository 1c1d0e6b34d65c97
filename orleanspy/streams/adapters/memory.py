"""MemoryQueueAdapter: bounded in-process queues, the reference adapter and test double (2).

Data path: producer (1) -> ``enqueue`` encodes the events and appends them to the queue's
deque -> the agent's receiver pops and decodes them (3). Reads are destructive, so a container
read but not yet delivered is lost if its agent stops: the adapter is not durable and not
rewindable. Use it for tests and for single-process pipelines that may lose in-flight data.

Backpressure: each queue holds at most ``capacity_per_queue`` containers. A producer that finds
its queue full waits (only its own task is suspended) until a read frees room, for at most
``enqueue_timeout`` seconds, then gets ``QueueFullError``. The waiters are futures in a FIFO,
woken one per freed slot, as in ``asyncio.Queue.put``; the fast path creates no future and no
task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from typing import Any, final

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
from orleanspy.streams.tokens import SequenceToken

__all__ = ["MemoryAdapterFactory", "MemoryQueueAdapter", "MemoryQueueReceiver"]


class _MemoryQueue:
    """One queue: (stream id, sequence, encoded events) entries and the producers waiting."""

    __slots__ = ("capacity", "entries", "last_sequence", "putters")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: deque[tuple[StreamId, int, bytes]] = deque()
        self.last_sequence = 0
        self.putters: deque[asyncio.Future[None]] = deque()

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


@final
class MemoryQueueReceiver(QueueAdapterReceiver):
    """Pops containers off one memory queue; acknowledgements are no-ops."""

    __slots__ = ("_codec", "_queue", "_queue_id", "_state")

    def __init__(self, queue_id: QueueId, queue: _MemoryQueue) -> None:
        self._queue_id = queue_id
        self._queue = queue
        self._codec = Codec()
        self._state = "new"

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
        if self._state == "new":
            self._state = "ready"

    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("get_messages()")
        q = self._queue
        n = min(max_count, len(q.entries))
        if n == 0:
            return []
        pop, unpack = q.entries.popleft, self._codec.unpackb
        batch: list[BatchContainer] = []
        for _ in range(n):
            stream_id, sequence, payload = pop()
            batch.append(
                BatchContainer(
                    stream_id, SequenceToken(sequence), tuple(unpack(payload)), len(payload)
                )
            )
        if q.putters:
            q.wake_putters(n)
        return batch

    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        self._check_ready("messages_delivered()")

    async def shutdown(self) -> None:
        # Reads never wait, so there is no read in flight to wait for.
        self._state = "stopped"


@final
class MemoryQueueAdapter(QueueAdapter):
    """Bounded FIFO queues in this process; see the module docstring for the semantics.

    Adapters made by one factory for the same provider name share their queues, so the
    silos of an in-process test cluster given the same factory see each other's events.
    """

    __slots__ = ("_broker", "_codec", "_enqueue_timeout", "_name", "_state")

    def __init__(self, name: str, broker: _MemoryBroker, enqueue_timeout: float | None) -> None:
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
        return False

    def _check_open(self, action: str) -> None:
        if self._state != "open":
            when = "before open()" if self._state == "new" else "after close()"
            raise RuntimeError(f"cannot {action} on {self!r} {when}")

    async def open(self) -> None:
        if self._state == "new":
            self._state = "open"

    async def close(self) -> None:
        self._state = "closed"

    def queue_length(self, queue: QueueId) -> int:
        """Containers waiting in ``queue`` (enqueued, not yet read)."""
        q = self._broker.queues.get(queue)
        return 0 if q is None else len(q.entries)

    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        self._check_open("enqueue()")
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        payload = self._codec.packb(list(events))
        q = self._broker.queue(queue)
        if len(q.entries) >= q.capacity:
            await self._wait_for_room(queue, q)
            if self._state != "open":
                q.wake_putters(1)  # the room we were given goes to the next producer
                self._check_open("enqueue()")
        q.last_sequence += 1
        q.entries.append((stream_id, q.last_sequence, payload))

    async def _wait_for_room(self, queue: QueueId, q: _MemoryQueue) -> None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._enqueue_timeout):
                while len(q.entries) >= q.capacity:
                    putter = loop.create_future()
                    q.putters.append(putter)
                    try:
                        await putter
                    except BaseException:
                        putter.cancel()
                        with contextlib.suppress(ValueError):
                            q.putters.remove(putter)
                        if not putter.cancelled() and len(q.entries) < q.capacity:
                            q.wake_putters(1)  # we were woken but give up: pass the slot on
                        raise
        except TimeoutError:
            raise QueueFullError(
                f"queue {queue} stayed full ({q.capacity} containers) for "
                f"{self._enqueue_timeout} s; consumers are not keeping up",
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
        capacity_per_queue: containers a queue holds before producers wait, >= 1.
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
