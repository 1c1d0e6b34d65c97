"""Queue adapter contracts: how batches get into a queue (2) and back out to the agent (3).

Data path: producer (1) -> ``QueueAdapter.enqueue`` (2) -> queue -> ``QueueAdapterReceiver``
``.get_messages`` -> pulling agent (3) -> cache (4) -> consumers (5) -> ``messages_delivered``.

One ``enqueue`` call becomes exactly one ``BatchContainer``. The agent of a queue owns that
queue's receiver and calls ``get_messages`` / ``messages_delivered`` one step at a time (never
two calls at once). Delivery is at-least-once: an adapter that keeps a container until it is
acknowledged (every rewindable adapter; a durable one also across a crash of the process)
hands every unacknowledged container out again to the next receiver of the queue.

Rewinding. A rewindable adapter (``QueueAdapter.is_rewindable``) lets the agent read the kept
containers again without moving the receiver's read position: ``QueueAdapterReceiver.read_from``
returns the unacknowledged containers from a token on, optionally of one stream only. The
agent uses it to let a slow subscription fall out of its bounded cache and serve it from the
queue instead. While that subscription lags, the agent keeps (and does not acknowledge) the
containers it still needs, but may drop their events from its cache: the containers it finally
acknowledges may then be placeholders whose ``events`` are empty. Adapters must therefore
acknowledge by ``token`` (and ``stream_id``) only, never by comparing events or sizes.

The conformance suite ``orleanspy.testing.stream_conformance`` checks every guarantee written
here.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final

from orleanspy._util.clock import Clock
from orleanspy.errors import ConfigurationError, ReplayUnavailableError, StreamError
from orleanspy.streams.adapters.container import (
    BatchContainer,
    UndecodableContainer,
    array_length,
)
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = [
    "COALESCE_MAX",
    "BatchContainer",
    "EnqueueItem",
    "QueueAdapter",
    "QueueAdapterFactory",
    "QueueAdapterReceiver",
    "QueueFullError",
    "UndecodableContainer",
    "array_length",
]


#: single events of one stream that an adapter's ``sender`` may gather into one container
COALESCE_MAX: Final = 4096

#: (queue, stream, events) of one container ``QueueAdapter.enqueue_once`` writes
EnqueueItem = tuple[QueueId, StreamId, Sequence[Any]]


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


class QueueAdapterReceiver(ABC):
    """Reads one queue for its pulling agent. Created by ``QueueAdapter.create_receiver``.

    Lifecycle: ``initialize`` once, then any number of ``get_messages`` and
    ``messages_delivered`` calls, one at a time, then ``shutdown``. ``read_from`` (rewindable
    adapters only) may be called at any time in between, also while another call runs.
    ``get_messages``, ``messages_delivered`` and ``read_from`` before ``initialize`` or after
    ``shutdown`` raise ``RuntimeError``.
    """

    __slots__ = ()

    def wake_on_arrival(self, wake: Callable[[], None]) -> None:  # noqa: B027 (optional)
        """``wake`` pulls the queue now: an adapter that learns when events arrive (a
        notification from its back end) calls it then, so its agent need not wait out its
        pull period. The default learns nothing and never calls it."""

    @abstractmethod
    async def initialize(self) -> None:
        """Start reading: the next ``get_messages`` begins at the oldest unacknowledged container.

        For an adapter that keeps containers until they are acknowledged, that includes the
        containers an earlier receiver of the queue read but never acknowledged: one of this
        process, or (durable adapters) of a process that died.
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

        An adapter that keeps containers deletes them (after the call returns they are gone,
        for ``read_from`` and for later receivers too); an adapter with destructive reads does
        nothing. Acknowledging a container twice, or none, is harmless.

        A container is identified by its ``token`` (and ``stream_id``) alone: the agent may
        acknowledge a placeholder of a container it read, with the same ``stream_id`` and
        ``token`` but empty ``events`` (its cache dropped them while a slow subscription was
        served through ``read_from``). That acknowledges the original container.

        Raises:
            RuntimeError: called before ``initialize`` or after ``shutdown``.
        """

    async def read_from(
        self, token: SequenceToken, max_count: int, stream_id: StreamId | None = None
    ) -> list[BatchContainer]:
        """Read kept containers again, from ``token`` on, without moving the read position.

        Returns up to ``max_count`` unacknowledged containers of this receiver's queue whose
        sequence is ``token.sequence`` or later (so ``token`` itself is included, and for an
        event token the container holding that event), only those of ``stream_id`` if given,
        in token order. Containers not read by ``get_messages`` yet are included; acknowledged
        ones are not. The receiver's own read position is not touched: what ``get_messages``
        returns next is the same with or without this call. It may run while a
        ``get_messages`` (or another ``read_from``) call of this receiver is in flight.

        Only rewindable adapters (``QueueAdapter.is_rewindable``) implement it.

        Args:
            token: where to start (inclusive); tokens older than every kept container start
                at the oldest one.
            max_count: >= 0; 0 returns ``[]``.
            stream_id: only containers of this stream (``max_count`` counts only those).

        Raises:
            NotImplementedError: the adapter is not rewindable.
            ValueError: ``max_count`` is negative.
            RuntimeError: called before ``initialize`` or after ``shutdown``.
        """
        raise NotImplementedError(
            f"{type(self).__name__} cannot read_from(): its adapter is not rewindable "
            "(QueueAdapter.is_rewindable is False); a subscription that falls out of the "
            "cache cannot be served from this queue"
        )

    async def read_range(
        self, start: SequenceToken | float, max_count: int, stream_id: StreamId | None = None
    ) -> list[BatchContainer]:
        """``QueueAdapter.read_range`` on this receiver's queue (time travel)."""
        raise ReplayUnavailableError(
            f"{type(self).__name__} keeps nothing to replay from storage", start)

    @abstractmethod
    async def shutdown(self) -> None:
        """Stop reading. Waits for a ``get_messages`` already running; idempotent.

        A ``read_from`` already running completes normally; later calls raise ``RuntimeError``.

        Unacknowledged containers are not acknowledged: an adapter that keeps containers
        returns them to the next receiver of the queue.
        """


