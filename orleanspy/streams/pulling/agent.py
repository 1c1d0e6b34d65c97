"""PullingAgent: the system target that owns one queue (3): read → cache → deliver → ack.

The agent's cycle runs every ``pull_period`` on the silo's clock and never overlaps itself:

1. purge the cache and acknowledge what was purged to the receiver;
2. if the cache is under pressure, stop and back off (the period doubles up to
   ``max_pull_period``; it returns to ``pull_period`` once the cache has room again);
3. read up to ``cache.max_add_count()`` containers, add them to the cache;
4. register streams seen for the first time with their pub-sub rendezvous (a pin cursor
   keeps their first items cached meanwhile) and wake the delivery loop of each
   subscription that has something new. Steps 3 and 4 repeat while reads come back full.

Deliveries run in ``orleanspy.streams.delivery``; which cursors gate the cache is the
namespace's ``FlowPolicy`` (``orleanspy.streams.flow_control``). Under ``min`` flow control a
laggard would fill the cache and stop the reads for everyone; with a rewindable adapter it is
*spilled* instead (``orleanspy.streams.spill``): it reads its stream from the queue until it
catches up. The agent backs off (the backlog stays in the queue) when the cache is under
pressure and nothing can be spilled.

The agent reports its reads, purges, acknowledgements, pull period and spills as runtime
events (``orleanspy.diagnostics``), built only while its hub listens. The module runs a
little over 500 lines: the read cycle, the subscription turns and the hand-off at stop all
work on the agent's one state (cache, cursors, spill book) and stay together.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from dataclasses import dataclass, field
from time import time as wall_time
from typing import TYPE_CHECKING, Any, Protocol

from orleanspy.diagnostics import (
    CachePressureChanged,
    CachePurged,
    EventsAcknowledged,
    PullPeriodChanged,
    QueueRead,
    SubscriptionRejoined,
    SubscriptionSpilled,
)
from orleanspy.errors import GatingRevokedError, LeaseLostError, QueueCacheMissError
from orleanspy.grains.interface import always_interleave, grain_type
from orleanspy.logging import get_logger
from orleanspy.runtime.system_target import SystemTarget
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.cache import QueueCache
from orleanspy.streams.delivery import Delivery, Subscription
from orleanspy.streams.flow_control import FlowStrategy
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.pubsub import PULLING_AGENT_TYPE, PubSubRendezvous, SubscriptionRecord
from orleanspy.streams.spill import Spiller
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy._util.clock import Clock
    from orleanspy.diagnostics import Diagnostics
    from orleanspy.streams.adapters.base import QueueAdapter, QueueAdapterReceiver
    from orleanspy.streams.options import StreamProviderOptions

__all__ = ["AgentHost", "AgentStatistics", "PullingAgent"]


class AgentHost(Protocol):
    """What a pulling agent needs of its stream provider (bound to a silo)."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> StreamProviderOptions: ...

    @property
    def adapter(self) -> QueueAdapter: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def diagnostics(self) -> Diagnostics: ...

    def implicit_records(self, stream_id: StreamId) -> list[SubscriptionRecord]: ...

    def on_delivery_failure(
        self, record: SubscriptionRecord, stream_id: StreamId, token: SequenceToken,
        error: Exception,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class AgentStatistics:
    queue: str
    cache_size: int
    cache_max: int
    under_pressure: bool
    pull_period: float
    read: int
    delivered: int
    acknowledged: int
    failures: int
    streams: int
    subscriptions: int
    lag: dict[str, int]
    spilled: int = 0  # subscriptions served from the queue (they fell out of the cache)
    spill_count: int = 0  # subscriptions spilled since the agent started
    #: subscription -> seconds since its oldest undelivered cached event was written (those
    #: with such an event whose write time is known)
    age: dict[str, float] = field(default_factory=dict)
    #: subscription -> "stream -> consumer grain"
    consumers: dict[str, str] = field(default_factory=dict)
    #: subscription -> failed attempts of the delivery under way (those failing now)
    failing: dict[str, int] = field(default_factory=dict)
    flow_control: str = "min"  # the provider's flow control (min, max or tagged)


@grain_type(PULLING_AGENT_TYPE)
class PullingAgent(SystemTarget):
    """One per owned queue; keyed ``(provider name, queue index, silo address)``."""

    def __init__(self, provider: AgentHost, queue: QueueId) -> None:
        self.provider = provider
        self.queue = queue
        self.options = provider.options
        self.clock = provider.clock
        self.diagnostics = provider.diagnostics
        self.cache = QueueCache(
            self.options.cache_size,
            max_outstanding_events=self.options.max_outstanding_events,
            max_outstanding_bytes=self.options.max_outstanding_bytes,
        )
        self.period = self.options.pull_period
        self.receiver: QueueAdapterReceiver | None = None
        self.streams: dict[StreamId, dict[str, Subscription]] = {}
        self._registering: set[StreamId] = set()
        #: subscriptions the rendezvous announced while their stream was registering
        self._early: dict[StreamId, dict[str, SubscriptionRecord]] = {}
        #: when each known stream last had an event read (the inactivity sweep)
        self._last_event: dict[StreamId, float] = {}
        self._next_sweep = 0.0
        self._pump: asyncio.Task[None] | None = None
        self._stopping = False
        self._draining = False
        self._wake = asyncio.Event()
        self._fenced = False  # an acknowledgement was refused: the lease is another's
        # Under min flow control a purge never takes an event from anyone, so a consumer
        # that caught up may have the cache purged and acknowledged at once.
        options = self.options
        self._prompt_gap = min(options.pull_period / 10, 0.01)
        self._prompt_timer: Any = None
        self._cycle_at = 0.0  # when the last read cycle began
        self._prompt = all(
            getattr(fc, "strategy", None) is FlowStrategy.MIN  # parsed: FlowControl objects
            for fc in (options.flow_control, *options.namespace_flow_control.values())
        )
        self.delivery: Delivery | None = None
        self._pressured = False
        self._last_read = -1  # sequence of the newest container read
        self.read = self.acknowledged = self.read_failures = 0
        self.log = get_logger(__name__, provider=provider.name, queue=str(queue))
        self.spiller = Spiller(self, provider.adapter.is_rewindable and self.options.spill,
                               self.log)

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def last_read(self) -> int:
        """The sequence of the newest container read."""
        return self._last_read

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background, owned by the silo (awaited at its stop)."""
        self.silo.track(asyncio.get_running_loop().create_task(coro))

    # -- lifecycle (called by the provider) ---------------------------------------------------
    async def start(self) -> None:
        silo = self.silo
        self.delivery = Delivery(
            self, self.options, provider=self.provider.name, clock=self.clock,
            diagnostics=self.diagnostics, dispatcher=silo.dispatcher, codec=silo.codec,
            track=silo.track, on_failure=self.provider.on_delivery_failure,
            queue=str(self.queue), silo=str(silo.address),
            latency=getattr(self.provider, "delivery_latency", None),
        )
        self.receiver = self.provider.adapter.create_receiver(self.queue)
        if hasattr(self.receiver, "on_arrival"):  # a queue that says when rows arrive
            self.receiver.on_arrival = self._wake.set
        await self.receiver.initialize()
        self._pump = asyncio.get_running_loop().create_task(self._run())

    @property
    def draining(self) -> bool:
        """Stopping gracefully: no more reads; what is cached is still delivered."""
        return self._draining

    async def stop(self) -> None:
        """Stop reading; deliver what is cached (for up to ``handoff_timeout``), so that
        the queue's next owner delivers nothing twice; acknowledge; shut the receiver.

        A delivery that fails while draining is abandoned at once: its events stay
        unacknowledged and the next owner delivers them (at least once).
        """
        if self._stopping or self._draining:
            return
        self._draining = True
        if self._prompt_timer is not None:
            self._prompt_timer.cancel()
            self._prompt_timer = None
        if self.delivery is not None:
            self.delivery.stopped.set()  # back-offs end: a failing delivery is abandoned
        self._wake.set()
        if self._pump is not None:
            await asyncio.gather(self._pump, return_exceptions=True)
        await self._drain()
        self._stopping = True
        tasks = [s.task for subs in self.streams.values() for s in subs.values() if s.task]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._ack()
        await self._ack_handed_off()
        if self.receiver is not None:
            await self.receiver.shutdown()
        for sid in list(self.streams):
            try:
                await self._rendezvous(sid).unregister_producer(self.key_tuple)
            except Exception as exc:
                self.log.warning("stream_unregister_failed", stream=str(sid), error=repr(exc))
        self.streams.clear()

    async def _drain(self) -> None:
        """Let the delivery loops deliver what is cached, until every subscription that is
        served from the cache has caught up (and no stream is registering), or
        ``handoff_timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.handoff_timeout
        while True:
            await self._ack()
            subs = [s for subs in self.streams.values() for s in subs.values()
                    if s.spilled_from is None and not s.abandoned]
            for sub in subs:
                self.restart(sub)  # no-op without cached events (or a task already)
            tasks = [s.task for s in subs if s.task is not None]
            left = deadline - loop.time()
            if (not tasks and not self._registering) or left <= 0:
                return
            if tasks:
                await asyncio.wait(tasks, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            else:  # a registration or a turn between loops: look again shortly
                await asyncio.sleep(min(left, 0.01))

    async def _ack_handed_off(self) -> None:
        """Hand-off (stop, after the deliveries finished): also acknowledge the cached
        containers that every subscription of their stream has been given. The purge frees
        whole buckets only, so without this the queue's next owner would deliver them again.

        Conservative: only streams with subscriptions; nothing while a subscription is spilled,
        a stream is registering, or a cursor does not gate (max / tagged flow control); there
        the next owner re-delivers (at-least-once).
        """
        if self.receiver is None or self.spiller.busy or self._registering:
            return
        done = self.cache.delivered_to_all()
        if done:
            await self._acknowledge(done)

    @property
    def key_tuple(self) -> tuple[str, int, str]:
        """The system-target key: the silo's address lets other silos reach this agent."""
        return (self.provider.name, self.queue.index, str(self.silo.address))

    # -- the read cycle -------------------------------------------------------------------------
    async def _run(self) -> None:
        clock = self.clock
        try:  # agents of one silo do not all read at once; a wake-up ends the wait early
            async with clock.timeout(random.uniform(0, self.options.pull_period)):
                await self._wake.wait()
        except TimeoutError:
            pass
        while not self._stopping and not self._draining:
            self._wake.clear()  # a wake-up during the cycle runs the next one at once
            try:
                await self.read_once()
            except Exception as exc:  # loop boundary: log, back off, go on
                self.read_failures += 1
                self.log.warning("queue_read_failed", error=repr(exc))
                await clock.sleep(self.options.read_backoff)
                continue
            try:
                async with clock.timeout(self.period):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def read_once(self) -> None:
        """One cycle: purge and ack, check pressure, read while reads come back full."""
        self._cycle_at = self.clock.monotonic()
        self._revoke_unresponsive()
        self._sweep()
        await self._ack()
        cache = self.cache
        while not self._stopping and not self._draining:
            if self._pressured or cache.under_pressure():
                await self._ack()  # purge what the last reads' consumers are done with
                if (self._pressured or cache.under_pressure()) and self.spiller.spill_laggards():
                    await self._ack()
            if self._under_pressure():
                self._set_period(min(self.period * 2, self.options.max_pull_period))
                return
            if self.period != self.options.pull_period:
                self._set_period(self.options.pull_period)
            want = cache.max_add_count()
            if want <= 0:
                return
            assert self.receiver is not None
            batch = await self.receiver.get_messages(want)
            if not batch:
                return
            self.read += len(batch)
            self._last_read = batch[-1].token.sequence
            first = cache.add(batch)
            hub = self.diagnostics
            if hub.listening:
                hub.emit(QueueRead(str(self.silo.address), self.provider.name, str(self.queue),
                                   len(batch), self.read))
            now = self.clock.monotonic()
            last_event = self._last_event
            for sid, item in first.items():
                last_event[sid] = now
                subs = self.streams.get(sid)
                if subs is None:
                    if sid not in self._registering:
                        # In the background: a cold stream never holds the warm ones back.
                        self._registering.add(sid)
                        pin = self.cache.cursor(sid, item.token, gating=True, max_mode=False)
                        self.spawn(self._register_stream(sid, item.token, pin))
                else:
                    for sub in subs.values():
                        self.restart(sub)
            if len(batch) < want:
                return

    async def _ack(self) -> None:
        cache = self.cache
        purged = cache.purge()
        if purged:
            hub = self.diagnostics
            if hub.listening:
                hub.emit(CachePurged(str(self.silo.address), self.provider.name,
                                     str(self.queue), len(purged), len(cache)))
        purged = self.spiller.acknowledgeable(purged)
        if purged and self.receiver is not None:
            await self._acknowledge(purged)

    async def _acknowledge(self, containers: list[BatchContainer]) -> None:
        assert self.receiver is not None
        try:
            await self.receiver.messages_delivered(containers)
        except LeaseLostError as exc:
            # Paused past the lease: the queue's new owner delivers these (at least once).
            # Nothing to retry; the lease renewal stops this agent.
            if not self._fenced:
                self._fenced = True
                self.log.warning("stream_queue_ack_fenced", error=str(exc))
            return
        self._acknowledged(len(containers))

    def _acknowledged(self, count: int) -> None:
        self.acknowledged += count
        hub = self.diagnostics
        if hub.listening:
            hub.emit(EventsAcknowledged(str(self.silo.address), self.provider.name,
                                        str(self.queue), count, self.acknowledged))

    def _set_period(self, period: float) -> None:
        if period != self.period:
            self.period = period
            hub = self.diagnostics
            if hub.listening:
                hub.emit(PullPeriodChanged(str(self.silo.address), self.provider.name,
                                           str(self.queue), period))

    def subscription_moved(self, sub: Subscription, spilled: bool) -> None:
        """``sub`` left the cache (``spilled``) or rejoined it: tell the listeners."""
        hub = self.diagnostics
        if hub.listening:
            kind = SubscriptionSpilled if spilled else SubscriptionRejoined
            hub.emit(kind(str(self.silo.address), self.provider.name, str(self.queue),
                          str(sub.stream_id), sub.record.sub_id))

    def _rendezvous(self, sid: StreamId) -> Any:
        return self.silo.get_grain(PubSubRendezvous, (self.provider.name, sid.namespace, sid.key))

    async def _register_stream(self, sid: StreamId, first: SequenceToken, pin: Any) -> None:
        """A stream seen for the first time: learn its subscriptions from its rendezvous.

        ``pin`` (a gating cursor at the stream's first item) keeps the stream's items in the
        cache — unacknowledged — until then; a registration that fails is retried with
        back-off for as long as the agent runs, so nothing is acknowledged undelivered.
        """
        attempt = 0
        try:
            while True:
                try:
                    records = await self._rendezvous(sid).register_producer(self.key_tuple)
                    break
                except Exception as exc:
                    attempt += 1
                    if self._stopping:
                        return
                    self.log.warning("stream_register_failed", stream=str(sid),
                                     attempt=attempt, error=repr(exc))
                    delay = min(self.options.read_backoff * 2 ** (attempt - 1),
                                self.options.max_delivery_backoff)
                    await self.clock.sleep(delay)
                    if self._stopping:
                        return
            records += self.provider.implicit_records(sid)
            records += self._early.pop(sid, {}).values()
            self._last_event.setdefault(sid, self.clock.monotonic())
            subs = self.streams.setdefault(sid, {})
            for record in records:
                if record.sub_id not in subs:
                    self._attach(sid, record, record.token or first)
        finally:
            self.cache.remove_cursor(pin)
            self._registering.discard(sid)
            self._early.pop(sid, None)

    def _sweep(self) -> None:
        """Forget the streams that had no event for ``inactivity_period`` and have nothing
        cached or in delivery: their subscriptions leave this agent and it unregisters from
        their rendezvous. The next event of such a stream registers it again (and gets its
        subscriptions back from the rendezvous), so the agent's table follows the streams
        that are alive, not every stream it ever read."""
        now = self.clock.monotonic()
        if now < self._next_sweep:
            return
        period = self.options.inactivity_period
        self._next_sweep = now + min(period / 2, 60.0)
        cache = self.cache
        for sid in [s for s, at in self._last_event.items() if now - at >= period]:
            subs = self.streams.get(sid)
            if subs is None:
                del self._last_event[sid]
                continue
            if cache.holds(sid) or any(
                s.task is not None or s.spilled_from is not None for s in subs.values()
            ):
                continue
            del self.streams[sid]
            del self._last_event[sid]
            for sub in subs.values():
                self._detach(sub)
            self.log.debug("stream_inactive", stream=str(sid), subscriptions=len(subs))
            # Events that arrive while it unregisters stay cached (the pin) and register the
            # stream again once the unregistration is done.
            self._registering.add(sid)
            pin = cache.cursor(sid, gating=True, max_mode=False)
            self.spawn(self._retire_stream(sid, pin))

    async def _retire_stream(self, sid: StreamId, pin: Any) -> None:
        try:
            await self._rendezvous(sid).unregister_producer(self.key_tuple)
        except Exception as exc:  # it stays listed: harmless, it is told what it ignores
            self.log.warning("stream_unregister_failed", stream=str(sid), error=repr(exc))
        if pin.is_set and not self._stopping:
            self._last_event[sid] = self.clock.monotonic()
            await self._register_stream(sid, pin.item.token, pin)
            return
        self.cache.remove_cursor(pin)
        self._registering.discard(sid)
        self._early.pop(sid, None)

    def _under_pressure(self) -> bool:
        """Stop reading? Entered at the cache's pressure mark; left (hysteresis) once the cache
        is half empty, so reading resumes in long runs rather than a container at a time."""
        was = self._pressured
        if was:
            self._pressured = not self._released()
        else:
            self._pressured = self.cache.under_pressure()
        if self._pressured != was:
            if not self._pressured:
                self.spiller.pressure_ended()
            hub = self.diagnostics
            if hub.listening:
                hub.emit(CachePressureChanged(str(self.silo.address), self.provider.name,
                                              str(self.queue), self._pressured))
        return self._pressured

    def _released(self) -> bool:
        cache = self.cache
        return len(cache) <= cache.max_size // 2 and not cache.under_pressure()

    # -- subscriptions (turns called by the rendezvous) ------------------------------------------
    @always_interleave
    async def add_subscriber(self, record: SubscriptionRecord) -> None:
        sid = StreamId(record.namespace, record.key)
        subs = self.streams.get(sid)
        if subs is None:
            if sid in self._registering:  # the rendezvous may have answered already: keep it
                self._early.setdefault(sid, {})[record.sub_id] = record
            return  # not read yet: register_producer will return this record
        old = subs.get(record.sub_id)
        if old is not None and record.token is None:
            # Resumed without a token (e.g. after a reactivation): it goes on where it was.
            old.record = record
            old.consumer = self.silo.get_grain(record.consumer_type, record.consumer_key)
            self.restart(old)
            return
        if old is not None:
            del subs[record.sub_id]
            token = record.token
            if old.spilled_from is not None and token is not None and old.after < token.sequence:
                # A spilled one moved forward: the queue still holds the stream from there
                # (it held it). Attach first, so that its detach releases only what it skips.
                self._attach(sid, record, token, from_queue=True)
                self._detach(old)
                return
            self._detach(old)
        self._attach(sid, record, record.token)

    @always_interleave
    async def remove_subscriber(self, record: SubscriptionRecord) -> None:
        sid = StreamId(record.namespace, record.key)
        subs = self.streams.get(sid)
        if subs is None:
            self._early.get(sid, {}).pop(record.sub_id, None)
            return
        sub = subs.pop(record.sub_id, None)
        if sub is not None:
            self._detach(sub)

    def _detach(self, sub: Subscription) -> None:
        sub.detached = True
        if sub.cursor is not None:
            self.cache.remove_cursor(sub.cursor)
            sub.cursor = None
        if sub.spilled_from is not None:
            self.spiller.leave(sub)

    def _attach(
        self, sid: StreamId, record: SubscriptionRecord, start: SequenceToken | None,
        from_queue: bool = False,
    ) -> None:
        consumer = self.silo.get_grain(record.consumer_type, record.consumer_key)
        sub = Subscription(record, sid, consumer)
        self.streams.setdefault(sid, {})[record.sub_id] = sub
        policy = self.options.flow_for(sid.namespace).policy
        sub.member = policy.is_member(record.tag)
        sub.progress_at = self.clock.monotonic()
        gating = policy.gates(sub.member)
        if from_queue:
            assert start is not None
            self.spiller.start_spilled(sub, start)
            return
        try:
            sub.cursor = self.cache.cursor(
                sid, start, gating=gating, tag=record.tag, max_mode=policy.max_mode
            )
        except QueueCacheMissError as miss:
            if start is not None and self.spiller.queue_holds(sid, start):
                # Purged from the cache but still in the queue (a spilled subscription of the
                # stream holds it): this one starts spilled, reading the queue from ``start``.
                self.spiller.start_spilled(sub, start)
                return
            sub.cursor = self.cache.cursor(
                sid, miss.low, gating=gating, tag=record.tag, max_mode=policy.max_mode
            )
            self._notify_later(sub, miss)
        if sub.member:  # the group may just have reached its minimum size
            for other in self.streams[sid].values():
                self.restart(other)
        else:
            self.restart(sub)

    def _group_ready(self, sid: StreamId) -> bool:
        """Tagged flow control: delivery starts once ``min_members`` of the group are in."""
        policy = self.options.flow_for(sid.namespace).policy
        if not policy.waits_for_members:
            return True
        members = sum(1 for s in self.streams.get(sid, {}).values() if s.member)
        return policy.group_ready(members)

    def _revoke_unresponsive(self) -> None:
        """Tagged flow control: a member stuck longer than the timeout stops gating."""
        now = self.clock.monotonic()
        for sid, subs in self.streams.items():
            flow = self.options.flow_for(sid.namespace)
            timeout = flow.policy.revoke_after
            if timeout is None:
                continue
            for sub in subs.values():
                cursor = sub.cursor
                if cursor is None or not cursor.gating:
                    continue
                if not cursor.is_set:
                    sub.progress_at = now
                elif now - sub.progress_at > timeout:
                    cursor.set_gating(False)
                    if sub.retrying and self.delivery is not None:
                        self.delivery.narrow(sub)  # what it has not taken is not held for it
                    self.log.warning("stream_member_stopped_gating",
                                     subscription=sub.record.sub_id, stream=str(sid))
                    self._notify_later(sub, GatingRevokedError(
                        f"subscription {sub.record.sub_id} on {sid} did not advance for "
                        f"{timeout:g} s and no longer holds events for group "
                        f"{flow.group!r}; it may miss events from now on",
                    ))

    def _notify_later(self, sub: Subscription, exc: Exception) -> None:
        assert self.delivery is not None
        self.delivery.notify_later(sub, exc)

    # -- DeliveryHost -------------------------------------------------------------------------
    def restart(self, sub: Subscription) -> None:
        """Start ``sub``'s delivery loop if it has none and has something to deliver."""
        if sub.task is not None or self._stopping or sub.detached:
            return
        cursor = sub.cursor
        if (sub.spilled_from is not None or (
            cursor is not None and (cursor.is_set or cursor.gap is not None)
        )) and self._group_ready(sub.stream_id):
            assert self.delivery is not None
            sub.task = asyncio.get_running_loop().create_task(self.delivery.run(sub))

    def subscriber_count(self, stream_id: StreamId) -> int:
        return len(self.streams.get(stream_id, ()))

    async def read_spilled(self, sub: Subscription) -> list[BatchContainer] | None:
        assert self.receiver is not None
        return await self.spiller.read(sub, self.receiver)

    def spilled_delivered(self, sub: Subscription, containers: list[BatchContainer]) -> None:
        self.spiller.delivered(sub, containers)

    def caught_up(self) -> None:
        """A subscription delivered everything cached: under min flow control, read again
        (acknowledging first) soon, not at the end of the pull period: what it was delivered
        can be acknowledged, and more may be waiting in the queue for a consumer that has
        room. At most one such read per ``PROMPT_GAP`` (a tenth of the pull period, at most
        10 ms), so that consumers that catch up after every event do not turn the reader
        into a busy poll. (Under max or tagged flow control the period is the laggards'
        grace: a purge behind the fastest consumer is what makes them miss events.)"""
        if not self._prompt or self._prompt_timer is not None or self._wake.is_set():
            return
        delay = self._cycle_at + self._prompt_gap - self.clock.monotonic()
        if delay <= 0:
            self._wake.set()
        else:
            self._prompt_timer = self.clock.call_later(delay, self._prompt_wake)

    def _prompt_wake(self) -> None:
        self._prompt_timer = None
        self._wake.set()

    def cursor_advanced(self) -> None:
        """A delivery moved a cursor. While the reader waits out a back-off for room (the
        cache under pressure), wake it once a purge would release the pressure: the cache
        shrinks only when the reader purges, so otherwise a consumer that has room would
        wait for the whole period."""
        if self.period > self.options.pull_period and (
            self._released() or self.cache.size_after_purge() <= self.cache.max_size // 2
        ):
            self._wake.set()

    async def fault(self, sub: Subscription) -> None:
        record = sub.record
        try:
            await self._rendezvous(sub.stream_id).fault_subscription(record.sub_id)
        except Exception as err:
            self.log.warning("stream_fault_failed", subscription=record.sub_id,
                             error=repr(err))
        subs = self.streams.get(sub.stream_id, {})
        subs.pop(record.sub_id, None)
        self._detach(sub)

    # -- statistics -----------------------------------------------------------------------------
    @always_interleave
    async def statistics(self) -> AgentStatistics:
        return self.snapshot()

    def snapshot(self) -> AgentStatistics:
        """Cache size and pressure, pull period, counters and per-subscription lag."""
        stats = self.cache.statistics()
        lag = {s.record.sub_id: self._lag(s) for subs in self.streams.values()
               for s in subs.values()}
        now = wall_time()
        age = {}
        consumers = {}
        failing = {}
        for subs in self.streams.values():
            for s in subs.values():
                sub_id = s.record.sub_id
                item = s.cursor.item if s.cursor is not None else None
                if item is not None and item.container.enqueued_at:
                    age[sub_id] = max(0.0, now - item.container.enqueued_at)
                consumers[sub_id] = f"{s.stream_id} -> {s.consumer.grain_id}"
                if s.failing:
                    failing[sub_id] = s.failing
        delivery = self.delivery
        return AgentStatistics(
            queue=str(self.queue), cache_size=stats.size, cache_max=stats.max_size,
            under_pressure=stats.under_pressure or self._pressured, pull_period=self.period,
            read=self.read,
            delivered=delivery.delivered - delivery.skipped if delivery else 0,
            acknowledged=self.acknowledged,
            failures=self.read_failures + (delivery.failures if delivery else 0),
            streams=len(self.streams), subscriptions=len(lag), lag=lag,
            spilled=len(self.spiller), spill_count=self.spiller.count, age=age,
            consumers=consumers, failing=failing, flow_control=str(self.options.flow_control),
        )

    @property
    def delivered(self) -> int:
        delivery = self.delivery
        return delivery.delivered - delivery.skipped if delivery is not None else 0

    @property
    def failures(self) -> int:
        return self.read_failures + (self.delivery.failures if self.delivery else 0)

    def _lag(self, sub: Subscription) -> int:
        """Queue positions behind the newest read (cache) or sequences behind it (spilled)."""
        if sub.cursor is not None:
            return sub.cursor.lag()
        if sub.spilled_from is not None:
            return max(0, self._last_read - sub.after)
        return 0
