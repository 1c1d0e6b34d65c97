"""Queue adapter contracts: how batches get into a queue (2) and back out to the agent (3).

Data path: producer (1) -> ``QueueAdapter.enqueue`` (2) -> queue -> ``QueueAdapterReceiver``
``.get_messages`` -> pulling agent (3) -> cache (4) -> consumers (5) -> ``messages_delivered``.

One ``enqueue`` call becomes exactly one ``BatchContainer``. The agent of a queue owns that
queue's receiver and calls it one step at a time (never two calls at once). Delivery is
at-least-once: a durable adapter keeps a container until it is acknowledged, and hands every
unacknowledged container out again to the next receiver of the queue. The conformance suite
``orleanspy.testing.stream_conformance`` checks every guarantee written here.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orleanspy.errors import StreamError
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = [
    "BatchContainer",
    "QueueAdapter",
    "QueueAdapterFactory",
    "QueueAdapterReceiver",
    "QueueFullError",
]


class QueueFullError(StreamError):
    """A bounded queue stayed full for longer than the producer may wait.

    ``queue`` is the queue's text form, ``capacity`` its bound in containers.
    """

    def __init__(self, message: str, queue: str = "", capacity: int = 0) -> None:
        super().__init__(message, queue, capacity)

    @property
    def queue(self) -> str:
        return str(self.args[1])

    @property
    def capacity(self) -> int:
        return int(self.args[2])

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class BatchContainer:
    """The events of one ``enqueue`` call, as read back from the queue.

    Attributes:
        stream_id: the stream the events were produced on.
        token: the container's position in its queue (``index`` 0); strictly greater than
            the token of every container read earlier from the same queue.
        events: the events, in the order they were enqueued; never empty.
        size: bytes of the encoded events, for flow control (an estimate for adapters that do
            not encode).
    """

    stream_id: StreamId
    token: SequenceToken
    events: tuple[Any, ...]
    size: int

    def items(self) -> list[tuple[Any, SequenceToken]]:
        """Each event with its own token: the i-th event gets ``token.for_event(i)``."""
        token = self.token
        return [(event, token.for_event(i)) for i, event in enumerate(self.events)]


class QueueAdapterReceiver(ABC):
    """Reads one queue for its pulling agent. Created by ``QueueAdapter.create_receiver``.

    Lifecycle: ``initialize`` once, then any number of ``get_messages`` and
    ``messages_delivered`` calls, one at a time, then ``shutdown``. ``get_messages`` and
    ``messages_delivered`` before ``initialize`` or after ``shutdown`` raise ``RuntimeError``.
    """

    __slots__ = ()

    @abstractmethod
    async def initialize(self) -> None:
        """Start reading: the next ``get_messages`` begins at the oldest unacknowledged container.

        For a durable adapter that includes containers an earlier receiver of the queue (in
        this process or a process that died) read but never acknowledged.
        """

    @abstractmethod
    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        """The next containers of the queue, oldest first; ``[]`` if none is waiting.

        Guarantees: at most ``max_count`` containers; in token order, tokens strictly
        increasing across all calls on the queue; no container is returned twice between
        ``initialize`` and ``shutdown``; the events of one stream come back in the order they
        were enqueued (by a producer that awaited each ``enqueue``). It never waits for data
        to arrive: an empty queue gives ``[]`` at once.

        Args:
            max_count: >= 0; 0 returns ``[]``.

        Raises:
            ValueError: ``max_count`` is negative.
            RuntimeError: called before ``initialize`` or after ``shutdown``.
        """

    @abstractmethod
    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        """Acknowledge containers this receiver returned: they are never returned again.

        A durable adapter deletes them (after the call returns they are gone, also for later
        receivers); an adapter with destructive reads does nothing. Acknowledging a container
        twice, or none, is harmless.

        Raises:
            RuntimeError: called before ``initialize`` or after ``shutdown``.
        """

    @abstractmethod
    async def shutdown(self) -> None:
        """Stop reading. Waits for a ``get_messages`` already running; idempotent.

        Unacknowledged containers are not acknowledged: a durable adapter returns them to the
        next receiver of the queue.
        """


class QueueAdapter(ABC):
    """The producer side of a provider's queues, and the source of their receivers.

    Lifecycle: ``open`` before use (idempotent), ``close`` at the end (idempotent).
    ``enqueue`` and ``create_receiver`` before ``open`` or after ``close`` raise
    ``RuntimeError``.
    """

    __slots__ = ()

    @property
    @abstractmethod
    def name(self) -> str:
        """The stream provider's name (also the ``provider`` of its ``QueueId``s)."""

    @property
    @abstractmethod
    def is_rewindable(self) -> bool:
        """True if a subscription may start at a past token still kept by the queue."""

    @abstractmethod
    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        """Append ``events`` of ``stream_id`` to ``queue`` as one container.

        When the call returns, the container is in the queue (for a durable adapter:
        committed, so it survives a crash of this process). If the call is cancelled, the
        container may or may not have been added. Events are copied (encoded): changing them
        afterwards does not change what consumers get.

        Args:
            queue: the queue, normally ``mapper.queue_for(stream_id)``.
            stream_id: the stream the events belong to.
            events: one or more values the msgpack ``Codec`` can encode.

        Raises:
            SerializationError: an event cannot be encoded (nothing is enqueued).
            ValueError: ``events`` is empty.
            QueueFullError: a bounded queue stayed full for the adapter's enqueue timeout.
            RuntimeError: called before ``open`` or after ``close``.
        """

    @abstractmethod
    def create_receiver(self, queue: QueueId) -> QueueAdapterReceiver:
        """A new, uninitialized receiver for ``queue``; the caller initializes and shuts it down.

        Raises:
            RuntimeError: called before ``open`` or after ``close``.
        """

    @abstractmethod
    async def open(self) -> None:
        """Acquire resources (files, tables, connections). Idempotent."""

    @abstractmethod
    async def close(self) -> None:
        """Release resources once pending ``enqueue`` calls have finished. Idempotent."""


class QueueAdapterFactory(ABC):
    """Builds the adapter of a stream provider; the provider passes its own name."""

    __slots__ = ()

    @abstractmethod
    def create_adapter(self, provider_name: str) -> QueueAdapter:
        """A new, unopened adapter whose ``name`` is ``provider_name``."""
