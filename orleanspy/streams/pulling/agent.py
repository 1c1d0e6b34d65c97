"""PullingAgent: the system target that owns one queue (3): read → cache → deliver → ack.

The agent's read cycle runs every ``pull_period`` on the silo's clock and never overlaps
itself:

1. purge the cache and acknowledge what was purged to the receiver;
2. if the cache is under pressure, stop and back off (the period doubles up to
   ``max_pull_period``; it returns to ``pull_period`` once the cache has room again);
3. read up to ``cache.max_add_count()`` containers, add them to the cache;
4. register streams seen for the first time with their pub-sub rendezvous and wake the
   delivery loop of each subscription that has something new. Steps 3 and 4 repeat while
   reads come back full.

The agent's other roles live beside it: its streams and their subscriptions in
``orleanspy.streams.pulling.registry``, the deliveries in ``orleanspy.streams.delivery``, the
hand-off at stop in ``orleanspy.streams.pulling.handoff``, its statistics and runtime events
in ``orleanspy.streams.pulling.reporting``. Which cursors gate the cache is the namespace's
``FlowPolicy`` (``orleanspy.streams.flow_control``). Under ``min`` flow control a laggard would
fill the cache and stop the reads for everyone; with a rewindable adapter it is *spilled*
instead (``orleanspy.streams.spill``): it reads its stream from the queue until it catches
up. The agent backs off (the backlog stays in the queue) when the cache is under pressure
and nothing can be spilled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from orleanspy.errors import LeaseLostError
from orleanspy.grains.interface import always_interleave, grain_type
from orleanspy.grains.request_context import without_context
from orleanspy.logging import get_logger
from orleanspy.runtime.system_target import SystemTarget
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.cache import QueueCache
from orleanspy.streams.delivery import Delivery
from orleanspy.streams.flow_control import FlowStrategy
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.pubsub import PULLING_AGENT_TYPE, SubscriptionRecord
from orleanspy.streams.pulling.handoff import hand_off
from orleanspy.streams.pulling.registry import StreamTable
from orleanspy.streams.pulling.reporting import AgentStatistics, Reporter, snapshot
from orleanspy.streams.spill import Spiller
from orleanspy.streams.subscription import Subscription
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


@grain_type(PULLING_AGENT_TYPE)
class PullingAgent(SystemTarget):
    """One per owned queue; keyed ``(provider name, queue index, silo address)``."""

    def __init__(self, provider: AgentHost, queue: QueueId) -> None:
        self.provider = provider
        self.queue = queue
        self.options = options = provider.options
        self.clock = provider.clock
        self.diagnostics = provider.diagnostics
        self.cache = QueueCache(
            options.cache_size,
            max_outstanding_events=options.max_outstanding_events,
            max_outstanding_bytes=options.max_outstanding_bytes,
        )
        self.period = options.pull_period
        self.receiver: QueueAdapterReceiver | None = None
        self.table = StreamTable(self)
        #: stream -> its subscriptions here, by id (the table's)
        self.streams: dict[StreamId, dict[str, Subscription]] = self.table.streams
        self._pump: asyncio.Task[None] | None = None
        self._stopping = False
        self._draining = False
        self._wake = asyncio.Event()
        self._fenced = False  # an acknowledgement was refused: the lease is another's
        # Under min flow control a purge never takes an event from anyone, so a consumer
        # that caught up may have the cache purged and acknowledged at once.
        self._prompt_gap = min(options.pull_period / 10, 0.01)
        self._prompt_timer: Any = None
        self._cycle_at = 0.0  # when the last read cycle began
        self._prompt = all(
            getattr(fc, "strategy", None) is FlowStrategy.MIN  # parsed: FlowControl objects
            for fc in (options.flow_control, *options.namespace_flow_control.values())
        )
        self.delivery: Delivery | None = None
        self.report: Reporter | None = None  # from start (the silo's address is final)
        self.pressured = False  # reads stopped for room in the cache (with hysteresis)
        self.last_read = -1  # sequence of the newest container read
        self.read = self.acknowledged = self.read_failures = 0
        self.log = get_logger(__name__, provider=provider.name, queue=str(queue))
        self.spiller = Spiller(self, provider.adapter.is_rewindable and options.spill,
                               self.log)
        #: time travel: a token older than the cache is replayed from the queue's storage
        self.spiller.replays = provider.adapter.is_rewindable and bool(
            options.retention or options.retention_count)

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def draining(self) -> bool:
        """Stopping gracefully: no more reads; what is cached is still delivered."""
        return self._draining

    @property
    def key_tuple(self) -> tuple[str, int, str]:
        """The system-target key: the silo's address lets other silos reach this agent."""
        return (self.provider.name, self.queue.index, str(self.silo.address))

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` in the background, owned by the silo (awaited at its stop)."""
        self.silo.track(asyncio.get_running_loop().create_task(coro, context=without_context()))

    # -- lifecycle (called by the provider) ---------------------------------------------------
    async def start(self) -> None:
        silo = self.silo
        self.report = Reporter(self)
        self.delivery = Delivery(
            self, self.options, provider=self.provider.name, clock=self.clock,
            diagnostics=self.diagnostics, dispatcher=silo.dispatcher, codec=silo.codec,
            track=silo.track, on_failure=self.provider.on_delivery_failure,
            queue=str(self.queue), silo=str(silo.address),
            latency=getattr(self.provider, "delivery_latency", None),
        )
        self.receiver = self.provider.adapter.create_receiver(self.queue)
        self.receiver.wake_on_arrival(self._wake.set)
        await self.receiver.initialize()
        self._pump = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop reading and hand the queue off (``orleanspy.streams.pulling.handoff``):
        deliver what is cached (for up to ``handoff_timeout``), so that the queue's next
        owner delivers nothing twice; acknowledge; shut the receiver."""
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
        await hand_off(self)

    def stopped(self) -> None:
        """The hand-off delivered what it could: no delivery starts from now on."""
        self._stopping = True

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
        table = self.table
        table.revoke_unresponsive()
        table.sweep()
        await self.ack()
        cache = self.cache
        while not self._stopping and not self._draining:
            if self.pressured or cache.under_pressure():
                await self.ack()  # purge what the last reads' consumers are done with
                if (self.pressured or cache.under_pressure()) and self.spiller.spill_laggards():
                    await self.ack()
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
            self.last_read = batch[-1].token.sequence
            first = cache.add(batch)
            if self.diagnostics.listening and self.report is not None:
                self.report.read(len(batch), self.read)
            now = self.clock.monotonic()
            for sid, item in first.items():
                table.seen(sid, item.token, now)
            if len(batch) < want:
                return

    async def ack(self) -> None:
        """Purge the cache; acknowledge what the purge freed (and spilled deliveries did)."""
        cache = self.cache
        purged = cache.purge()
        if purged and self.diagnostics.listening and self.report is not None:
            self.report.purged(len(purged), len(cache))
        purged = self.spiller.acknowledgeable(purged)
        if purged and self.receiver is not None:
            await self.acknowledge(purged)

    async def acknowledge(self, containers: list[BatchContainer]) -> None:
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
        self.acknowledged += len(containers)
        if self.diagnostics.listening and self.report is not None:
            self.report.acknowledged(len(containers), self.acknowledged)

    def _set_period(self, period: float) -> None:
        if period != self.period:
            self.period = period
            if self.diagnostics.listening and self.report is not None:
                self.report.period(period)

    def _under_pressure(self) -> bool:
        """Stop reading? Entered at the cache's pressure mark; left (hysteresis) once the cache
        is half empty, so reading resumes in long runs rather than a container at a time."""
        was = self.pressured
        if was:
            self.pressured = not self._released()
        else:
            self.pressured = self.cache.under_pressure()
        if self.pressured != was:
            if not self.pressured:
                self.spiller.pressure_ended()
            if self.diagnostics.listening and self.report is not None:
                self.report.pressure(self.pressured)
        return self.pressured

    def _released(self) -> bool:
        cache = self.cache
        return len(cache) <= cache.max_size // 2 and not cache.under_pressure()

    def subscription_moved(self, sub: Subscription, spilled: bool) -> None:
        """``sub`` left the cache (``spilled``) or rejoined it: tell the listeners."""
        if self.diagnostics.listening and self.report is not None:
            self.report.moved(sub, spilled)

    # -- subscriptions (turns called by the rendezvous) ------------------------------------------
    @always_interleave
    async def add_subscriber(self, record: SubscriptionRecord) -> None:
        self.table.add(record)

    @always_interleave
    async def remove_subscriber(self, record: SubscriptionRecord) -> None:
        self.table.remove(record)

    def notify_later(self, sub: Subscription, exc: Exception) -> None:
        """Run ``sub``'s ``on_error(exc)`` in the background."""
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
        )) and self.table.group_ready(sub.stream_id):
            assert self.delivery is not None
            sub.started(asyncio.get_running_loop().create_task(
                self.delivery.run(sub), context=without_context()))

    def rewind(self, sub: Subscription, token: SequenceToken, handshake: str) -> None:
        self.table.add(dataclasses.replace(sub.record, token=token, handshake=handshake))

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
        await self.table.fault(sub)

    # -- statistics (``orleanspy.streams.pulling.reporting``) -------------------------------------
    @always_interleave
    async def statistics(self) -> AgentStatistics:
        return self.snapshot()

    @always_interleave
    async def positions(self, namespace: str, key: Any) -> dict[str, list[Any]]:
        """Where each subscription of the stream is here: ``sub_id -> [next, lag]``, the
        sequence of the next container it is to take (None when caught up) and how many
        queue positions it is behind (the subscription manager). A spilled one (served from
        the queue) has no next container known here: None, with its lag."""
        out: dict[str, list[Any]] = {}
        for sub_id, sub in self.streams.get(StreamId(namespace, key), {}).items():
            cursor = sub.cursor
            item = cursor.item if cursor is not None else None
            if item is not None:
                out[sub_id] = [item.token.sequence, cursor.lag() if cursor else 0]
            elif sub.spilled_from is not None:
                out[sub_id] = [None, max(0, self.last_read - sub.after)]
            else:
                out[sub_id] = [None, 0]
        return out

    def snapshot(self) -> AgentStatistics:
        """Cache size and pressure, pull period, counters and per-subscription lag."""
        return snapshot(self)

    @property
    def delivered(self) -> int:
        delivery = self.delivery
        if delivery is None:
            return 0
        return delivery.delivered - delivery.skipped - delivery.filtered

    @property
    def filtered(self) -> int:
        """Events a subscription's filter did not match (not delivered to it)."""
        return self.delivery.filtered if self.delivery is not None else 0

    @property
    def failures(self) -> int:
        return self.read_failures + (self.delivery.failures if self.delivery else 0)
