"""The streams a pulling agent serves and their subscriptions (3): registration with each
stream's pub-sub rendezvous, the subscriptions it announces, the inactivity sweep.

A stream read for the first time registers with its rendezvous in the background (a pin
cursor keeps its first items cached meanwhile) and gets its subscriptions back; the
rendezvous then tells the agent of every later change (``add`` / ``remove``, called from
the agent's turns). A stream with no event for ``inactivity_period`` and nothing cached or in
delivery leaves the table and unregisters; its next event registers it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from orleanspy.errors import GatingRevokedError, QueueCacheMissError
from orleanspy.streams.filters import FilterError, compile_filter
from orleanspy.streams.ids import StreamId
from orleanspy.streams.pubsub import PubSubRendezvous, SubscriptionRecord
from orleanspy.streams.subscription import Subscription
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy._util.clock import Clock
    from orleanspy.streams.cache import QueueCache
    from orleanspy.streams.delivery import Delivery
    from orleanspy.streams.options import StreamProviderOptions
    from orleanspy.streams.spill import Spiller

__all__ = ["StreamTable", "TableHost"]


class TableHost(Protocol):
    """What the stream table needs of its pulling agent."""

    cache: QueueCache
    spiller: Spiller
    options: StreamProviderOptions
    clock: Clock
    delivery: Delivery | None
    log: Any

    @property
    def silo(self) -> Any: ...

    @property
    def provider(self) -> Any: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def key_tuple(self) -> tuple[str, int, str]: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

    def restart(self, sub: Subscription) -> None: ...

    def notify_later(self, sub: Subscription, exc: Exception) -> None: ...


class StreamTable:
    """The streams of one agent's queue, by stream id, and their subscriptions."""

    def __init__(self, agent: TableHost) -> None:
        self.agent = agent
        self.streams: dict[StreamId, dict[str, Subscription]] = {}
        self.registering: set[StreamId] = set()
        self.registered = asyncio.Event()  # set when a registration ends (the hand-off)
        #: subscriptions the rendezvous announced while their stream was registering
        self.early: dict[StreamId, dict[str, SubscriptionRecord]] = {}
        #: subscriptions the rendezvous removed while their stream was registering (its
        #: answer may list them: they are not attached)
        self.gone: dict[StreamId, set[str]] = {}
        #: when each known stream last had an event read (the inactivity sweep)
        self.last_event: dict[StreamId, float] = {}
        self.next_sweep = 0.0

    def subscriptions(self) -> list[Subscription]:
        return [s for subs in self.streams.values() for s in subs.values()]

    def seen(self, sid: StreamId, token: SequenceToken, now: float) -> None:
        """An event of ``sid`` was read (at ``token``): wake its subscriptions, or register
        the stream if it is new (in the background: a cold stream never holds the warm
        ones back)."""
        self.last_event[sid] = now
        subs = self.streams.get(sid)
        if subs is None:
            if sid not in self.registering:
                self.registering.add(sid)
                pin = self.agent.cache.cursor(sid, token, gating=True, max_mode=False)
                self.agent.spawn(self.register(sid, token, pin))
        else:
            restart = self.agent.restart
            for sub in subs.values():
                restart(sub)

    def rendezvous(self, sid: StreamId) -> Any:
        key = (self.agent.provider.name, sid.namespace, sid.key)
        return self.agent.silo.get_grain(PubSubRendezvous, key)

    async def register(self, sid: StreamId, first: SequenceToken, pin: Any) -> None:
        """A stream seen for the first time: learn its subscriptions from its rendezvous.

        ``pin`` (a gating cursor at the stream's first item) keeps the stream's items in the
        cache — unacknowledged — until then; a registration that fails is retried with
        back-off for as long as the agent runs, so nothing is acknowledged undelivered.
        """
        attempt = 0
        try:
            while True:
                try:
                    records = await self.rendezvous(sid).register_producer(self.agent.key_tuple)
                    break
                except Exception as exc:
                    attempt += 1
                    if self.agent.stopping:
                        return
                    self.agent.log.warning("stream_register_failed", stream=str(sid),
                                     attempt=attempt, error=repr(exc))
                    delay = min(self.agent.options.read_backoff * 2 ** (attempt - 1),
                                self.agent.options.max_delivery_backoff)
                    await self.agent.clock.sleep(delay)
                    if self.agent.stopping:
                        return
            records += self.agent.provider.implicit_records(sid)
            records += self.early.pop(sid, {}).values()
            gone = self.gone.pop(sid, ())
            self.last_event.setdefault(sid, self.agent.clock.monotonic())
            subs = self.streams.setdefault(sid, {})
            for record in records:
                if record.sub_id not in subs and record.sub_id not in gone:
                    self.attach(sid, record, record.token or first)
        finally:
            self.agent.cache.remove_cursor(pin)
            self.registration_ended(sid)

    def registration_ended(self, sid: StreamId) -> None:
        self.registering.discard(sid)
        self.early.pop(sid, None)
        self.gone.pop(sid, None)
        self.registered.set()

    def sweep(self) -> None:
        """Forget the streams that had no event for ``inactivity_period`` and have nothing
        cached or in delivery: their subscriptions leave this agent and it unregisters from
        their rendezvous. The next event of such a stream registers it again (and gets its
        subscriptions back from the rendezvous), so the agent's table follows the streams
        that are alive, not every stream it ever read."""
        now = self.agent.clock.monotonic()
        if now < self.next_sweep:
            return
        period = self.agent.options.inactivity_period
        self.next_sweep = now + min(period / 2, 60.0)
        cache = self.agent.cache
        for sid in [s for s, at in self.last_event.items() if now - at >= period]:
            subs = self.streams.get(sid)
            if subs is None:
                del self.last_event[sid]
                continue
            if cache.holds(sid) or any(
                s.task is not None or s.spilled_from is not None for s in subs.values()
            ):
                continue
            del self.streams[sid]
            del self.last_event[sid]
            for sub in subs.values():
                self.detach(sub)
            self.agent.log.debug("stream_inactive", stream=str(sid), subscriptions=len(subs))
            # Events that arrive while it unregisters stay cached (the pin) and register the
            # stream again once the unregistration is done.
            self.registering.add(sid)
            pin = cache.cursor(sid, gating=True, max_mode=False)
            self.agent.spawn(self._retire(sid, pin))

    async def _retire(self, sid: StreamId, pin: Any) -> None:
        try:
            await self.rendezvous(sid).unregister_producer(self.agent.key_tuple)
        except Exception as exc:  # it stays listed: harmless, it is told what it ignores
            self.agent.log.warning("stream_unregister_failed", stream=str(sid), error=repr(exc))
        if pin.is_set and not self.agent.stopping:
            self.last_event[sid] = self.agent.clock.monotonic()
            await self.register(sid, pin.item.token, pin)
            return
        self.agent.cache.remove_cursor(pin)
        self.registration_ended(sid)

    # -- subscriptions (the agent's turns, called by the rendezvous) --------------------------
    def add(self, record: SubscriptionRecord) -> None:
        sid = StreamId(record.namespace, record.key)
        subs = self.streams.get(sid)
        if subs is None:
            if sid in self.registering:  # the rendezvous may have answered already: keep it
                self.early.setdefault(sid, {})[record.sub_id] = record
                self.gone.get(sid, set()).discard(record.sub_id)
            return  # not read yet: register_producer will return this record
        old = subs.get(record.sub_id)
        if old is not None and record.token is None:
            # Resumed without a token (e.g. after a reactivation): it goes on where it was.
            old.resume(record, self.agent.silo.get_grain(record.consumer_type,
                                                         record.consumer_key))
            self.agent.restart(old)
            return
        if old is not None:
            del subs[record.sub_id]
            token = record.token
            if old.spilled_from is not None and token is not None and old.after < token.sequence:
                # A spilled one moved forward: the queue still holds the stream from there
                # (it held it). Attach first, so that its detach releases only what it skips.
                self.attach(sid, record, token, from_queue=True)
                self.detach(old)
                return
            self.detach(old)
        self.attach(sid, record, record.token)

    def remove(self, record: SubscriptionRecord) -> None:
        sid = StreamId(record.namespace, record.key)
        subs = self.streams.get(sid)
        if subs is None:
            if sid in self.registering:  # the rendezvous may have answered already
                self.early.get(sid, {}).pop(record.sub_id, None)
                self.gone.setdefault(sid, set()).add(record.sub_id)
            return
        sub = subs.pop(record.sub_id, None)
        if sub is not None:
            self.detach(sub)

    def detach(self, sub: Subscription) -> None:
        cursor = sub.detach()
        if cursor is not None:
            self.agent.cache.remove_cursor(cursor)
        if self.agent.delivery is not None:
            self.agent.delivery.detached(sub)
        if sub.spilled_from is not None:
            self.agent.spiller.leave(sub)

    def attach(
        self, sid: StreamId, record: SubscriptionRecord, start: SequenceToken | None,
        from_queue: bool = False,
    ) -> None:
        agent = self.agent
        consumer = agent.silo.get_grain(record.consumer_type, record.consumer_key)
        policy = agent.options.flow_for(sid.namespace).policy
        sub = Subscription(record, sid, consumer, member=policy.is_member(record.tag),
                           now=agent.clock.monotonic())
        if record.filter is not None:
            try:
                sub.filter_by(compile_filter(record.filter))
            except FilterError as exc:  # (checked at subscribe): delivered unfiltered, told
                agent.notify_later(sub, exc)
        self.streams.setdefault(sid, {})[record.sub_id] = sub
        gating = policy.gates(sub.member)
        if from_queue:
            assert start is not None
            self.agent.spiller.start_spilled(sub, start)
            return
        try:
            sub.serve_from(agent.cache.cursor(
                sid, start, gating=gating, tag=record.tag, max_mode=policy.max_mode
            ))
        except QueueCacheMissError as miss:
            if start is not None and self.agent.spiller.queue_holds(sid, start):
                # Purged from the cache but still in the queue (a spilled subscription of the
                # stream holds it): this one starts spilled, reading the queue from ``start``.
                self.agent.spiller.start_spilled(sub, start)
                return
            if start is not None and self.agent.spiller.replays:
                # Time travel: replayed from the queue's storage (kept past acknowledgement),
                # then handed over to the cache as a spilled subscription rejoins it.
                self.agent.spiller.start_spilled(sub, start, replay=True)
                return
            sub.serve_from(agent.cache.cursor(
                sid, miss.low, gating=gating, tag=record.tag, max_mode=policy.max_mode
            ))
            self.agent.notify_later(sub, miss)
        if sub.member:  # the group may just have reached its minimum size
            for other in self.streams[sid].values():
                self.agent.restart(other)
        else:
            self.agent.restart(sub)

    def group_ready(self, sid: StreamId) -> bool:
        """Tagged flow control: delivery starts once ``min_members`` of the group are in."""
        policy = self.agent.options.flow_for(sid.namespace).policy
        if not policy.waits_for_members:
            return True
        members = sum(1 for s in self.streams.get(sid, {}).values() if s.member)
        return policy.group_ready(members)

    def revoke_unresponsive(self) -> None:
        """Tagged flow control: a member stuck longer than the timeout stops gating."""
        now = self.agent.clock.monotonic()
        for sid, subs in self.streams.items():
            flow = self.agent.options.flow_for(sid.namespace)
            timeout = flow.policy.revoke_after
            if timeout is None:
                continue
            for sub in subs.values():
                cursor = sub.cursor
                if cursor is None or not cursor.gating:
                    continue
                if not cursor.is_set:
                    sub.progressed(now)
                elif now - sub.progress_at > timeout:
                    cursor.set_gating(False)
                    if sub.retrying:
                        sub.narrow()  # what it no longer holds goes
                    self.agent.log.warning("stream_member_stopped_gating",
                                           subscription=sub.record.sub_id, stream=str(sid))
                    self.agent.notify_later(sub, GatingRevokedError(
                        f"subscription {sub.record.sub_id} on {sid} did not advance for "
                        f"{timeout:g} s and no longer holds events for group "
                        f"{flow.group!r}; it may miss events from now on",
                    ))

    async def fault(self, sub: Subscription) -> None:
        record = sub.record
        try:
            await self.rendezvous(sub.stream_id).fault_subscription(record.sub_id)
        except Exception as err:
            self.agent.log.warning("stream_fault_failed", subscription=record.sub_id,
                                   error=repr(err))
        subs = self.streams.get(sub.stream_id, {})
        subs.pop(record.sub_id, None)
        self.detach(sub)
