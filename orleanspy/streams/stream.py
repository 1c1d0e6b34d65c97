"""AsyncStream and StreamSubscriptionHandle: what grains use to produce and consume (1, 5)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, Protocol, TypeVar

from orleanspy._util.clock import SystemClock
from orleanspy._util.histogram import Histogram
from orleanspy.errors import ReplayUnavailableError, StreamError
from orleanspy.grains.context import current_turn
from orleanspy.grains.grain import REMOVED, remember_removed
from orleanspy.grains.interface import check_handler
from orleanspy.grains.request_context import get_context
from orleanspy.messaging.context_event import ContextEvent
from orleanspy.streams.filters import compile_filter
from orleanspy.streams.ids import StreamId
from orleanspy.streams.pubsub import PubSubRendezvous, SubscriptionRecord
from orleanspy.streams.tokens import SequenceToken

__all__ = [
    "AsyncStream", "ErrorHandler", "ItemHandler", "StreamConsumer", "StreamHandler",
    "StreamObserver", "StreamProducer", "StreamSubscriptionHandle",
]

HANDLERS = "_orleanspy_stream_handlers"
#: sub_id -> (token, handshake) of a resume from ``token`` whose first delivery has not come
#: yet (``Grain.__orleanspy_stream_deliver__`` refuses the deliveries without the handshake)
RESUMES = "_orleanspy_stream_resumes"
#: the namespaces a grain class subscribes to implicitly (set by ``implicit_subscription``)
IMPLICIT_ATTR = "_orleanspy_implicit_namespaces"
#: the filter of a grain class's implicit subscriptions, if any
IMPLICIT_FILTER_ATTR = "_orleanspy_implicit_filter"

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

#: ``async def handler(item, token)``: one event of a subscription.
ItemHandler = Callable[[T, SequenceToken], Awaitable[object]]
#: ``async def on_error(exc)``: a subscription's error (missed events, a failed delivery, …).
ErrorHandler = Callable[[BaseException], Awaitable[object]]


class StreamConsumer(Protocol[T_contra]):
    """An object that consumes a stream: ``on_next`` (``on_error``, ``on_completed`` and
    ``on_next_batch`` are optional and found by name)."""

    async def on_next(self, item: T_contra, token: SequenceToken) -> object: ...


class StreamProducer(Protocol):
    """What a stream needs of its provider: its name, a subscription id, the queue."""

    @property
    def name(self) -> str: ...

    def new_subscription_id(self) -> str: ...

    async def enqueue(self, stream_id: StreamId, events: list[Any]) -> None: ...


@dataclass(slots=True)
class StreamObserver(Generic[T]):
    """The callbacks of one subscription inside its grain.

    ``on_next_batch``, if set, receives each delivery whole — a list of ``(item, token)`` in
    order, up to the provider's ``batch_size`` containers — in one call instead of one
    ``on_next`` per event: one grain turn for several events (a batch observer).
    """

    on_next: ItemHandler[T] | None
    on_error: ErrorHandler | None = None
    on_completed: Callable[[], Awaitable[object]] | None = None
    on_next_batch: Callable[[list[tuple[T, SequenceToken]]], Awaitable[object]] | None = None

    def __post_init__(self) -> None:
        if self.on_next is None and self.on_next_batch is None:
            raise TypeError("StreamObserver needs on_next(item, token) or on_next_batch(items)")


#: What ``subscribe`` and ``resume`` take: an item handler, a consumer object or an observer.
StreamHandler = ItemHandler[T] | StreamConsumer[T] | StreamObserver[T]


def as_observer(handler: Any, on_error: ErrorHandler | None = None) -> StreamObserver[Any]:
    if isinstance(handler, StreamObserver):
        return handler
    if hasattr(handler, "on_next_batch") or hasattr(handler, "on_next"):
        return StreamObserver(
            getattr(handler, "on_next", None), on_error or getattr(handler, "on_error", None),
            getattr(handler, "on_completed", None), getattr(handler, "on_next_batch", None),
        )
    if callable(handler):
        return StreamObserver(handler, on_error)
    raise TypeError(
        "subscribe(handler): pass an async callable (item, token), an object with "
        "async on_next(item, token) or on_next_batch(items) [and on_error(exc)], or a "
        "StreamObserver"
    )


def _observer(grain: Any, handler: Any, on_error: ErrorHandler | None) -> StreamObserver[Any]:
    """The observer of a grain's subscription; each callback that is a method of the grain
    must be closed to clients (``grains.interface.check_handler``)."""
    observer = as_observer(handler, on_error)
    for callback in (observer.on_next, observer.on_error, observer.on_completed,
                     observer.on_next_batch):
        if callback is not None:
            check_handler(grain, callback)
    return observer


def _consumer() -> Any:
    turn = current_turn.get()
    if turn is None or turn.activation.grain is None:
        raise RuntimeError(
            "subscribe and resume run inside a grain (the grain is the consumer); "
            "call them from a grain method or on_activate"
        )
    return turn.activation


@dataclass(frozen=True, slots=True)
class StreamSubscriptionHandle:
    """A grain's subscription to a stream: survives deactivation (resume it in on_activate)."""

    provider: str
    stream_id: StreamId
    sub_id: str

    def _rendezvous(self, activation: Any) -> Any:
        sid = self.stream_id
        return activation.silo.get_grain(PubSubRendezvous, (self.provider, sid.namespace, sid.key))

    @property
    def implicit(self) -> bool:
        """An implicit subscription (``@implicit_subscription``): resumable, not removable."""
        return self.sub_id.startswith("implicit:")

    async def unsubscribe(self) -> None:
        """Stop deliveries to this subscription and forget it."""
        activation = _consumer()
        if self.implicit:
            raise StreamError(
                f"{self.sub_id} on {self.stream_id} is implicit: it follows from the grain "
                "class's @implicit_subscription and cannot be unsubscribed"
            )
        await self._rendezvous(activation).remove_subscription(self.sub_id)
        grain_dict = activation.grain.__dict__
        grain_dict.get(HANDLERS, {}).pop(self.sub_id, None)
        grain_dict.get(RESUMES, {}).pop(self.sub_id, None)
        remember_removed(grain_dict.setdefault(REMOVED, {}), self.sub_id)

    async def resume(
        self, handler: StreamHandler[Any], token: SequenceToken | None = None, *,
        on_error: ErrorHandler | None = None, from_time: float | None = None,
    ) -> StreamSubscriptionHandle:
        """Attach ``handler`` (after a reactivation), optionally rewinding to ``token``.

        With ``token``, the first events ``handler`` receives are those from ``token`` on:
        a delivery that was on its way before the resume (the one that activated the grain,
        say) is refused by a handshake (``RESUMES``) and never reaches ``handler``. With
        ``from_time`` (seconds since the epoch), from the first event enqueued at or after
        it, replayed from the queue's storage (a durable adapter with a retention).

        Raises:
            ReplayUnavailableError: ``from_time`` is beyond the provider's retention (the
                error names the oldest point available), or the adapter keeps nothing.
        """
        activation = _consumer()
        if from_time is not None:
            token = await _replay_token(
                activation.silo.get_stream_provider(self.provider), self.stream_id, token,
                from_time)
        grain_dict = activation.grain.__dict__
        grain_dict.setdefault(HANDLERS, {})[self.sub_id] = _observer(
            activation.grain, handler, on_error
        )
        resumes: dict[str, tuple[SequenceToken, str]] = grain_dict.setdefault(RESUMES, {})
        before = resumes.pop(self.sub_id, None)
        handshake = None
        if token is not None:
            handshake = secrets.token_hex(8)
            resumes[self.sub_id] = (token, handshake)
        rendezvous = self._rendezvous(activation)
        try:
            if self.implicit:
                sid = self.stream_id
                await rendezvous.resume_implicit(SubscriptionRecord(
                    sub_id=self.sub_id, namespace=sid.namespace, key=sid.key,
                    consumer_type=activation.grain_id.type_name,
                    consumer_key=activation.grain_id.key, token=token, handshake=handshake,
                    filter=getattr(type(activation.grain), IMPLICIT_FILTER_ATTR, None),
                ))
            else:
                await rendezvous.update_subscription(self.sub_id, token, handshake)
        except BaseException:
            if before is None:  # it took no effect: the previous resume (if any) holds
                resumes.pop(self.sub_id, None)
            else:
                resumes[self.sub_id] = before
            raise
        return self


