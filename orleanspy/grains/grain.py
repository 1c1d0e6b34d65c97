"""Grain: the base class of user grains (turn-based virtual actors)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from orleanspy import tracing
from orleanspy.errors import StreamDeliveryInterrupted, StreamError
from orleanspy.grains.context import allow_call_chain_reentrancy
from orleanspy.grains.grain_interface import GrainInterface
from orleanspy.grains.host import (
    ActivationHandle,
    DeactivationReason,
    ReminderEntry,
    ReminderRegistry,
    TimerHandle,
)
from orleanspy.grains.reference import GrainRef
from orleanspy.grains.request_context import request_context, set_context, unwrap_events
from orleanspy.ids import GrainId, GrainKey
from orleanspy.messaging.context_event import ContextEvent

__all__ = [
    "REMOVED", "REMOVED_KEPT", "STREAM_CALLBACKS", "Grain", "deliver_batch", "handle_event",
    "remember_removed", "removed_subscription", "stale_delivery", "with_context",
]

#: The callbacks the stream delivery below finds on a grain by name (implicit subscriptions,
#: ``stream.subscribe(self)``): stream handlers, closed to clients (``grains.interface``).
STREAM_CALLBACKS = ("on_next", "on_next_batch", "on_error", "on_completed")

G = TypeVar("G")
Iface = TypeVar("Iface", bound=GrainInterface)


class Grain:
    """Base class for grains.

    Subclass it and write ``async def`` methods; every public coroutine method can be called
    through a reference: ``ref = client.get_grain(MyGrain, key)``, ``await ref.method(...)``.
    One request runs at a time per activation unless the class or method says otherwise
    (``@reentrant``, ``@always_interleave``, ``@read_only``).

    The runtime creates grains: ``__init__`` takes no arguments and may use ``self.key``.
    """

    _orleanspy_activation: ActivationHandle

    # -- identity -------------------------------------------------------------------------
    @property
    def grain_id(self) -> GrainId:
        return self._orleanspy_activation.grain_id

    @property
    def key(self) -> GrainKey:
        """The grain's key (str, int, UUID or tuple)."""
        return self._orleanspy_activation.grain_id.key

    @property
    def silo(self) -> Any:
        """The silo hosting this activation."""
        return self._orleanspy_activation.silo

    # -- lifecycle hooks ------------------------------------------------------------------
    async def on_activate(self) -> None:
        """Called after persistent state is read, before the first request."""

    async def on_deactivate(self, reason: DeactivationReason) -> None:
        """Called before the activation goes away (best effort: a crash skips it)."""

    # -- call filters (``runtime.call_filters``): override to filter this class's calls --
    async def on_incoming_call(self, call: Any) -> Any:
        """Runs around each call to this grain, after the silo's incoming filters: inspect
        ``call``, raise to reject it, or return ``await call.proceed()``."""
        return await call.proceed()

    async def on_outgoing_call(self, call: Any) -> Any:
        """Runs around each call this grain makes, after the silo's outgoing filters."""
        return await call.proceed()

    def deactivate_on_idle(self) -> None:
        """Deactivate once the current request completes."""
        self._orleanspy_activation.deactivate(DeactivationReason.REQUESTED)

    def delay_deactivation(self, seconds: float) -> None:
        """Keep the activation alive for at least ``seconds`` (<= 0 cancels keep-alive)."""
        act = self._orleanspy_activation
        now = act.silo.clock.monotonic()
        act.keep_alive_until = now + seconds if seconds > 0 else 0.0

    # -- calls ----------------------------------------------------------------------------
    @overload
    def get_grain(self, grain_class: type[G], key: Any) -> GrainRef[G]: ...
    @overload
    def get_grain(self, grain_class: Callable[[], Iface], key: Any) -> GrainRef[Iface]: ...
    @overload
    def get_grain(self, grain_class: str, key: Any) -> GrainRef[Any]: ...
    def get_grain(self, grain_class: Any, key: Any) -> Any:
        """A reference to another grain (or to this one)."""
        return self._orleanspy_activation.silo.get_grain(grain_class, key)

    allow_call_chain_reentrancy = staticmethod(allow_call_chain_reentrancy)

    # -- streams --------------------------------------------------------------------------
    def get_stream_provider(self, name: str) -> Any:
        """The silo's stream provider ``name``: ``.get_stream(namespace, key)``."""
        providers = self._orleanspy_activation.silo.stream_providers
        try:
            return providers[name]
        except KeyError:
            raise KeyError(
                f"no stream provider {name!r} on this silo (configured: "
                f"{sorted(providers) or 'none'}); add it to the silo's orleanspy.toml as a "
                f"[streams.{name}] table, or to Silo(stream_providers=...) in code"
            ) from None

    async def __orleanspy_stream_deliver__(
        self, sub_id: str, namespace: str, key: Any, events: list[Any],
        handshake: str | None = None,
    ) -> Any:
        """Runtime extension: a pulling agent delivers events of one subscription.

        After ``resume(handler, token)`` the first delivery taken must carry that resume's
        ``handshake``: one without it was on its way before the resume (the delivery that
        activated the grain, say) and is refused, unhandled, with ``(token, handshake)``
        (the agent then delivers from ``token``, as the resume asked). Otherwise None."""
        stale = stale_delivery(self, sub_id, handshake)
        if stale is not None:
            return stale
        handlers = self.__dict__.get("_orleanspy_stream_handlers")
        observer = handlers.get(sub_id) if handlers else None
        if observer is not None:
            if observer.on_next_batch is not None:  # the whole delivery in one call
                await deliver_batch(observer.on_next_batch, events)
                return None
            on_next = observer.on_next
            assert on_next is not None  # as_observer requires on_next or on_next_batch
        elif sub_id.startswith("implicit:") and hasattr(self, "on_next_batch"):
            await deliver_batch(self.on_next_batch, events)
            return None
        elif sub_id.startswith("implicit:") and hasattr(self, "on_next"):
            on_next = self.on_next
        else:
            if removed_subscription(self, sub_id):
                return None  # unsubscribed while this delivery was on its way: dropped
            raise StreamError(
                f"{self.grain_id} has no handler for subscription {sub_id} on stream "
                f"{namespace}/{key}: after a reactivation, resume it in on_activate "
                "(stream.get_subscriptions() then handle.resume(handler))"
            )
        done = 0
        try:
            for item, token in events:
                # ``handle_event`` inlined: the call per event costs memory_fanout_100 5-10 %
                if type(item) is ContextEvent:  # published under a request context
                    await with_context(item.context, on_next(item.item, token))
                else:
                    await on_next(item, token)
                done += 1
        except Exception as exc:
            if done == 0:
                raise
            # The events before it were handled: the agent retries from this one only.
            raise StreamDeliveryInterrupted(
                done, f"on_next failed at token {events[done][1]}: {exc!r}"
            ) from exc
        return None

    async def __orleanspy_stream_error__(self, sub_id: str, error: BaseException) -> None:
        """Runtime extension: a stream error for one subscription (on_error, if any)."""
        handlers = self.__dict__.get("_orleanspy_stream_handlers")
        observer = handlers.get(sub_id) if handlers else None
        on_error = observer.on_error if observer is not None else getattr(self, "on_error", None)
        if on_error is not None:
            await on_error(error)

    async def __orleanspy_stream_pull__(self, token: str, count: int) -> dict[str, Any]:
        """Runtime extension: the next ``count`` items of a streamed response (an async
        generator method's call), ``{"items", "done"}``; ``token`` is what the call
        answered first (``runtime.streamed_calls``)."""
        return await self._orleanspy_activation.pull_streamed(token, count)

    async def __orleanspy_stream_close__(self, token: str) -> bool:
        """Runtime extension: the caller of a streamed response stopped early."""
        return await self._orleanspy_activation.close_streamed(token)

    # pulls and closes run alongside the held iteration; a pull its caller gave up on ends
    # the iteration (``grains.interface`` reads these marks)
    __orleanspy_stream_pull__._orleanspy_always_interleave = True  # type: ignore[attr-defined]
    __orleanspy_stream_pull__._orleanspy_cancellable = True  # type: ignore[attr-defined]
    __orleanspy_stream_close__._orleanspy_always_interleave = True  # type: ignore[attr-defined]

    # -- timers and reminders -------------------------------------------------------------
    def register_timer(
        self,
        callback: Callable[[], Awaitable[Any]],
        due: float,
        period: float | None = None,
        *,
        interleave: bool = False,
        keep_alive: bool = False,
        name: str | None = None,
    ) -> TimerHandle:
        """Call ``callback`` after ``due`` seconds, then every ``period`` seconds.

        Ticks are turns like requests (they wait for a running request unless
        ``interleave``), never overlap themselves (the next is scheduled ``period`` after
        the previous finished), do not keep the grain alive unless ``keep_alive``, and stop
        when the activation deactivates. The timer returned stops with ``dispose()`` and
        reschedules with ``change(due, period)`` (from its own callback too).
        """
        return self._orleanspy_activation.start_timer(
            callback, due, period, interleave=interleave, keep_alive=keep_alive, name=name
        )

    async def register_reminder(self, name: str, due: float, period: float) -> ReminderEntry:
        """Create or replace a durable reminder: ``receive_reminder(name, status)`` runs
        after ``due`` seconds and then every ``period`` seconds, surviving restarts."""
        return await self._reminders().register(self, name, due, period)

    async def unregister_reminder(self, name: str) -> bool:
        """Delete a reminder of this grain; False if it did not exist."""
        return await self._reminders().unregister(self.grain_id, name)

    async def get_reminders(self) -> list[ReminderEntry]:
        return await self._reminders().list(self.grain_id)

    def _reminders(self) -> ReminderRegistry:
        registry: ReminderRegistry = self._orleanspy_activation.silo.reminders
        return registry


