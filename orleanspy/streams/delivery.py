"""Delivery (4 -> 5): one loop per subscription hands cached (or spilled) events to its grain.

Each subscription has at most one delivery loop with one awaited grain call at a time, so a
slow consumer slows only itself. A failed call is retried with ``Backoff`` delays for
``max_delivery_time``; then the consumer's ``on_error`` runs and the event is skipped or the
subscription faulted (``failure``). A delivery interrupted by the agent's stop is abandoned:
its events stay unacknowledged and the queue's next owner delivers them again, from the
container the consumer failed on (a failed attempt moves the cursor past the containers the
consumer handled: ``Subscription.retry_at``).

The loop asks its ``DeliveryHost`` (the pulling agent) for what only the agent knows: the
queue reads of a spilled subscription, the acknowledgements they make possible, and when the
reader should wake up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol

from orleanspy._util.backoff import Backoff
from orleanspy._util.clock import Clock
from orleanspy._util.histogram import Histogram
from orleanspy.diagnostics import DeliveryAbandoned, DeliveryFailed, DeliveryRetried, Diagnostics
from orleanspy.errors import (
    EventsMissedError,
    FaultedSubscriptionError,
    StreamDeliveryError,
    StreamDeliveryInterrupted,
)
from orleanspy.grains.request_context import without_context
from orleanspy.logging import get_logger
from orleanspy.messaging.codec import IMMUTABLE_TYPES
from orleanspy.streams.adapters.container import BatchContainer, UndecodableContainer
from orleanspy.streams.cache import CacheItem
from orleanspy.streams.decoding import Event, events_of, placeholders
from orleanspy.streams.ids import StreamId
from orleanspy.streams.pubsub import SubscriptionRecord
from orleanspy.streams.subscription import Subscription
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy.messaging.codec import Codec
    from orleanspy.runtime.dispatcher import Dispatcher
    from orleanspy.streams.options import StreamProviderOptions

__all__ = ["DELIVER", "ERROR", "Delivery", "DeliveryHost"]

FAILURE_WARNING_INTERVAL: Final = 10.0  # seconds between a subscription's failure warnings
DELIVER = "__orleanspy_stream_deliver__"
ERROR = "__orleanspy_stream_error__"

def _observe(latency: Histogram, now: float, enqueued_at: float) -> None:
    """A delivery's end-to-end time, from its oldest container's write time (if known)."""
    if enqueued_at:
        latency.record(now - enqueued_at)


class DeliveryHost(Protocol):
    """What a delivery loop needs of the pulling agent that owns the subscription."""

    @property
    def stopping(self) -> bool: ...

    @property
    def draining(self) -> bool:
        """Stopping gracefully: deliveries go on, a failure is abandoned at once."""
        ...

    def subscriber_count(self, stream_id: StreamId) -> int: ...

    async def read_spilled(self, sub: Subscription) -> list[BatchContainer] | None:
        """The spilled ``sub``'s next containers; ``[]`` for none yet, ``None`` once it
        rejoined the cache."""
        ...

    def spilled_delivered(self, sub: Subscription, containers: list[BatchContainer]) -> None:
        """``sub`` (spilled) delivered ``containers``: move it on, acknowledge what it may."""
        ...

    def cursor_advanced(self) -> None:
        """A cached delivery advanced its cursor: the cache may have room again."""
        ...

    def caught_up(self) -> None:
        """A subscription delivered everything its cursor had."""

    def restart(self, sub: Subscription) -> None:
        """Start ``sub``'s delivery loop again if it has something to deliver."""
        ...

    def rewind(self, sub: Subscription, token: SequenceToken, handshake: str) -> None:
        """Serve ``sub``'s consumer from ``token`` on, as its resume with ``handshake`` asked
        (``sub`` is replaced)."""
        ...

    async def fault(self, sub: Subscription) -> None:
        """Fault ``sub`` at its rendezvous and stop serving it."""
        ...


