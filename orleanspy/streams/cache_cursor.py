"""The items of a ``QueueCache`` and the cursors that step through them (one per
subscription served from the cache). See ``orleanspy.streams.cache`` for how the cache keeps,
pins and purges them; a cursor moves itself and tells its cache which bucket it pins."""

from __future__ import annotations

from typing import Protocol

from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["CacheCursor", "CacheItem", "CursorCache"]


class CursorCache(Protocol):
    """What a cursor needs of its cache (``QueueCache``)."""

    bucket_size: int
    _end: int  # position of the next item added

    def _base(self) -> int: ...

    def _reseat(self, cursor: CacheCursor, item: CacheItem | None) -> None: ...

    def _pin(self, bucket: int) -> None: ...

    def _unpin(self, bucket: int) -> None: ...


class CacheItem:
    """One batch container in the cache, at queue position ``pos``."""

    __slots__ = ("container", "next", "pos", "size", "stream_id", "token")

    def __init__(self, pos: int, container: BatchContainer) -> None:
        self.pos = pos
        self.container = container
        self.stream_id = container.stream_id
        self.token = container.token
        self.size = container.size
        self.next: CacheItem | None = None  # next item of the same stream


class CacheCursor:
    """One subscription's position in one stream: the next item to deliver, or unset."""

    __slots__ = (
        "_bucket",
        "cache",
        "delivered",
        "gap",
        "gating",
        "inflight_last",
        "item",
        "last_token",
        "max_mode",
        "stream_id",
        "tag",
        "wait_token",
    )

    def __init__(
        self, cache: CursorCache, stream_id: StreamId, gating: bool, tag: str | None,
        max_mode: bool = False,
    ) -> None:
        self.cache = cache
        self.stream_id = stream_id
        self.max_mode = max_mode  # gates as "the fastest of its stream" (flow control max)
        self.gating = gating and not max_mode
        self.tag = tag
        self.item: CacheItem | None = None
        self.wait_token: SequenceToken | None = None  # unset cursor: deliver only >= this
        self.last_token: SequenceToken | None = None  # last delivered
        self.gap: tuple[SequenceToken, SequenceToken] | None = None
        self.inflight_last = -1  # position of the last item being delivered, if any
        self.delivered = 0
        self._bucket = -1

    # -- reading ----------------------------------------------------------------------------
    def peek(self, max_count: int = 1) -> list[CacheItem]:
        """Up to ``max_count`` items from the current position; marks them in flight."""
        out: list[CacheItem] = []
        item = self.item
        while item is not None and len(out) < max_count:
            out.append(item)
            item = item.next
        if out:
            self.inflight_last = out[-1].pos
        return out

    def advance(self, items: list[CacheItem]) -> None:
        """Move past ``items`` (just delivered); unset if nothing more is cached."""
        self.inflight_last = -1
        if not items:
            return
        last = items[-1]
        self.last_token = last.token
        self.delivered += len(items)
        if self.item is not None and self.item.pos > last.pos:
            return  # re-seated by a purge meanwhile
        nxt = last.next
        if nxt is not None and nxt.pos < self.cache._base():
            # ``last`` and what followed it were purged while it was being delivered.
            self.cache._reseat(self, nxt)
            return
        self._move(nxt)

    def take_gap(self) -> tuple[SequenceToken, SequenceToken] | None:
        """The (first, last) tokens this cursor missed since the last call, if any."""
        gap, self.gap = self.gap, None
        return gap

    @property
    def is_set(self) -> bool:
        return self.item is not None

    def lag(self) -> int:
        """Queue positions between this cursor and the newest item (0 when caught up)."""
        item = self.item
        return 0 if item is None else self.cache._end - item.pos

    # -- positioning (cache only) ---------------------------------------------------------
    def _move(self, item: CacheItem | None) -> None:
        cache = self.cache
        if self.gating and self._bucket >= 0:
            cache._unpin(self._bucket)
            self._bucket = -1
        self.item = item
        if item is not None and self.gating:
            self._bucket = item.pos // cache.bucket_size
            cache._pin(self._bucket)

    def set_gating(self, gating: bool) -> None:
        if gating == self.gating:
            return
        item = self.item
        self._move(None)
        self.gating = gating
        self._move(item)