_UNSET: Any = object()


def with_context_events(events: list[Any], context: dict[str, Any] | None) -> list[Any]:
    """``events`` as stored when published under the request context ``context``: each
    wrapped with it (``ContextEvent``), so that every consumer handles it under that
    context; as they are without one."""
    if context is None:
        return events
    return [ContextEvent(e, context) for e in events]


async def _replay_token(provider: Any, stream_id: StreamId, token: SequenceToken | None,
                        from_time: float) -> SequenceToken | None:
    """The token a subscription from ``from_time`` starts at (None: nothing kept since)."""
    if token is not None:
        raise ValueError("subscribe/resume: give a token or from_time, not both")
    if isinstance(from_time, bool) or not isinstance(from_time, int | float):
        raise TypeError(f"from_time must be seconds since the epoch (a float), got "
                        f"{from_time!r}")
    replay = getattr(provider, "replay_token", None)
    if replay is None:
        raise ReplayUnavailableError(
            f"stream provider {getattr(provider, 'name', provider)!r} cannot replay from "
            "storage", from_time)
    found: SequenceToken | None = await replay(stream_id, float(from_time))
    return found


def _acknowledged(latency: Histogram, clock: Callable[[], float], began: float,
                  future: asyncio.Future[None]) -> None:
    # Its outcome stays the caller's to retrieve: an enqueue that failed counts too.
    if not future.cancelled():
        latency.record(clock() - began)