class Delivery:
    """The delivery loops of one agent: retries, the error protocol, counters."""

    def __init__(
        self,
        host: DeliveryHost,
        options: StreamProviderOptions,
        *,
        provider: str,
        clock: Clock,
        diagnostics: Diagnostics,
        dispatcher: Dispatcher,
        codec: Codec,
        track: Callable[[asyncio.Task[Any]], None],
        on_failure: Callable[[SubscriptionRecord, StreamId, SequenceToken, Exception], None],
        queue: str,
        silo: str,
        latency: Histogram | None = None,
    ) -> None:
        self.host = host
        #: end-to-end latency: from a delivery's oldest container's write to the consumer's
        #: return (one observation per delivery, sampled as ``Histogram.due`` says)
        self.latency = latency
        self.silo = silo
        self.options = options
        self.provider = provider
        self.clock = clock
        self.diagnostics = diagnostics
        self.dispatcher = dispatcher
        self.codec = codec
        self.track = track
        self.on_failure = on_failure
        self.backoff = Backoff(
            initial=options.delivery_backoff,
            maximum=max(options.delivery_backoff, options.max_delivery_backoff),
            jitter=0.1,
        )
        self.stopped = asyncio.Event()  # set when the agent stops: back-offs end early
        self.delivered = self.failures = 0
        #: events given up after the error protocol, and those a subscription's filter did not
        #: match (both counted in ``delivered`` by the loop)
        self.skipped = self.filtered = 0
        #: subscription id -> [when its failure was last logged at warning, failures since]
        self._warned: dict[str, list[Any]] = {}
        #: subscriptions waiting at an undecodable container (``failure="retry"``)
        self._parked: dict[Subscription, asyncio.Future[None]] = {}
        self.log = get_logger(__name__, provider=provider, queue=queue)

    # -- the loop -----------------------------------------------------------------------------
    async def run(self, sub: Subscription) -> None:
        """Deliver ``sub``'s events until it has nothing more (or goes away, or the agent
        stops); then ask the host to restart it if something arrived meanwhile."""
        host = self.host
        batch_size = self.options.batch_size
        clock = self.clock
        try:
            while not host.stopping and not sub.detached:
                if sub.spilled_from is not None:
                    containers = await host.read_spilled(sub)
                    if containers is None or sub.detached:
                        continue  # rejoined the cache (or went away)
                    if not containers:
                        await asyncio.sleep(0)  # let the read cycle purge and move on
                        continue
                    try:
                        spilled, fresh = events_of(containers)
                    except UndecodableContainer as bad:
                        if bad.index:  # deliver those before it; it comes first next time
                            containers = containers[:bad.index]
                            spilled, fresh = events_of(containers)
                            ok = await self.deliver(sub, spilled, owned=True, fresh=fresh)
                        else:
                            containers = containers[:1]
                            spilled = placeholders(containers[0])
                            ok = await self._undecodable(sub, spilled, bad.error)
                    else:
                        ok = await self.deliver(sub, spilled, owned=True, fresh=fresh)
                    if ok is None:
                        sub.abandon()
                        return  # abandoned (stopping): not delivered, not acknowledged
                    if sub.spilled_from is not None and not sub.detached:
                        host.spilled_delivered(sub, containers)
                        sub.progressed(clock.monotonic())
                        if ok:
                            self.delivered += len(spilled)
                            latency = self.latency
                            if latency is not None and latency.due():
                                _observe(latency, clock.time(), containers[0].enqueued_at)
                    continue
                cursor = sub.cursor
                if cursor is None:
                    return
                gap = cursor.take_gap()
                if gap is not None:
                    await self.notify(sub, EventsMissedError(
                        f"subscription {sub.record.sub_id} on {sub.stream_id} missed events "
                        f"{gap[0]}..{gap[1]}: the faster consumers' flow control purged them",
                        gap[0], gap[1],
                    ))
                # A cursor that may miss events (max flow control, a tagged non-member)
                # takes one container a time: a batch would hand it events that its flow
                # control purges (and reports as missed) meanwhile.
                items: list[CacheItem] | None = cursor.peek(
                    batch_size if cursor.gating else 1)
                if not items:
                    host.caught_up()
                    return
                # Decoded in a function: no local keeps an item alive.
                undecodable: Exception | None = None
                try:
                    events, fresh = events_of([item.container for item in items])
                except UndecodableContainer as bad:
                    if bad.index:  # deliver those before it; it comes first next time
                        items = items[:bad.index]
                        events, fresh = events_of([item.container for item in items])
                    else:
                        items = items[:1]
                        events, undecodable = placeholders(items[0].container), bad.error
                sub.hold(items)  # held by ``sub`` only (see ``Subscription.inflight``)
                items = None
                if undecodable is not None:
                    ok = await self._undecodable(sub, events, undecodable)
                else:
                    ok = await self.deliver(sub, events, fresh=fresh)
                items = sub.release()
                if ok is None:
                    sub.abandon()
                    return  # abandoned (stopping): the cursor stays, nothing is acknowledged
                if sub.spilled_from is cursor:
                    # Spilled while this delivery ran: the queue reads go on after it, and
                    # what the cache purged meanwhile is this one's to acknowledge.
                    handed = sub.take_handed()
                    if handed:
                        host.spilled_delivered(sub, handed)
                    if ok:
                        self.delivered += len(events)
                    del events
                    continue
                if items is None:
                    continue
                if sub.cursor is not cursor:
                    continue  # re-attached (resume) or removed meanwhile
                latency = self.latency
                if ok and latency is not None and latency.due():
                    _observe(latency, clock.time(), items[0].container.enqueued_at)
                sub.delivered(items, clock.monotonic())
                if ok:
                    self.delivered += len(events)
                host.cursor_advanced()
        finally:
            sub.ended()
            if not host.stopping and not host.draining and not sub.detached and (
                sub.spilled_from is not None or (sub.cursor is not None and sub.cursor.is_set)
            ):
                host.restart(sub)


    # -- one delivery, with retries -------------------------------------------------------------
    async def deliver(
        self, sub: Subscription, events: list[Event], owned: bool = False, fresh: bool = False
    ) -> bool | None:
        """Deliver with retries: True once delivered (or skipped after the error protocol),
        False if the subscription was faulted or went away, None if abandoned because the
        agent stops (the events stay unacknowledged: the next owner of the queue delivers
        them again). ``owned``: read from the queue for this subscription (spilled), not from
        the cache; ``fresh``: the event values were decoded for this delivery alone."""
        if sub.match is not None:  # a filtered-out event costs no message and no turn
            kept = sub.select(events)
            if len(kept) < len(events):
                self.filtered += len(events) - len(kept)
                if not kept:
                    return True
                events = kept
        clock = self.clock
        deadline = clock.monotonic() + self.options.max_delivery_time
        record = sub.record
        sid = sub.stream_id
        target = sub.consumer.grain_id
        attempt = 0
        while True:
            if sub.detached:
                return False  # replaced by a resume or unsubscribed during the back-off
            # Events decoded from the queue belong to the cache; a stream with one subscription
            # hands them over without a copy, several subscriptions each get their own copy of
            # the event values (tokens are immutable and shared).
            batch = events
            if not fresh and not owned and self.host.subscriber_count(sid) > 1:
                batch = self._copy_values(events)
            try:
                refused = await self.dispatcher.call(
                    target, DELIVER, (record.sub_id, sid.namespace, sid.key, batch)
                    if record.handshake is None else
                    (record.sub_id, sid.namespace, sid.key, batch, record.handshake),
                    None, None, True,
                )
                if refused is not None:
                    return self._refused(sub, refused)
                if self._warned and record.sub_id in self._warned:
                    self._recovered(sub)
                if sub.failing:
                    sub.attempt_succeeded()
                return True
            except Exception as exc:
                attempt += 1
                self.failures += 1
                sub.attempt_failed()
                if sub.detached:
                    self._warned.pop(record.sub_id, None)
                    return False  # unsubscribed meanwhile: nobody to retry for
                self._warn_failure(sub, events[0][1], exc)
                if isinstance(exc, StreamDeliveryInterrupted) and 0 < exc.delivered < len(events):
                    # The consumer handled a prefix: retry from the failing event only, with a
                    # fresh budget (the prefix was progress).
                    events = events[exc.delivered:]
                    deadline = clock.monotonic() + self.options.max_delivery_time
                    attempt = 1
                if not owned:
                    sub.retry_at(events[0][1].sequence)
                    sub.narrow()
                    events = sub.kept(events)
                hub = self.diagnostics
                if hub.listening:
                    hub.emit(DeliveryFailed(self.silo, self.provider, str(sid), record.sub_id,
                                            attempt, repr(exc)))
                if self.host.stopping or self.host.draining:
                    self.log.info("stream_delivery_abandoned", subscription=record.sub_id,
                                  stream=str(sid), token=str(events[0][1]), error=repr(exc))
                    if hub.listening:
                        hub.emit(DeliveryAbandoned(self.silo, self.provider, str(sid),
                                                   record.sub_id, "stopping", repr(exc)))
                    return None
                delay = self.backoff.delay(attempt)
                if clock.monotonic() + delay > deadline and self.options.failure == "retry":
                    # Nothing is given up: the consumer hears of it once per
                    # max_delivery_time, and the events stay queued until it takes them (or
                    # the subscription is resumed elsewhere or removed).
                    self.log.warning(
                        "stream_delivery_stuck", subscription=record.sub_id, stream=str(sid),
                        token=str(events[0][1]), error=repr(exc),
                        seconds=self.options.max_delivery_time)
                    await self.notify(sub, self._stuck_error(sub, events[0][1], exc))
                    deadline = clock.monotonic() + self.options.max_delivery_time
                elif clock.monotonic() + delay > deadline:
                    self.log.warning(
                        "stream_delivery_failed", subscription=record.sub_id,
                        stream=str(sid), token=str(events[0][1]), error=repr(exc),
                    )
                    if hub.listening:
                        hub.emit(DeliveryAbandoned(self.silo, self.provider, str(sid),
                                                   record.sub_id, self.options.failure,
                                                   repr(exc)))
                    # The failing event is handled alone (its own token in the error); the
                    # events after it are delivered as usual.
                    outcome = await self._error_protocol(sub, events[:1], exc)
                    if not outcome or len(events) == 1:
                        return outcome
                    events = events[1:]
                    deadline = clock.monotonic() + self.options.max_delivery_time
                    attempt = 0
                    continue
                self.log.debug("stream_delivery_retry", subscription=record.sub_id,
                               error=repr(exc))
                if hub.listening:
                    hub.emit(DeliveryRetried(self.silo, self.provider, str(sid), record.sub_id,
                                             attempt, delay))
                sub.backing_off(True)
                try:  # back off, but wake up for a stop
                    async with clock.timeout(delay):
                        await self.stopped.wait()
                except TimeoutError:
                    pass
                finally:
                    sub.backing_off(False)
                if not owned:
                    events = sub.kept(events)  # narrowed during the back-off

    def _refused(self, sub: Subscription, resumed: Any) -> bool:
        """The consumer refused a delivery without the handshake of its resume from a token
        (nothing was handled). The resume replaced ``sub`` already, or (if this agent was
        not told of it) ``sub`` starts over from the token the consumer asked for."""
        token, handshake = resumed
        self.log.info("stream_delivery_refused", subscription=sub.record.sub_id,
                      stream=str(sub.stream_id), resumed_from=str(token))
        if not sub.detached:
            self.host.rewind(sub, token, handshake)
        return False

    def _warn_failure(self, sub: Subscription, token: SequenceToken, exc: Exception) -> None:
        """A failed attempt: at warning the first time, then at most once per
        ``FAILURE_WARNING_INTERVAL`` per subscription with the count of those in between."""
        now = self.clock.monotonic()
        state = self._warned.get(sub.record.sub_id)
        if state is not None and now - state[0] < FAILURE_WARNING_INTERVAL:
            state[1] += 1
            return
        record = sub.record
        self.log.warning(
            "stream_delivery_failing", subscription=record.sub_id, stream=str(sub.stream_id),
            consumer=f"{record.consumer_type}/{record.consumer_key}", token=str(token),
            error=repr(exc), failures_since_last_warning=state[1] if state else 0,
        )
        self._warned[record.sub_id] = [now, 0]

    def _recovered(self, sub: Subscription) -> None:
        _, suppressed = self._warned.pop(sub.record.sub_id)
        self.log.info("stream_delivery_recovered", subscription=sub.record.sub_id,
                      stream=str(sub.stream_id), failures_since_last_warning=suppressed)

    def _copy_values(self, events: list[Event]) -> list[Event]:
        values = [e for e, _ in events]
        if all(type(v) in IMMUTABLE_TYPES for v in values):  # shared: nothing to protect
            return events
        codec = self.codec
        copies = codec.unpackb(codec.packb(values))
        return [(v, t) for v, (_, t) in zip(copies, events, strict=True)]

    async def _undecodable(
        self, sub: Subscription, events: list[Event], exc: Exception
    ) -> bool | None:
        """A container whose events cannot be decoded: no retry can change that, so it goes
        to the error protocol at once (``on_error``, then the failure policy). Under
        ``retry`` nothing is given up: the subscription waits at the container (its events
        stay queued) until it is resumed past it or removed."""
        self.failures += 1
        self.log.warning("stream_event_undecodable", subscription=sub.record.sub_id,
                         stream=str(sub.stream_id), token=str(events[0][1]), error=repr(exc))
        if self.options.failure != "retry":
            return await self._error_protocol(sub, events, exc)
        await self.notify(sub, self._stuck_error(sub, events[0][1], exc))
        host = self.host
        if not sub.detached and not host.stopping and not host.draining:
            # Parked until ``detached(sub)`` (removed, faulted, resumed past it) or the stop.
            parked = self._parked[sub] = asyncio.get_running_loop().create_future()
            stopped = asyncio.ensure_future(self.stopped.wait())
            try:
                await asyncio.wait((parked, stopped), return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                self._parked.pop(sub, None)
        return False if sub.detached else None

    def detached(self, sub: Subscription) -> None:
        """``sub`` went away: a delivery parked at an undecodable container ends."""
        parked = self._parked.pop(sub, None) if self._parked else None
        if parked is not None and not parked.done():
            parked.set_result(None)

    def _stuck_error(self, sub: Subscription, token: SequenceToken,
                     exc: Exception) -> StreamDeliveryError:
        record = sub.record
        error = StreamDeliveryError(
            f"delivering {sub.stream_id} token {token} to {record.consumer_type}/"
            f"{record.consumer_key} keeps failing ({exc!r}); retrying: with failure='retry' "
            "nothing is skipped, the events stay queued until the handler takes them or the "
            "subscription is resumed past them or removed"
        )
        error.__cause__ = exc
        return error

    async def _error_protocol(self, sub: Subscription, events: list[Event], exc: Exception) -> bool:
        record = sub.record
        error = StreamDeliveryError(
            f"delivering {sub.stream_id} token {events[0][1]} to {record.consumer_type}/"
            f"{record.consumer_key} failed for {self.options.max_delivery_time:g} s: {exc!r}"
        )
        error.__cause__ = exc
        await self.notify(sub, error)
        self.on_failure(record, sub.stream_id, events[0][1], exc)
        self.skipped += len(events)
        self._warned.pop(record.sub_id, None)  # told: on_error, failure_handler, the policy
        if self.options.failure == "fault" and not record.implicit:
            await self.notify(sub, FaultedSubscriptionError(
                f"subscription {record.sub_id} on {sub.stream_id} was faulted after a failed "
                "delivery; resume it to receive events again"
            ))
            await self.host.fault(sub)
            return False
        return True

    # -- telling the consumer -----------------------------------------------------------------
    def notify_later(self, sub: Subscription, exc: Exception) -> None:
        """Run ``sub``'s ``on_error(exc)`` in the background."""
        self.track(asyncio.get_running_loop().create_task(self.notify(sub, exc),
                                                          context=without_context()))

    async def notify(self, sub: Subscription, exc: Exception) -> None:
        """Run ``sub``'s ``on_error(exc)``; a failure there is logged."""
        try:
            await sub.consumer.invoke(ERROR, sub.record.sub_id, exc)
        except Exception as err:
            self.log.warning("stream_on_error_failed", subscription=sub.record.sub_id,
                             error=repr(err))
