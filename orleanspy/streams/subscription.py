"""Subscription: one subscription as its queue's pulling agent serves it, and its states.

A subscription is served from a cache cursor (*cached*) or, once spilled, from the queue
(*spilled*: ``spilled_from`` is the cursor it left, ``after`` the sequence of the last
container it delivered); ``detach`` ends it (removed, faulted or replaced by a resume)::

    cached --spill()--> spilled --rejoin(cursor)--> cached
    spilled --leave_spill()--> (neither: it goes away)
    any --detach()--> detached (final)

Apart from that, its delivery loop (``orleanspy.streams.delivery``) keeps the delivery under
way on it: the task, the cache items in flight, the failed attempts and the back-off.

Every field is written here, by the transitions below; the agent, the spiller and the
delivery loop read the fields and call the transitions.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from orleanspy.messaging.context_event import ContextEvent

if TYPE_CHECKING:
    from orleanspy.streams.adapters.base import BatchContainer
    from orleanspy.streams.cache import CacheCursor, CacheItem
    from orleanspy.streams.decoding import Event
    from orleanspy.streams.filters import Match
    from orleanspy.streams.ids import StreamId
    from orleanspy.streams.pubsub import SubscriptionRecord

__all__ = ["Subscription"]


class Subscription:
    """One subscription of a stream on the agent that owns the stream's queue."""

    __slots__ = (
        "abandoned", "after", "buffer", "consumer", "cursor", "detached", "failing", "inflight",
        "inflight_spilled", "match", "member", "next_seq", "progress_at", "record", "retrying",
        "spilled_from", "stream_id", "task",
    )

    def __init__(self, record: SubscriptionRecord, stream_id: StreamId, consumer: Any,
                 *, member: bool = False, now: float = 0.0) -> None:
        self.record = record
        self.stream_id = stream_id
        self.consumer = consumer
        self.cursor: CacheCursor | None = None
        self.task: asyncio.Task[None] | None = None
        self.member = member  # a gating member of the tagged group
        self.progress_at = now  # when it last delivered (or was caught up)
        self.detached = False  # removed, faulted or replaced by a resume
        self.abandoned = False  # a delivery failed while the agent stops: left to the next owner
        self.next_seq = -1  # the container of the next event a failing delivery retries
        self.retrying = False  # waiting out a back-off between attempts
        self.failing = 0  # failed attempts of the delivery under way (0: none failed)
        self.spilled_from: CacheCursor | None = None
        self.after = -1
        self.buffer: list[BatchContainer] = []  # spilled: read from the queue, not delivered
        #: the cache items of the delivery in flight. Cache items link to the next one of
        #: their stream, so nothing else may hold them across the delivery's await: a spill
        #: swaps them for their containers (``inflight_spilled``), and the cache's purges can
        #: then free every later item.
        self.inflight: list[CacheItem] | None = None
        self.inflight_spilled: list[BatchContainer] | None = None
        #: its filter (``orleanspy.streams.filters``): only the events it matches are delivered
        self.match: Match | None = None

    def __repr__(self) -> str:
        return f"<subscription {self.record.sub_id} on {self.stream_id} ({self.state})>"

    @property
    def state(self) -> str:
        """``new`` (not served yet), ``cached``, ``spilled``, or ``detached`` (final)."""
        if self.detached:
            return "detached"
        if self.spilled_from is not None:
            return "spilled"
        return "new" if self.cursor is None else "cached"

    # -- where it is served from ------------------------------------------------------------
    def serve_from(self, cursor: CacheCursor) -> None:
        """Served from the cache at ``cursor``."""
        assert self.state == "new", self
        self.cursor = cursor

    def filter_by(self, match: Match) -> None:
        """Deliver only the events ``match(event, stream key)`` is true for."""
        self.match = match

    def select(self, events: list[Event]) -> list[Event]:
        """Those of ``events`` its filter matches."""
        match, key = self.match, self.stream_id.key
        assert match is not None
        return [e for e in events if match(
            e[0].item if type(e[0]) is ContextEvent else e[0], key)]

    def resume(self, record: SubscriptionRecord, consumer: Any) -> None:
        """Resumed without a token (a reactivation, say): it goes on where it was."""
        self.record = record
        self.consumer = consumer

    def detach(self) -> CacheCursor | None:
        """It goes away (removed, faulted, replaced): the cursor it leaves, to remove."""
        self.detached = True
        cursor, self.cursor = self.cursor, None
        return cursor

    def spill(self) -> CacheCursor:
        """It leaves the cache: served from the queue from its cursor's next item on (a
        delivery in flight keeps its containers, not the cache's items). Returns the
        cursor, for the cache to remove."""
        cursor = self.cursor
        assert self.state == "cached" and cursor is not None and cursor.item is not None, self
        self.after = cursor.item.token.sequence - 1  # its next (or in-flight) item comes next
        self.spilled_from = cursor
        self.cursor = None
        if self.inflight is not None:
            self.inflight_spilled = [item.container for item in self.inflight]
            self.inflight = None
        return cursor

    def start_spilled(self, marker: CacheCursor, start: int) -> None:
        """It starts served from the queue at sequence ``start`` (``marker`` stands for the
        cursor it never had)."""
        assert self.state == "new", self
        self.after = start - 1
        self.spilled_from = marker

    def rejoin(self, cursor: CacheCursor) -> None:
        """Spilled, it caught up with the queue: the cache serves it again."""
        assert self.state == "spilled", self
        self.cursor = cursor
        self.spilled_from = None

    def leave_spill(self) -> None:
        """Spilled, it goes away: nothing more is read for it."""
        self.spilled_from = None
        self.buffer = []

    # -- spilled: what it read from the queue ------------------------------------------------
    def fill(self, batch: list[BatchContainer]) -> None:
        """Keep the containers of ``batch`` past ``after`` (its next deliveries)."""
        after = self.after
        self.buffer = [c for c in batch if c.token.sequence > after]

    def take(self, n: int) -> list[BatchContainer]:
        """Its next ``n`` read containers, for one delivery."""
        taken, self.buffer = self.buffer[:n], self.buffer[n:]
        return taken

    def moved_past(self, containers: list[BatchContainer]) -> None:
        """Spilled, it delivered ``containers``."""
        self.after = containers[-1].token.sequence

    # -- the delivery under way --------------------------------------------------------------
    def started(self, task: asyncio.Task[None]) -> None:
        self.task = task

    def ended(self) -> None:
        self.task = None

    def hold(self, items: list[CacheItem]) -> None:
        """A delivery of cache ``items`` begins: only this subscription holds them."""
        self.inflight = items

    def release(self) -> list[CacheItem] | None:
        """The delivery ended: its items (``None`` if a spill swapped them meanwhile)."""
        items, self.inflight = self.inflight, None
        return items

    def take_handed(self) -> list[BatchContainer] | None:
        """Spilled during a delivery: the containers the delivery carried."""
        handed, self.inflight_spilled = self.inflight_spilled, None
        return handed

    def kept(self, events: list[Event]) -> list[Event]:
        """``events`` without those a narrowed in-flight delivery no longer carries."""
        items = self.inflight
        if items is None:
            return events
        last = items[-1].token.sequence
        if events[-1][1].sequence <= last:
            return events
        return [e for e in events if e[1].sequence <= last]

    def narrow(self) -> None:
        """A cursor that does not gate (any more: a tagged member past its timeout) retries
        only the container of its next event: the rest of the failing delivery is no longer
        held for it, and what its flow control purges meanwhile is reported as missed,
        exactly as if each delivery carried one container. Called between attempts only."""
        cursor = self.cursor
        items = self.inflight
        if cursor is None or cursor.gating or items is None or len(items) < 2:
            return
        keep = [item for item in items if item.token.sequence <= self.next_seq]
        if keep and len(keep) < len(items):
            self.inflight = keep
            cursor.inflight_last = keep[-1].pos

    def delivered(self, items: list[CacheItem], now: float) -> None:
        """Served from the cache, it delivered ``items`` (at ``now``): its cursor moves on."""
        cursor = self.cursor
        assert cursor is not None
        cursor.advance(items)
        self.progress_at = now

    def progressed(self, now: float) -> None:
        """It delivered (or had nothing to deliver) at ``now``."""
        self.progress_at = now

    def abandon(self) -> None:
        """A delivery failed while the agent stops: its events are left to the next owner."""
        self.abandoned = True

    def attempt_failed(self) -> None:
        self.failing += 1

    def attempt_succeeded(self) -> None:
        self.failing = 0

    def retry_at(self, sequence: int) -> None:
        """A failing delivery retries from the container of ``sequence``: the consumer
        handled (or gave up) every event of the containers before it. Served from the cache,
        its cursor moves past those now and the delivery carries the rest, so that what it
        handled is acknowledged (and never delivered again by the queue's next owner) even if
        the rest is abandoned. A container is acknowledged whole: a container handled in part
        stays in the delivery."""
        self.next_seq = sequence
        items, cursor = self.inflight, self.cursor
        if items is None or cursor is None or items[0].token.sequence >= sequence:
            return
        n = 1
        while n < len(items) and items[n].token.sequence < sequence:
            n += 1
        if n == len(items):
            return  # (the failing container is no longer carried: the loop settles it)
        rest = items[n:]
        cursor.advance(items[:n])
        cursor.inflight_last = rest[-1].pos
        self.inflight = rest

    def backing_off(self, waiting: bool) -> None:
        self.retrying = waiting