async def with_context(context: dict[str, Any] | None, handling: Awaitable[Any]) -> Any:
    """Await a stream handler under the request context its event was published with (in a
    CONSUMER span, child of the publisher's, when tracing is on: ``orleanspy.tracing``)."""
    if context and "traceparent" in context:
        tracer = tracing.tracer()
        if tracer is not None:
            return await _traced_delivery(tracer, context, handling)
    token = set_context(context)
    try:
        return await handling
    finally:
        request_context.reset(token)


async def _traced_delivery(tracer: Any, context: dict[str, Any],
                           handling: Awaitable[Any]) -> Any:
    from opentelemetry import trace

    span = tracing.start_span(tracer, "stream event", "consumer", context,
                              {"messaging.system": "orleanspy"}, follow=True)
    token = set_context({**context, **tracing.carrier_of(span)})
    try:
        with trace.use_span(span, end_on_exit=True):
            return await handling
    finally:
        request_context.reset(token)


def handle_event(on_next: Callable[[Any, Any], Awaitable[Any]], item: Any, token: Any
                 ) -> Awaitable[Any]:
    """One event's handler call, to await: under the request context the event was
    published with, if any (``ContextEvent``)."""
    if type(item) is ContextEvent:
        return with_context(item.context, on_next(item.item, token))
    return on_next(item, token)