class AsyncStream(Generic[T]):
    """A stream of items ``T`` of one provider: ``provider.get_stream(namespace, key)``."""

    __slots__ = (
        "_clock", "_latency", "_now", "_provider", "_send", "_submit", "_tail", "stream_id",
    )

    def __init__(self, provider: StreamProducer, stream_id: StreamId) -> None:
        self._provider = provider
        self.stream_id = stream_id
        # The provider's publish-acknowledgement histogram (sampled, see _util.histogram).
        self._latency: Histogram | None = getattr(provider, "publish_latency", None)
        #: what times a publish: the provider's (its silo's) clock
        clock = getattr(provider, "clock", None)
        self._clock: Callable[[], float] = (
            clock.monotonic if clock is not None else SystemClock.monotonic)
        self._send: Callable[[list[Any]], Awaitable[None]] | None = None
        #: enqueues without waiting if it can (True), found with ``_send``
        self._now: Callable[[list[Any]], bool] | None = None
        self._submit: Any = _UNSET  # the adapter's pipelined publisher, or None
        self._tail: asyncio.Future[None] | None = None  # the last send waiting its turn

    def __repr__(self) -> str:
        return f"<AsyncStream {self._provider.name}:{self.stream_id}>"

    def _sender(self) -> Callable[[list[Any]], Awaitable[None]]:
        """What publishes to this stream: the provider's shortcut to the stream's queue if
        it has one (found once per stream object), else its ``enqueue``."""
        provider = self._provider
        make = getattr(provider, "sender", None)
        send = make(self.stream_id) if make is not None else partial(
            provider.enqueue, self.stream_id)
        immediate = getattr(provider, "immediate_sender", None)
        self._now = immediate(self.stream_id) if immediate is not None else None
        self._send = send
        return send

    def on_next(self, item: T) -> Coroutine[Any, Any, None]:
        """Publish one event (durable once awaited, for durable adapters). A plain function
        returning ``_publish``'s coroutine: one coroutine per event, not two."""
        return self._publish([item])

    async def on_next_batch(self, items: Iterable[T]) -> None:
        """Publish several events as one batch (one queue message)."""
        events = list(items)
        if events:
            await self._publish(events)

    async def _publish(self, events: list[Any]) -> None:
        context = get_context()
        if context is not None:  # each consumer handles it under this context
            events = with_context_events(events, context)
        if self._tail is not None:
            await self._after_sends()
        send = self._send
        if send is None:
            send = self._sender()
        latency = self._latency
        if latency is not None and latency.due():
            clock = self._clock
            began = clock()
            await send(events)
            latency.record(clock() - began)
            return
        now = self._now
        if now is None or not now(events):
            await send(events)

    def send(self, item: T) -> asyncio.Future[None]:
        """Publish one event without waiting: pipelining for producers that put many events
        in flight. The event takes its place in the stream now (after every earlier
        ``send`` or ``on_next`` through this stream object, before every later one); the
        returned future resolves once it is enqueued (durably, for a durable adapter) or
        fails with the enqueue's error. Await the futures (keep a bounded window of them)
        before relying on the events, as ``on_next`` does for one. Must be called from the
        event loop (inside a grain, or anywhere a provider is used)."""
        return self._send_now([item])

    def send_batch(self, items: Iterable[T]) -> asyncio.Future[None]:
        """``send`` for several events as one batch (one queue message, as
        ``on_next_batch``). Raises ``ValueError`` for no events."""
        events = list(items)
        if not events:
            raise ValueError(f"send_batch on {self.stream_id}: no events to send")
        return self._send_now(events)

    def _send_now(self, events: list[Any]) -> asyncio.Future[None]:
        context = get_context()
        if context is not None:  # each consumer handles it under this context
            events = with_context_events(events, context)
        future = self._send_pipelined(events)
        latency = self._latency
        if latency is not None and latency.due():
            clock = self._clock
            future.add_done_callback(partial(_acknowledged, latency, clock, clock()))
        return future

    def _send_pipelined(self, events: list[Any]) -> asyncio.Future[None]:
        submit = self._submit
        if submit is _UNSET:
            make = getattr(self._provider, "submitter", None)
            submit = self._submit = make(self.stream_id) if make is not None else None
        tail = self._tail
        if submit is not None and tail is None:
            return submit(events)  # type: ignore[no-any-return]
        # No pipelined path (or sends still queued behind one): one batch at a time, in order.
        future = asyncio.ensure_future(self._send_after(tail, events))
        self._tail = future
        return future

    async def _send_after(self, tail: asyncio.Future[None] | None, events: list[Any]) -> None:
        if tail is not None:
            await asyncio.wait([tail])  # its failure is its caller's, not ours
        try:
            send = self._send
            if send is None:
                send = self._sender()
            await send(events)
        finally:
            if self._tail is asyncio.current_task():
                self._tail = None

    async def _after_sends(self) -> None:
        """Wait until the queued sends of this stream object are enqueued (order)."""
        while self._tail is not None:
            await asyncio.wait([self._tail])

    async def subscribe(
        self,
        handler: StreamHandler[T],
        token: SequenceToken | None = None,
        *,
        on_error: ErrorHandler | None = None,
        tag: str | None = None,
        filter: str | None = None,
        from_time: float | None = None,
    ) -> StreamSubscriptionHandle:
        """Subscribe the current grain. Every event published after this returns is
        delivered to ``handler``; with ``token``, delivery starts at that token (older than
        the cache: replayed from the queue's storage, see ``from_time``); with
        ``from_time`` (seconds since the epoch, the silo's clock), at the first event
        enqueued at or after it, replayed from the queue's storage (a durable adapter with
        a retention) and handed over to the live cache without a gap or a duplicate. With
        ``filter`` (an expression, ``orleanspy.streams.filters``), only the events it matches
        are delivered; the pulling agent drops the others before any message is sent.

        Raises:
            FilterError: ``filter`` is not a valid filter expression.
            ReplayUnavailableError: ``from_time`` is beyond the provider's retention (the
                error names the oldest point available), or the adapter keeps nothing.
        """
        if filter is not None:
            compile_filter(filter)  # refused here, with the problem named, not at the agent
        activation = _consumer()
        provider = self._provider
        if from_time is not None:
            token = await _replay_token(provider, self.stream_id, token, from_time)
        sub_id = provider.new_subscription_id()
        activation.grain.__dict__.setdefault(HANDLERS, {})[sub_id] = _observer(
            activation.grain, handler, on_error
        )
        sid = self.stream_id
        record = SubscriptionRecord(
            sub_id=sub_id, namespace=sid.namespace, key=sid.key,
            consumer_type=activation.grain_id.type_name, consumer_key=activation.grain_id.key,
            token=token, tag=tag, filter=filter,
        )
        handle = StreamSubscriptionHandle(provider.name, sid, sub_id)
        await handle._rendezvous(activation).add_subscription(record)
        return handle

    async def get_subscriptions(self) -> list[StreamSubscriptionHandle]:
        """The current grain's subscriptions to this stream (e.g. to resume them)."""
        activation = _consumer()
        sid = self.stream_id
        ref = activation.silo.get_grain(PubSubRendezvous, (self._provider.name, sid.namespace,
                                                            sid.key))
        records: list[SubscriptionRecord] = await ref.subscriptions_of(
            activation.grain_id.type_name, activation.grain_id.key
        )
        handles = [StreamSubscriptionHandle(self._provider.name, sid, r.sub_id) for r in records]
        type_name = activation.grain_id.type_name
        if activation.grain_id.key == sid.key and sid.namespace in getattr(
            type(activation.grain), IMPLICIT_ATTR, ()
        ):
            handles.insert(0, StreamSubscriptionHandle(self._provider.name, sid,
                                                       f"implicit:{type_name}"))
        return handles
