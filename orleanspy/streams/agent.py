"""PullingAgent: the system target that owns one queue (3): read → cache → deliver → ack.

The agent's cycle runs every ``pull_period`` and never overlaps itself:

1. purge the cache and acknowledge what was purged to the receiver;
2. if the cache is under pressure, stop and back off (the period doubles up to
   ``max_pull_period``; it returns to ``pull_period`` once the cache has room again);
3. read up to ``cache.max_add_count()`` containers, add them to the cache;
4. register streams seen for the first time with their pub-sub rendezvous (a pin cursor
   keeps their first items cached meanwhile) and wake the delivery loop of each
   subscription that has something new. Steps 3 and 4 repeat while reads come back full.

Each subscription has at most one delivery loop: one awaited grain call at a time, so a slow
consumer slows only itself. Under ``min`` flow control a laggard would fill the cache and stop
the reads for everyone; with a rewindable adapter the laggard is *spilled* instead (see
``orleanspy.streams.spill``): it leaves the cache and reads its stream from the queue until it
catches up; the queue holds its backlog. The agent backs off (true backpressure: the backlog
stays in the queue) when the cache is under pressure and nothing can be spilled: with a
non-rewindable adapter, ``spill=False``, or flow control ``tagged``. Failed deliveries
are retried with back-off for ``max_delivery_time``, then the consumer's ``on_error`` runs
and the event is skipped or the subscription faulted.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from orleanspy.errors import (
    EventsMissedError,
    FaultedSubscriptionError,
    GatingRevokedError,
    QueueCacheMissError,
    StreamDeliveryError,
)
from orleanspy.grains.interface import always_interleave
from orleanspy.logging import get_logger
from orleanspy.messaging.codec import IMMUTABLE_TYPES
from orleanspy.runtime.system_target import SystemTarget
from orleanspy.streams.cache import CacheCursor, QueueCache
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.pubsub import PubSubRendezvous, SubscriptionRecord
from orleanspy.streams.spill import SpillBook, placeholder, release_range
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy.streams.adapters.base import BatchContainer, QueueAdapterReceiver
    from orleanspy.streams.provider import PersistentStreamProvider

__all__ = ["AgentStatistics", "PullingAgent"]

DELIVER = "__orleanspy_stream_deliver__"
ERROR = "__orleanspy_stream_error__"


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


class _Subscription:
    __slots__ = (
        "after", "buffer", "consumer", "cursor", "detached", "member", "progress_at", "record",
        "spilled_from", "stream_id", "task",
    )

    def __init__(self, record: SubscriptionRecord, stream_id: StreamId, consumer: Any) -> None:
        self.record = record
        self.stream_id = stream_id
        self.consumer = consumer
        self.cursor: CacheCursor | None = None
        self.task: asyncio.Task[None] | None = None
        self.member = False  # a gating member of the tagged group
        self.progress_at = 0.0  # when it last delivered (or was caught up)
        self.detached = False  # removed, faulted or replaced by a resume
        # Spilled (served from the queue): the cursor it left, where it is, what it read.
        self.spilled_from: CacheCursor | None = None
        self.after = -1
        self.buffer: list[BatchContainer] = []

    def __repr__(self) -> str:
        return f"<subscription {self.record.sub_id} on {self.stream_id}>"


class PullingAgent(SystemTarget):
    """One per owned queue; keyed ``(provider name, queue index)``."""

    def __init__(self, provider: PersistentStreamProvider, queue: QueueId) -> None:
        self.provider = provider
        self.queue = queue
        self.options = provider.options
        self.cache = QueueCache(
            self.options.cache_size,
            max_outstanding_events=self.options.max_outstanding_events,
            max_outstanding_bytes=self.options.max_outstanding_bytes,
        )
        self.period = self.options.pull_period
        self.receiver: QueueAdapterReceiver | None = None
        self.streams: dict[StreamId, dict[str, _Subscription]] = {}
        self._registering: set[StreamId] = set()
        self._pump: asyncio.Task[None] | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self.spills = SpillBook()
        self.spill_count = 0  # subscriptions spilled so far
        self._acks: list[BatchContainer] = []  # acknowledged by spilled deliveries
        self._pressured = False
        self._pressure_since: float | None = None  # when the current pressure began
        self._last_read = -1  # sequence of the newest container read
        self.read = self.delivered = self.acknowledged = self.failures = 0
        self.log = get_logger(__name__, provider=provider.name, queue=str(queue))

    # -- lifecycle (called by the manager) ----------------------------------------------------
    async def start(self) -> None:
        self.receiver = self.provider.adapter.create_receiver(self.queue)
        await self.receiver.initialize()
        self._pump = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop reading, let running deliveries finish, acknowledge, shut the receiver."""
        if self._stopping:
            return
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        if self._pump is not None:
            await asyncio.gather(self._pump, return_exceptions=True)
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

    async def _ack_handed_off(self) -> None:
        """Hand-off (stop, after the deliveries finished): also acknowledge the cached
        containers that every subscription of their stream has been given. The purge frees
        whole buckets only, so without this the queue's next owner would deliver them again.

        Conservative: only streams with subscriptions; nothing while a subscription is spilled,
        a stream is registering, or a cursor does not gate (max / tagged flow control); there
        the next owner re-delivers (at-least-once), as before.
        """
        if self.receiver is None or self.spills or self._acks or self._registering:
            return
        done = self.cache.delivered_to_all()
        if done:
            await self.receiver.messages_delivered(done)
            self.acknowledged += len(done)

    @property
    def key_tuple(self) -> tuple[str, int, str]:
        """The system-target key: the silo's address lets other silos reach this agent."""
        return (self.provider.name, self.queue.index, str(self.silo.address))

    # -- the read cycle -------------------------------------------------------------------------
    async def _run(self) -> None:
        await asyncio.sleep(random.uniform(0, self.options.pull_period))
        while not self._stopping:
            try:
                await self.read_once()
            except Exception as exc:  # loop boundary: log, back off, go on
                self.failures += 1
                self.log.warning("queue_read_failed", error=repr(exc))
                await asyncio.sleep(self.options.read_backoff)
                continue
            self._wake.clear()
            try:
                async with asyncio.timeout(self.period):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def read_once(self) -> None:
        """One cycle: purge and ack, check pressure, read while reads come back full."""
        self._revoke_unresponsive()
        await self._ack()
        cache = self.cache
        while not self._stopping:
            if self._pressured or cache.under_pressure():
                await self._ack()  # purge what the last reads' consumers are done with
                if (self._pressured or cache.under_pressure()) and self._spill_laggards():
                    await self._ack()
            if self._under_pressure():
                self.period = min(self.period * 2, self.options.max_pull_period)
                return
            self.period = self.options.pull_period
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
            for sid, item in first.items():
                subs = self.streams.get(sid)
                if subs is None:
                    if sid not in self._registering:
                        await self._register_stream(sid, item.token)
                else:
                    for sub in subs.values():
                        self._start_delivery(sub)
            if len(batch) < want:
                return

    async def _ack(self) -> None:
        purged = self.cache.purge()
        if self.spills:
            purged = self.spills.acknowledgeable(purged)
        if self._acks:
            purged, self._acks = [*purged, *self._acks], []
        if purged and self.receiver is not None:
            await self.receiver.messages_delivered(purged)
            self.acknowledged += len(purged)

    def _rendezvous(self, sid: StreamId) -> Any:
        return self.silo.get_grain(PubSubRendezvous, (self.provider.name, sid.namespace, sid.key))

    async def _register_stream(self, sid: StreamId, first: Any) -> None:
        """A stream seen for the first time: learn its subscriptions, keep its items meanwhile."""
        self._registering.add(sid)
        pin = self.cache.cursor(sid, first, gating=True, max_mode=False)
        try:
            records = await self._rendezvous(sid).register_producer(self.key_tuple)
            records += self.provider.implicit_records(sid)
            subs = self.streams.setdefault(sid, {})
            for record in records:
                if record.sub_id not in subs:
                    self._attach(sid, record, record.token or first)
        finally:
            self.cache.remove_cursor(pin)
            self._registering.discard(sid)

    # -- subscriptions (turns called by the rendezvous) ------------------------------------------
    @always_interleave
    async def add_subscriber(self, record: SubscriptionRecord) -> None:
        sid = StreamId(record.namespace, record.key)
        subs = self.streams.get(sid)
        if subs is None:
            return  # not registered yet: register_producer will return this record
        old = subs.get(record.sub_id)
        if old is not None and record.token is None:
            # Resumed without a token (e.g. after a reactivation): it goes on where it was.
            old.record = record
            old.consumer = self.silo.get_grain(record.consumer_type, record.consumer_key)
            self._start_delivery(old)
            return
        if old is not None:
            del subs[record.sub_id]
            token = record.token
            if old.spilled_from is not None and token is not None and old.after < token.sequence:
                # A spilled one moved forward: the queue still holds the stream from there
                # (it held it). Attach first, so that its detach releases only what it skips.
                self._attach(sid, record, record.token, from_queue=True)
                self._detach(old)
                return
            self._detach(old)
        self._attach(sid, record, record.token)

    @always_interleave
    async def remove_subscriber(self, record: SubscriptionRecord) -> None:
        subs = self.streams.get(StreamId(record.namespace, record.key))
        if subs is None:
            return
        sub = subs.pop(record.sub_id, None)
        if sub is not None:
            self._detach(sub)

    def _detach(self, sub: _Subscription) -> None:
        sub.detached = True
        if sub.cursor is not None:
            self.cache.remove_cursor(sub.cursor)
            sub.cursor = None
        if sub.spilled_from is not None:
            sid = sub.stream_id
            span = release_range(sub.after, self.cache.purged_sequence(sid),
                                 self.spills.min_after(sid, but=sub))
            self.spills.discard(sub)
            sub.spilled_from = None
            sub.buffer = []
            if span is not None:  # containers only it still held: acknowledge them
                task = asyncio.get_running_loop().create_task(self._release(sid, *span))
                self.silo.track(task)

    async def _release(self, sid: StreamId, first: SequenceToken, last: int) -> None:
        receiver = self.receiver
        while receiver is not None and not self._stopping:
            try:
                batch = await receiver.read_from(first, 256, sid)
            except Exception as exc:
                self.log.warning("stream_release_failed", stream=str(sid), error=repr(exc))
                return
            mine = [placeholder(c) for c in batch if c.token.sequence <= last]
            self._acks += mine
            if len(mine) < len(batch) or len(batch) < 256:
                return
            first = SequenceToken(batch[-1].token.sequence + 1)

    @always_interleave
    async def statistics(self) -> AgentStatistics:
        return self.snapshot()

    def snapshot(self) -> AgentStatistics:
        """Cache size and pressure, pull period, counters and per-subscription lag."""
        stats = self.cache.statistics()
        lag = {s.record.sub_id: self._lag(s) for subs in self.streams.values()
               for s in subs.values()}
        return AgentStatistics(
            queue=str(self.queue), cache_size=stats.size, cache_max=stats.max_size,
            under_pressure=stats.under_pressure or self._pressured, pull_period=self.period,
            read=self.read,
            delivered=self.delivered, acknowledged=self.acknowledged, failures=self.failures,
            streams=len(self.streams), subscriptions=len(lag), lag=lag,
            spilled=len(self.spills), spill_count=self.spill_count,
        )

    def _lag(self, sub: _Subscription) -> int:
        """Queue positions behind the newest read (cache) or sequences behind it (spilled)."""
        if sub.cursor is not None:
            return sub.cursor.lag()
        if sub.spilled_from is not None:
            return max(0, self._last_read - sub.after)
        return 0

    def _attach(
        self, sid: StreamId, record: SubscriptionRecord, start: Any, from_queue: bool = False
    ) -> None:
        consumer = self.silo.get_grain(record.consumer_type, record.consumer_key)
        sub = _Subscription(record, sid, consumer)
        self.streams.setdefault(sid, {})[record.sub_id] = sub
        flow = self.options.flow_for(sid.namespace)
        sub.member = flow.strategy == "tagged" and record.tag is not None and (
            record.tag == flow.group
        )
        sub.progress_at = asyncio.get_running_loop().time()
        gating = flow.strategy == "min" or sub.member
        if from_queue:
            self._start_spilled(sub, start)
            return
        try:
            sub.cursor = self.cache.cursor(
                sid, start, gating=gating, tag=record.tag, max_mode=flow.strategy == "max"
            )
        except QueueCacheMissError as miss:
            if self._queue_holds(sid, start):
                # Purged from the cache but still in the queue (a spilled subscription of the
                # stream holds it): this one starts spilled, reading the queue from ``start``.
                self._start_spilled(sub, start)
                return
            sub.cursor = self.cache.cursor(
                sid, miss.low, gating=gating, tag=record.tag, max_mode=flow.strategy == "max"
            )
            self._notify_later(sub, miss)
        if sub.member:  # the group may just have reached its minimum size
            for other in self.streams[sid].values():
                self._start_delivery(other)
        else:
            self._start_delivery(sub)

    def _start_spilled(self, sub: _Subscription, start: SequenceToken) -> None:
        sub.after = start.sequence - 1
        sub.spilled_from = self.cache.cursor(sub.stream_id, gating=False)  # a marker only
        self.cache.remove_cursor(sub.spilled_from)
        self.spills.add(sub)
        self.spill_count += 1
        self._start_delivery(sub)

    def _queue_holds(self, sid: StreamId, start: Any) -> bool:
        """Does the queue still hold every container of ``sid`` from ``start`` on, although
        the cache purged some? Yes if a spilled subscription of the stream is behind
        ``start``: no container of the stream after it has been acknowledged."""
        if start is None or not self.provider.adapter.is_rewindable:
            return False
        behind = self.spills.min_after(sid)
        return behind is not None and behind < start.sequence

    def _group_ready(self, sid: StreamId) -> bool:
        """Tagged flow control: delivery starts once ``min_members`` of the group are in."""
        flow = self.options.flow_for(sid.namespace)
        if flow.strategy != "tagged" or flow.min_members <= 1:
            return True
        members = sum(1 for s in self.streams.get(sid, {}).values() if s.member)
        return members >= flow.min_members

    def _revoke_unresponsive(self) -> None:
        """Tagged flow control: a member stuck longer than the timeout stops gating."""
        now = asyncio.get_running_loop().time()
        for sid, subs in self.streams.items():
            flow = self.options.flow_for(sid.namespace)
            if flow.strategy != "tagged" or flow.timeout is None:
                continue
            for sub in subs.values():
                cursor = sub.cursor
                if cursor is None or not cursor.gating:
                    continue
                if not cursor.is_set:
                    sub.progress_at = now
                elif now - sub.progress_at > flow.timeout:
                    cursor.set_gating(False)
                    self.log.warning("stream_member_stopped_gating",
                                     subscription=sub.record.sub_id, stream=str(sid))
                    self._notify_later(sub, GatingRevokedError(
                        f"subscription {sub.record.sub_id} on {sid} did not advance for "
                        f"{flow.timeout:g} s and no longer holds events for group "
                        f"{flow.group!r}; it may miss events from now on",
                    ))

    # -- spilling (see orleanspy.streams.spill) ----------------------------------------------
    def _spill_laggards(self) -> bool:
        """Under pressure: spill the subscriptions that hold the cache back, if another one
        waits for newer events (caught up, or within a bucket of the newest read), or once
        the pressure has lasted ``max_pull_period`` (a stream not read yet may wait).

        Candidates are set gating cursors under ``min`` flow control; those more than half
        the cache behind (or over their outstanding limit) go, at least the furthest behind.
        While every known subscription lags, spilling at once would mostly read the queue
        twice: the agent backs off first. Returns whether any subscription was spilled.
        """
        if not self.options.spill or not self.provider.adapter.is_rewindable:
            return False
        cache = self.cache
        near = cache.bucket_size
        candidates: list[tuple[int, _Subscription]] = []
        waiting = False
        for sid, subs in self.streams.items():
            gates = self.options.flow_for(sid.namespace).strategy == "min"
            for sub in subs.values():
                cursor = sub.cursor
                if cursor is None:
                    continue
                lag = cursor.lag()
                if not cursor.is_set or lag <= near:
                    waiting = True
                elif gates and cursor.gating:
                    candidates.append((lag, sub))
        if not candidates:
            return False
        if not waiting:
            # Nobody known waits, but a stream not read yet may (its events are behind the
            # backlog): spill anyway once the pressure has lasted ``max_pull_period``.
            now = asyncio.get_running_loop().time()
            if self._pressure_since is None:
                self._pressure_since = now
            if now - self._pressure_since < self.options.max_pull_period:
                return False
        half = len(cache) // 2
        chosen = [
            s for lag, s in candidates
            if lag > half or (s.cursor is not None and cache._over_limit(s.cursor))
        ]
        if not chosen:
            chosen = [max(candidates, key=lambda pair: pair[0])[1]]
        for sub in chosen:
            self._spill(sub)
        return True

    def _spill(self, sub: _Subscription) -> None:
        cursor = sub.cursor
        assert cursor is not None and cursor.item is not None
        sub.after = cursor.item.token.sequence - 1  # its next (or in-flight) item comes next
        sub.spilled_from = cursor
        sub.cursor = None
        self.cache.remove_cursor(cursor)
        self.spills.add(sub)
        self.spill_count += 1
        self.log.info("stream_subscription_spilled", subscription=sub.record.sub_id,
                      stream=str(sub.stream_id), lag=cursor.lag())
        self._start_delivery(sub)

    async def _read_spilled(self, sub: _Subscription) -> list[BatchContainer] | None:
        """The spilled ``sub``'s next containers from the queue; ``None`` once it rejoined."""
        if not sub.buffer:
            assert self.receiver is not None
            after = sub.after
            batch = await self.receiver.read_from(
                SequenceToken(after + 1), min(max(self.cache.bucket_size, 16), 256),
                sub.stream_id,
            )
            if sub.detached or sub.after != after:
                return []
            sub.buffer = [c for c in batch if c.token.sequence > after]
            if not sub.buffer:
                # Caught up with the queue: every later container is cached or still to be
                # read (no await since read_from returned), so the cache can take over.
                cursor = self.cache.rejoin(sub.stream_id, after, tag=sub.record.tag)
                if cursor is None:
                    return []  # one was purged meanwhile (not acknowledged): read it first
                sub.cursor = cursor
                sub.spilled_from = None
                self.spills.discard(sub)
                self.log.info("stream_subscription_rejoined", subscription=sub.record.sub_id,
                              stream=str(sub.stream_id))
                return None
        n = self.options.batch_size
        taken, sub.buffer = sub.buffer[:n], sub.buffer[n:]
        return taken

    # -- delivery -------------------------------------------------------------------------------
    def _start_delivery(self, sub: _Subscription) -> None:
        if sub.task is not None or self._stopping or sub.detached:
            return
        cursor = sub.cursor
        if (sub.spilled_from is not None or (
            cursor is not None and (cursor.is_set or cursor.gap is not None)
        )) and self._group_ready(sub.stream_id):
            sub.task = asyncio.get_running_loop().create_task(self._deliver_loop(sub))

    def _notify_later(self, sub: _Subscription, exc: Exception) -> None:
        task = asyncio.get_running_loop().create_task(self._notify(sub, exc))
        self.silo.track(task)

    async def _notify(self, sub: _Subscription, exc: Exception) -> None:
        try:
            await sub.consumer.invoke(ERROR, sub.record.sub_id, exc)
        except Exception as err:
            self.log.warning("stream_on_error_failed", subscription=sub.record.sub_id,
                             error=repr(err))

    async def _deliver_loop(self, sub: _Subscription) -> None:
        batch_size = self.options.batch_size
        loop = asyncio.get_running_loop()
        try:
            while not self._stopping and not sub.detached:
                if sub.spilled_from is not None:
                    containers = await self._read_spilled(sub)
                    if containers is None or sub.detached:
                        continue  # rejoined the cache (or went away)
                    if not containers:
                        await asyncio.sleep(0)  # let the read cycle purge and move on
                        continue
                    spilled = [p for c in containers for p in c.items()]
                    ok = await self._deliver(sub, spilled, owned=True)
                    if ok is None:
                        return  # abandoned (stopping): not delivered, not acknowledged
                    if sub.spilled_from is not None and not sub.detached:
                        sub.after = containers[-1].token.sequence
                        self._acks += self.spills.delivered(
                            sub, containers, self.cache.purged_sequence(sub.stream_id)
                        )
                        sub.progress_at = loop.time()
                        if ok:
                            self.delivered += len(spilled)
                    continue
                cursor = sub.cursor
                if cursor is None:
                    return
                gap = cursor.take_gap()
                if gap is not None:
                    await self._notify(sub, EventsMissedError(
                        f"subscription {sub.record.sub_id} on {sub.stream_id} missed events "
                        f"{gap[0]}..{gap[1]}: the faster consumers' flow control purged them",
                        gap[0], gap[1],
                    ))
                items = cursor.peek(batch_size)
                if not items:
                    return
                events = [pair for item in items for pair in item.container.items()]
                ok = await self._deliver(sub, events)
                if ok is None:
                    return  # abandoned (stopping): the cursor stays, nothing is acknowledged
                if sub.spilled_from is cursor:
                    # Spilled while this delivery ran: the queue reads go on after it, and
                    # what the cache purged meanwhile is this one's to acknowledge.
                    sub.after = items[-1].token.sequence
                    self._acks += self.spills.delivered(
                        sub, [i.container for i in items],
                        self.cache.purged_sequence(sub.stream_id),
                    )
                    if ok:
                        self.delivered += len(events)
                    continue
                if sub.cursor is not cursor:
                    continue  # re-attached (resume) or removed meanwhile
                cursor.advance(items)
                sub.progress_at = loop.time()
                if ok:
                    self.delivered += len(events)
                if self._wake_reader_needed():
                    self._wake.set()
        finally:
            sub.task = None
            if not self._stopping and not sub.detached and (
                sub.spilled_from is not None or (sub.cursor is not None and sub.cursor.is_set)
            ):
                self._start_delivery(sub)

    def _under_pressure(self) -> bool:
        """Stop reading? Entered at the cache's pressure mark; left (hysteresis) once the cache
        is half empty, so reading resumes in long runs rather than a container at a time."""
        if self._pressured:
            self._pressured = not self._released()
        else:
            self._pressured = self.cache.under_pressure()
        if not self._pressured:
            self._pressure_since = None
        return self._pressured

    def _released(self) -> bool:
        cache = self.cache
        return len(cache) <= cache.max_size // 2 and not cache.under_pressure()

    def _wake_reader_needed(self) -> bool:
        return self.period > self.options.pull_period and self._released()

    async def _deliver(
        self, sub: _Subscription, events: list[Any], owned: bool = False
    ) -> bool | None:
        """Deliver with retries: True once delivered (or skipped after the error protocol),
        False if the subscription was faulted or went away, None if abandoned because the
        agent stops (the events stay unacknowledged: the next owner of the queue delivers
        them again)."""
        opts = self.options
        loop = asyncio.get_running_loop()
        deadline = loop.time() + opts.max_delivery_time
        backoff = opts.delivery_backoff
        record = sub.record
        sid = sub.stream_id
        dispatcher = self.silo.dispatcher
        target = sub.consumer.grain_id
        while True:
            if sub.detached:
                return False  # replaced by a resume or unsubscribed during the back-off
            # Events decoded from the queue belong to the cache; a stream with one subscription
            # hands them over without a copy, several subscriptions each get their own copy of
            # the event values (tokens are immutable and shared).
            batch = events
            if not owned and len(self.streams.get(sid, ())) > 1:
                batch = self._copy_values(events)
            try:
                await dispatcher.call(
                    target, DELIVER, (record.sub_id, sid.namespace, sid.key, batch), None,
                    None, True,
                )
                return True
            except Exception as exc:
                self.failures += 1
                if sub.detached:
                    return False  # unsubscribed meanwhile: nobody to retry for
                if self._stopping:
                    self.log.info("stream_delivery_abandoned", subscription=record.sub_id,
                                  stream=str(sid), token=str(events[0][1]), error=repr(exc))
                    return None
                if loop.time() + backoff > deadline:
                    self.log.warning(
                        "stream_delivery_failed", subscription=record.sub_id,
                        stream=str(sub.stream_id), token=str(events[0][1]), error=repr(exc),
                    )
                    return await self._error_protocol(sub, events, exc)
                self.log.debug("stream_delivery_retry", subscription=record.sub_id,
                               error=repr(exc))
                try:  # back off, but wake up for a stop
                    async with asyncio.timeout(backoff):
                        await self._stopped.wait()
                except TimeoutError:
                    pass
                backoff = min(backoff * 2, opts.max_delivery_backoff)

    def _copy_values(self, events: list[Any]) -> list[Any]:
        values = [e for e, _ in events]
        if all(type(v) in IMMUTABLE_TYPES for v in values):  # shared: nothing to protect
            return events
        codec = self.silo.codec
        copies = codec.unpackb(codec.packb(values))
        return [(v, t) for v, (_, t) in zip(copies, events, strict=True)]

    async def _error_protocol(self, sub: _Subscription, events: list[Any], exc: Exception) -> bool:
        record = sub.record
        error = StreamDeliveryError(
            f"delivering {sub.stream_id} token {events[0][1]} to {record.consumer_type}/"
            f"{record.consumer_key} failed for {self.options.max_delivery_time:g} s: {exc!r}"
        )
        error.__cause__ = exc
        await self._notify(sub, error)
        self.provider.on_delivery_failure(record, sub.stream_id, events[0][1], exc)
        if self.options.failure == "fault" and not record.implicit:
            await self._notify(sub, FaultedSubscriptionError(
                f"subscription {record.sub_id} on {sub.stream_id} was faulted after a failed "
                "delivery; resume it to receive events again"
            ))
            try:
                await self._rendezvous(sub.stream_id).fault_subscription(record.sub_id)
            except Exception as err:
                self.log.warning("stream_fault_failed", subscription=record.sub_id,
                                 error=repr(err))
            subs = self.streams.get(sub.stream_id, {})
            subs.pop(record.sub_id, None)
            self._detach(sub)
            return False
        return True