async def deliver_batch(on_next_batch: Callable[[list[Any]], Awaitable[Any]],
                        events: list[Any]) -> None:
    """A batch handler's call: events unwrapped, under the context of the first event that
    was published with one (if any)."""
    if any(type(item) is ContextEvent for item, _ in events):
        unwrapped, context = unwrap_events(events)
        await with_context(context, on_next_batch(unwrapped))
    else:
        await on_next_batch(events)


#: the subscriptions this activation removed (``handle.unsubscribe``), newest last, at most
#: ``REMOVED_KEPT``: a delivery already on its way to one of them is dropped, not failed (a
#: failure would be retried, or at a hand-off leave the events to be delivered again to
#: every other subscription of the stream)
REMOVED = "_orleanspy_stream_removed"
REMOVED_KEPT = 64


def remember_removed(removed: dict[str, None], sub_id: str) -> None:
    """Add ``sub_id`` to ``removed`` (oldest first), keeping the newest ``REMOVED_KEPT``."""
    removed[sub_id] = None
    if len(removed) > REMOVED_KEPT:
        del removed[next(iter(removed))]


def removed_subscription(grain: Any, sub_id: str) -> bool:
    """Did this activation unsubscribe ``sub_id``?"""
    removed = grain.__dict__.get(REMOVED)
    return removed is not None and sub_id in removed


def stale_delivery(grain: Any, sub_id: str, handshake: Any) -> Any:
    """``(token, handshake)`` of a resume of ``sub_id`` that this delivery (its
    ``handshake``) does not carry: refuse it. None: deliver (the first delivery that
    carries the resume's handshake ends the wait)."""
    resumes = grain.__dict__.get("_orleanspy_stream_resumes")
    if resumes:
        resumed = resumes.get(sub_id)
        if resumed is not None:
            if resumed[1] != handshake:
                return resumed
            del resumes[sub_id]  # the resumed attachment delivers: no stale one follows
    return None
