"""GeneratorQueueAdapter: a read-only adapter whose receivers make up their own events (2).

Data path: there is no producer (1). Each receiver, when its agent (3) reads, generates the
containers of its queue on the fly and hands them on to the cache (4) and consumers (5), like
Orleans' ``GeneratorAdapterFactory``. Use it to load-test the agent, cache and delivery path
without any storage in the way.

The generator assigns streams to queues itself: queue q carries ``streams_per_queue`` streams
keyed ``f"{q.index}-{i}"`` (or ``keys(q, i)``) in ``namespace``. The stream-to-queue mapper is
not consulted, so ``mapper.queue_for`` of a generated stream is usually another queue; that is
harmless because nothing is ever produced to these streams. Each container holds one event;
the streams of a queue take turns (round-robin), stream by stream, until each has had
``events_per_stream`` events; after that reads return ``[]``. Every receiver starts over, so a
queue that moves to another agent is generated again from the start (the data is not durable
and the adapter is not rewindable).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, final

from orleanspy.errors import ConfigurationError, StreamError
from orleanspy.messaging.codec import Codec
from orleanspy.streams.adapters.base import (
    BatchContainer,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
)
from orleanspy.streams.ids import QueueId, StreamId, StreamKey
from orleanspy.streams.tokens import SequenceToken

__all__ = [
    "GeneratorAdapterFactory",
    "GeneratorOptions",
    "GeneratorQueueAdapter",
    "GeneratorQueueReceiver",
]


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


@dataclass(frozen=True, slots=True, kw_only=True)
class GeneratorOptions:
    """What a generator receiver produces for its queue.

    Attributes:
        namespace: the namespace of every generated stream.
        streams_per_queue: streams per queue, >= 1.
        events_per_stream: events per stream, >= 1.
        payload: ``payload(stream_id, n)`` makes the n-th event (0-based) of a stream;
            default ``{"n": n, "stream": str(stream_id)}``. It must be msgpack-encodable.
        keys: ``keys(queue, i)`` is the key of the i-th stream of ``queue``; default
            ``f"{queue.index}-{i}"``. Keys must differ within a queue.

    Raises:
        ConfigurationError: a bad value (the message names the field).
    """

    namespace: str = "generated"
    streams_per_queue: int = 1
    events_per_stream: int = 100
    payload: Callable[[StreamId, int], Any] | None = None
    keys: Callable[[QueueId, int], StreamKey] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ConfigurationError(
                f"GeneratorOptions.namespace must be a non-empty str, got {self.namespace!r}"
            )
        for field in ("streams_per_queue", "events_per_stream"):
            value = getattr(self, field)
            if not _positive_int(value):
                raise ConfigurationError(
                    f"GeneratorOptions.{field} must be an int >= 1, got {value!r}"
                )
        for field in ("payload", "keys"):
            value = getattr(self, field)
            if value is not None and not callable(value):
                raise ConfigurationError(
                    f"GeneratorOptions.{field} must be a callable or None, got {value!r}"
                )


def _default_payload(stream_id: StreamId, n: int) -> Any:
    return {"n": n, "stream": str(stream_id)}


@final
class GeneratorQueueReceiver(QueueAdapterReceiver):
    """Generates the containers of one queue; tokens are (1, 0), (2, 0), ... in read order."""

    __slots__ = ("_codec", "_next", "_options", "_queue_id", "_state", "_streams")

    def __init__(self, queue_id: QueueId, options: GeneratorOptions) -> None:
        self._queue_id = queue_id
        self._options = options
        self._codec = Codec()
        self._streams: tuple[StreamId, ...] = ()
        self._next = 0
        self._state = "new"

    def __repr__(self) -> str:
        return f"GeneratorQueueReceiver({self._queue_id})"

    @property
    def queue(self) -> QueueId:
        return self._queue_id

    @property
    def streams(self) -> tuple[StreamId, ...]:
        """The streams this receiver generates (empty before ``initialize``)."""
        return self._streams

    def _check_ready(self, action: str) -> None:
        if self._state != "ready":
            when = "before initialize()" if self._state == "new" else "after shutdown()"
            raise RuntimeError(f"cannot {action} on {self!r} {when}")

    async def initialize(self) -> None:
        """Fix the queue's streams.

        Raises:
            ValueError: ``GeneratorOptions.keys`` gave the same key twice for this queue.
            TypeError: it gave a key that is not a str, int or UUID.
        """
        if self._state != "new":
            return
        opts = self._options
        keys = opts.keys
        streams = tuple(
            StreamId(
                opts.namespace, keys(self._queue_id, i) if keys else f"{self._queue_id.index}-{i}"
            )
            for i in range(opts.streams_per_queue)
        )
        if len(set(streams)) != len(streams):
            raise ValueError(
                f"GeneratorOptions.keys gave the same key twice for queue {self._queue_id}: "
                f"{[s.key for s in streams]!r}; return distinct keys"
            )
        self._streams = streams
        self._state = "ready"

    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("get_messages()")
        streams = self._streams
        total = len(streams) * self._options.events_per_stream
        start = self._next
        stop = min(total, start + max_count)
        payload = self._options.payload or _default_payload
        pack = self._codec.packb
        batch: list[BatchContainer] = []
        for k in range(start, stop):
            stream_id = streams[k % len(streams)]
            event = payload(stream_id, k // len(streams))
            size = len(pack([event]))
            batch.append(BatchContainer(stream_id, SequenceToken(k + 1), (event,), size))
        self._next = stop
        return batch

    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        self._check_ready("messages_delivered()")

    async def shutdown(self) -> None:
        self._state = "stopped"


@final
class GeneratorQueueAdapter(QueueAdapter):
    """Read-only: ``enqueue`` raises ``StreamError``; receivers generate their queue's data."""

    __slots__ = ("_name", "_options", "_state")

    def __init__(self, name: str, options: GeneratorOptions) -> None:
        self._name = name
        self._options = options
        self._state = "new"

    def __repr__(self) -> str:
        return f"GeneratorQueueAdapter({self._name!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_rewindable(self) -> bool:
        return False

    @property
    def options(self) -> GeneratorOptions:
        return self._options

    async def open(self) -> None:
        if self._state == "new":
            self._state = "open"

    async def close(self) -> None:
        self._state = "closed"

    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        """Always raises ``StreamError``: generated streams have no producers."""
        raise StreamError(
            f"the generator adapter is read-only: provider {self._name!r} cannot take events "
            f"for stream {stream_id}; use a memory or sqlite provider to produce events"
        )

    def create_receiver(self, queue: QueueId) -> GeneratorQueueReceiver:
        if self._state != "open":
            when = "before open()" if self._state == "new" else "after close()"
            raise RuntimeError(f"cannot create_receiver() on {self!r} {when}")
        return GeneratorQueueReceiver(queue, self._options)


@final
class GeneratorAdapterFactory(QueueAdapterFactory):
    """Makes generator adapters that all follow ``options`` (default ``GeneratorOptions()``)."""

    __slots__ = ("_options",)

    def __init__(self, options: GeneratorOptions | None = None) -> None:
        self._options = GeneratorOptions() if options is None else options

    def __repr__(self) -> str:
        return f"GeneratorAdapterFactory({self._options!r})"

    def create_adapter(self, provider_name: str) -> GeneratorQueueAdapter:
        return GeneratorQueueAdapter(provider_name, self._options)