class QueueAdapter(ABC):
    """The producer side of a provider's queues, and the source of their receivers.

    Lifecycle: ``open`` before use (idempotent), ``close`` at the end (idempotent).
    ``enqueue`` and ``create_receiver`` before ``open`` or after ``close`` raise
    ``RuntimeError``.
    """

    __slots__ = ()

    #: "new", "open" or "closed": what ``_check_open`` reads
    _state: str

    def _check_open(self, action: str) -> None:
        """Refuse ``action`` (e.g. ``"enqueue()"``) unless the adapter is open."""
        if self._state != "open":
            when = "before open()" if self._state == "new" else "after close()"
            raise RuntimeError(f"cannot {action} on {self!r} {when}")

    @property
    @abstractmethod
    def name(self) -> str:
        """The stream provider's name (also the ``provider`` of its ``QueueId``s)."""

    @property
    @abstractmethod
    def is_rewindable(self) -> bool:
        """True exactly if the receivers implement ``QueueAdapterReceiver.read_from``.

        A subscription may then start at (or fall back to) a past token still kept by the
        queue, that is, of a container not yet acknowledged.
        """

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

    def sender(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], Awaitable[None]]:
        """``enqueue`` bound to one queue and stream (what a stream keeps to publish). An
        adapter may return something faster with the same guarantees."""
        return partial(self.enqueue, queue, stream_id)

    def immediate_sender(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], bool] | None:
        """A synchronous ``enqueue`` for one queue and stream, if the adapter can enqueue
        without waiting: it returns True once the events are enqueued (with ``enqueue``'s
        guarantees), or False, having done nothing, when the caller must await ``sender``
        instead (a full queue, say). None: every enqueue waits (the default)."""
        return None

    def fence_with(self, fence: Any) -> bool:
        """Acknowledge only while the queue's lease is this silo's, checked by the queue's
        store itself with ``fence`` (from ``QueueLeaseStore.fence``). True if this adapter
        uses it; the default (False) ignores it: acknowledgements then rely on the agent
        holding its lease. Called before any receiver is created."""
        return False

    def submitter(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], asyncio.Future[None]] | None:
        """Pipelined publishing (``AsyncStream.send``): a function that takes events at once,
        in call order (an earlier call's events come first in the queue, also before those
        of a later ``sender`` call), and returns a future that resolves once they are
        enqueued (durably, for a durable adapter) or fails with the enqueue's error. It
        raises at once what ``enqueue`` refuses before writing (closed, no events).

        None, the default: the stream then sends one batch at a time through ``sender``, in
        call order, so a producer still need not wait for each ``send``.
        """
        return None

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

    def retain(self, seconds: float, count: int) -> None:
        """Keep acknowledged containers for ``seconds`` after their acknowledgement or as
        the newest ``count`` of their queue, whichever keeps more (``read_range`` replays
        them); called before ``open``. The default keeps nothing and refuses a retention."""
        if seconds or count:
            raise ConfigurationError(
                f"stream provider {self.name!r}: retention = {seconds:g} s / {count} events, "
                f"but {type(self).__name__} keeps nothing once acknowledged; set retention "
                "and retention_count to 0, or use a durable adapter (sqlite, redis)")

    async def read_range(
        self, queue: QueueId, start: SequenceToken | float, max_count: int,
        stream_id: StreamId | None = None,
    ) -> list[BatchContainer]:
        """Time travel: up to ``max_count`` containers of ``queue`` (of ``stream_id`` only if
        given) from ``start`` on, acknowledged ones still retained (``retain``) included, in
        token order. ``start`` is a token (inclusive) or a time in seconds since the epoch
        (the containers enqueued at or after it, by the adapter's clock).

        Raises:
            ReplayUnavailableError: the queue no longer keeps everything from ``start`` on
                (a container at or after it was trimmed or acknowledged and not retained);
                the error names the oldest point kept. The default: the adapter keeps
                nothing to replay.
        """
        raise ReplayUnavailableError(
            f"stream provider {self.name!r}: {type(self).__name__} is not durable and keeps "
            "nothing to replay from storage; use a durable adapter (sqlite, redis) with a "
            "retention to subscribe from a time or a token older than the cache", start)

    # -- outside readers (a Spark query): durable adapters only --------------------------
    def _not_durable(self, what: str) -> ConfigurationError:
        return ConfigurationError(
            f"stream provider {self.name!r}: {type(self).__name__} cannot {what}: it keeps no "
            "durable queue an outside reader could read; use a durable adapter (sqlite:PATH "
            "or redis://HOST:PORT/DB)")

    async def newest_sequence(self, queue: QueueId) -> int:
        """The sequence of the newest container ``queue`` ever had (0: none yet), read
        without reading events. Raises ``ConfigurationError`` unless the adapter is
        durable."""
        raise self._not_durable("tell a queue's newest sequence")

    async def hold(self, reader: str, holds: dict[QueueId, int],
                   seconds: float) -> dict[QueueId, float]:
        """``reader`` still needs each queue's containers from the given sequence on: they
        are kept (acknowledged or not, retention or not) for ``seconds`` from now; a hold
        never moves back. Returns, per queue whose previous hold had lapsed meanwhile, when
        it lapsed. Raises ``ConfigurationError`` unless the adapter is durable."""
        raise self._not_durable("hold events for a reader")

    async def release(self, reader: str, queues: Sequence[QueueId]) -> None:
        """Drop ``reader``'s holds on ``queues``."""
        raise self._not_durable("hold events for a reader")

    async def enqueue_once(self, marker: str, batches: Sequence[EnqueueItem],
                           remember: float) -> bool:
        """Enqueue each batch as one container, together with ``marker`` in one atomic
        write, unless ``marker`` was written before (then nothing, and False). Markers are
        remembered for ``remember`` seconds. Raises ``ConfigurationError`` unless the
        adapter is durable."""
        raise self._not_durable("enqueue idempotently")

    def use_clock(self, clock: Clock) -> None:  # noqa: B027 - optional hook
        """The provider hands over its silo's clock before ``open``; an adapter with
        timeouts or waits of its own takes its time from it."""


class QueueAdapterFactory(ABC):
    """Builds the adapter of a stream provider; the provider passes its own name."""

    __slots__ = ()

    @abstractmethod
    def create_adapter(self, provider_name: str) -> QueueAdapter:
        """A new, unopened adapter whose ``name`` is ``provider_name``."""
