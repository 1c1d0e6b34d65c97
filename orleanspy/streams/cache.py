"""QueueCache: the bounded cache between a pulling agent's reads and its deliveries.

Rationale (after Orleans' SimpleQueueCache, see docs/streams.md). Items are kept in queue
order, each linked to the next item of its stream, so a cursor steps through its stream in
O(1). Items are grouped into ``BUCKETS`` buckets of ``bucket_size`` positions; each bucket
counts the *gating* cursors that point into it. Purging removes whole buckets from the old
end while no gating cursor is in them, and only purged items are acknowledged to the queue:
an event leaves the cache (and the queue) only when every gating consumer is past it.

A cursor that has delivered everything of its stream is *unset* and pins nothing; the next
item of its stream sets it again. A caught-up consumer therefore never holds back other
streams. Which cursors gate depends on the flow-control strategy:

* ``min`` — every cursor gates: the slowest consumer decides (default).
* ``max`` — only the fastest consumer decides; a laggard whose next items were purged is
  re-seated on the oldest item still cached and told the exact token range it missed.
* ``tagged`` — only cursors carrying the group's tag gate; the others behave as under ``max``.

The cache is *under pressure* when it holds ``pressure_ratio`` of its capacity or a
subscription has more undelivered events or bytes in it than its limit; the agent then stops
reading and slows its pull period. Nothing undelivered is dropped under ``min``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from orleanspy.errors import QueueCacheMissError
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.cache_cursor import CacheCursor, CacheItem
from orleanspy.streams.flow_control import FlowStrategy
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["BUCKETS", "CacheCursor", "CacheItem", "CacheStatistics", "QueueCache"]

BUCKETS: Final = 10


@dataclass(frozen=True, slots=True)
class CacheStatistics:
    size: int
    max_size: int
    under_pressure: bool
    cursors: int
    gating_cursors: int
    max_lag: int
    added: int
    purged: int


class QueueCache:
    """The cache of one queue (one per pulling agent)."""

    def __init__(
        self,
        max_size: int = 4096,
        *,
        strategy: FlowStrategy | str = FlowStrategy.MIN,
        pressure_ratio: float = 0.9,
        max_outstanding_events: int | None = None,
        max_outstanding_bytes: int | None = None,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"QueueCache(max_size={max_size}): must be >= 1")
        if strategy not in tuple(FlowStrategy):
            raise ValueError(f"QueueCache(strategy={strategy!r}): use min, max or tagged")
        self.max_size = max_size
        self.strategy = FlowStrategy(strategy)
        self.bucket_size = max(1, max_size // BUCKETS)
        self.pressure_size = max(1, int(max_size * pressure_ratio))
        self.max_outstanding_events = max_outstanding_events
        self.max_outstanding_bytes = max_outstanding_bytes
        self._items: deque[CacheItem] = deque()
        self._end = 0  # position of the next item added
        self._bytes = 0
        self._tails: dict[StreamId, CacheItem] = {}
        self._heads: dict[StreamId, CacheItem] = {}
        self._cursors: dict[StreamId, set[CacheCursor]] = {}
        self._pins: dict[int, int] = {}
        self._purged_token: dict[StreamId, SequenceToken] = {}
        self._purged_any: SequenceToken | None = None
        #: the token of the first item this cache ever held: the agent read the queue from
        #: its acknowledgement point, so anything older had been acknowledged (is gone)
        self._first_token: SequenceToken | None = None
        self.added = 0
        self.purged = 0

    # -- flow ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._items)

    def max_add_count(self) -> int:
        """How many containers the agent may read now (0: stop reading)."""
        if self.under_pressure():
            return 0
        return min(self.max_size - len(self._items), self.bucket_size)

    def under_pressure(self) -> bool:
        if len(self._items) >= self.pressure_size:
            return True
        if self.max_outstanding_events is None and self.max_outstanding_bytes is None:
            return False
        return any(self.over_limit(c) for cs in self._cursors.values() for c in cs)

    def over_limit(self, cursor: CacheCursor) -> bool:
        """Does ``cursor`` have more undelivered events or bytes cached than its limit?"""
        item = cursor.item
        if item is None:
            return False
        limit_n, limit_b = self.max_outstanding_events, self.max_outstanding_bytes
        n = b = 0
        while item is not None:
            n += 1
            b += item.size
            if (limit_n is not None and n > limit_n) or (limit_b is not None and b > limit_b):
                return True
            item = item.next
        return False

    # -- adding -------------------------------------------------------------------------------
    def add(self, containers: Iterable[BatchContainer]) -> dict[StreamId, CacheItem]:
        """Append containers (queue order); return the first new item of each stream."""
        first: dict[StreamId, CacheItem] = {}
        items = self._items
        tails = self._tails
        pos = self._end
        if self._first_token is None:
            containers = list(containers)
            if containers:
                self._first_token = containers[0].token
        size = 0
        tail: CacheItem | None = None
        run: StreamId | None = None  # the stream of the previous container
        for container in containers:
            item = CacheItem(pos, container)
            pos += 1
            items.append(item)
            size += item.size
            sid = item.stream_id
            if tail is not None and (sid is run or sid == run):
                tail.next = item  # same stream as the previous one: no lookups
                tail = item
                continue
            if tail is not None:
                tails[run] = tail  # type: ignore[index]
            run = sid
            tail = tails.get(sid)
            if tail is not None:
                tail.next = item
            else:
                self._heads[sid] = item
            tail = item
            if sid not in first:
                first[sid] = item
        if tail is not None:
            tails[run] = tail  # type: ignore[index]
        self._end = pos
        self._bytes += size
        self.added = pos
        for sid, item in first.items():
            for cursor in self._cursors.get(sid, ()):
                if cursor.item is None:
                    self._seat_unset(cursor, item)
        return first

    def _seat_unset(self, cursor: CacheCursor, item: CacheItem | None) -> None:
        wait = cursor.wait_token
        while item is not None and wait is not None and item.token < wait:
            item = item.next
        if item is not None and cursor.last_token is not None:
            while item is not None and item.token <= cursor.last_token:
                item = item.next
        if item is not None:
            cursor.wait_token = None
            cursor._move(item)

    # -- cursors ------------------------------------------------------------------------------
    def cursor(
        self,
        stream_id: StreamId,
        start: SequenceToken | None = None,
        *,
        gating: bool = True,
        tag: str | None = None,
        max_mode: bool | None = None,
    ) -> CacheCursor:
        """A cursor on ``stream_id``: from ``start`` (inclusive) or, without it, for items
        added from now on. Raises ``QueueCacheMissError`` if ``start`` was purged.

        ``gating``: the cursor holds items until it is past them (``min``). ``max_mode``:
        only the fastest ``max_mode`` cursor of the stream holds items (``max``); the
        default follows the cache's ``strategy``.
        """
        if max_mode is None:
            max_mode = self.strategy is FlowStrategy.MAX
        cursor = CacheCursor(self, stream_id, gating, tag, max_mode)
        if start is not None:
            purged = self._purged_token.get(stream_id)
            oldest = self._first_token
            if (purged is not None and start <= purged) or (
                purged is None and stream_id not in self._heads and self._purged_any is not None
                and start <= self._purged_any
            ) or (oldest is not None and start < oldest):
                head = self._heads.get(stream_id)
                tail = self._tails.get(stream_id)
                raise QueueCacheMissError(
                    f"events of {stream_id} from {start} are no longer cached",
                    start,
                    head.token if head else None,
                    tail.token if tail else None,
                )
            cursor.wait_token = start
            self._seat_unset(cursor, self._heads.get(stream_id))
        self._cursors.setdefault(stream_id, set()).add(cursor)
        return cursor

    def rejoin(
        self, stream_id: StreamId, after: int, *, gating: bool = True, tag: str | None = None
    ) -> CacheCursor | None:
        """A cursor for a subscription coming back from the queue (see the agent's spill).

        It delivered every container of ``stream_id`` up to sequence ``after``; the cursor
        starts at the first cached item after it. ``None`` if an item of the stream after
        ``after`` was purged already: the subscription must read that one from the queue.
        """
        purged = self._purged_token.get(stream_id)
        if purged is not None and purged.sequence > after:
            return None
        cursor = CacheCursor(self, stream_id, gating, tag, False)
        cursor.wait_token = SequenceToken(after + 1)
        self._seat_unset(cursor, self._heads.get(stream_id))
        self._cursors.setdefault(stream_id, set()).add(cursor)
        return cursor

    def holds(self, stream_id: StreamId) -> bool:
        """Does the cache hold an item of ``stream_id``?"""
        return stream_id in self._heads

    def purged_sequence(self, stream_id: StreamId) -> int:
        """The sequence of the stream's last purged container (-1: none purged)."""
        token = self._purged_token.get(stream_id)
        return -1 if token is None else token.sequence

    def remove_cursor(self, cursor: CacheCursor) -> None:
        cursor._move(None)
        cursors = self._cursors.get(cursor.stream_id)
        if cursors is not None:
            cursors.discard(cursor)
            if not cursors:
                del self._cursors[cursor.stream_id]

    def cursors(self) -> list[CacheCursor]:
        return [c for cs in self._cursors.values() for c in cs]

    def _pin(self, bucket: int) -> None:
        self._pins[bucket] = self._pins.get(bucket, 0) + 1

    def _unpin(self, bucket: int) -> None:
        n = self._pins[bucket] - 1
        if n:
            self._pins[bucket] = n
        else:
            del self._pins[bucket]

    # -- purging ------------------------------------------------------------------------------
    def purge(self) -> list[BatchContainer]:
        """Remove what no gating cursor needs any more; return it for acknowledgement."""
        items = self._items
        if not items:
            return []
        limit = self._purge_limit()
        if items[0].pos >= limit:
            return []
        out: list[BatchContainer] = []
        append = out.append
        popleft = items.popleft
        heads, tails, purged_token = self._heads, self._tails, self._purged_token
        size = 0
        last: CacheItem | None = None  # the last purged item of the current run of a stream
        while items and items[0].pos < limit:
            item = popleft()
            append(item.container)
            size += item.size
            if last is not None and last.next is item:
                last = item  # the same stream as the previous item: settle it later
                continue
            if last is not None:
                self._settle_purged(last, heads, tails, purged_token)
            last = item
        if last is not None:
            self._settle_purged(last, heads, tails, purged_token)
            # Tokens rise with positions: the last purged item has the newest token.
            self._purged_any = last.token
        self._bytes -= size
        self.purged += len(out)
        self._reseat_laggards(limit)
        return out

    @staticmethod
    def _settle_purged(
        item: CacheItem, heads: dict[StreamId, CacheItem], tails: dict[StreamId, CacheItem],
        purged_token: dict[StreamId, SequenceToken],
    ) -> None:
        """``item`` is the last purged one of a run of its stream: update the stream's ends."""
        sid = item.stream_id
        purged_token[sid] = item.token
        nxt = item.next
        if nxt is None:
            heads.pop(sid, None)
            if tails.get(sid) is item:
                del tails[sid]
        else:
            heads[sid] = nxt

    def size_after_purge(self) -> int:
        """How many items a purge now would leave (nothing is removed)."""
        if not self._items:
            return 0
        return self._end - max(self._items[0].pos, self._purge_limit())

    def _purge_limit(self) -> int:
        """Position below which items may go."""
        end = self._end
        # min / tagged: whole buckets from the old end while no gating cursor is in them.
        bucket = self._items[0].pos // self.bucket_size
        last = (end - 1) // self.bucket_size
        pins = self._pins
        while bucket <= last and not pins.get(bucket):
            bucket += 1
        limit = min(end, bucket * self.bucket_size)
        # max: per stream, the fastest max-mode cursor holds items (a caught-up one: none).
        for cursors in self._cursors.values():
            best = -1
            for c in cursors:
                if c.max_mode:
                    if c.item is None:
                        best = end
                        break
                    best = max(best, c.item.pos)
            if 0 <= best < limit:
                limit = best
        return limit

    def _base(self) -> int:
        return self._items[0].pos if self._items else self._end

    def _reseat_laggards(self, limit: int) -> None:
        """Cursors left on purged items move to the oldest cached item of their stream."""
        for cursors in self._cursors.values():
            for cursor in cursors:
                item = cursor.item
                if item is not None and item.pos < limit:
                    self._reseat(cursor, item)

    def _reseat(self, cursor: CacheCursor, item: CacheItem | None) -> None:
        """Move ``cursor`` from purged ``item`` to the first cached one; record the gap.

        The gap runs from the first missed event to the last one (a container's last event,
        not its first), merged with a gap not yet reported. Purged items keep their links, so
        the walk may cover items reported before: the merge keeps the widest range.
        """
        base = self._base()
        first = last = None
        while item is not None and item.pos < base:
            if item.pos > cursor.inflight_last:
                if first is None:
                    first = item.token
                n = item.container.count
                last = item.token if n <= 1 else item.token.for_event(n - 1)
            item = item.next
        if first is not None and last is not None:
            if cursor.gap is not None:
                first, last = min(first, cursor.gap[0]), max(last, cursor.gap[1])
            cursor.gap = (first, last)
        if item is None:
            # The purged run ended: go on at the stream's first cached item after what the
            # cursor delivered (items added after a purge are not linked to purged ones).
            cursor._move(None)
            self._seat_unset(cursor, self._heads.get(cursor.stream_id))
            return
        cursor._move(item)

    def delivered_to_all(self) -> list[BatchContainer]:
        """Cached containers every cursor of their stream is past (the purge frees whole
        buckets only); none if any cursor does not gate (max / tagged) or there is none.
        Items of streams without cursors are left to the purge."""
        cursors = self.cursors()
        if not cursors or any(c.max_mode or not c.gating for c in cursors):
            return []
        needed: dict[StreamId, float] = {}  # stream -> first position a cursor still needs
        for c in cursors:
            pos = float("inf") if c.item is None else c.item.pos
            needed[c.stream_id] = min(needed.get(c.stream_id, pos), pos)
        return [item.container for item in self._items
                if item.pos < needed.get(item.stream_id, -1)]

    # -- observability ----------------------------------------------------------------------
    def statistics(self) -> CacheStatistics:
        cursors = self.cursors()
        return CacheStatistics(
            size=len(self._items),
            max_size=self.max_size,
            under_pressure=self.under_pressure(),
            cursors=len(cursors),
            gating_cursors=sum(1 for c in cursors if c.gating),
            max_lag=max((c.lag() for c in cursors), default=0),
            added=self.added,
            purged=self.purged,
        )
