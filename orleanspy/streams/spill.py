"""Spilled subscriptions: a laggard leaves the cache and is served from the queue (3, 4).

Under ``min`` flow control every consumer gates the cache, so one slow consumer would fill
it and stop the agent's reads for every stream of the queue (as in Orleans). With a
rewindable adapter the agent instead *spills* that subscription: its cursor leaves the cache,
which then purges past it, and its delivery loop reads the stream's containers again with
``QueueAdapterReceiver.read_from``, in token order, until it has caught up and rejoins the
cache. The queue, not the agent's memory, holds the laggard's backlog.

Nothing is skipped and nothing is acknowledged early. When the cache purges a container of a
stream with spilled subscriptions that one of them has not delivered yet, the container is
*not* acknowledged then: the last spilled subscription to deliver it acknowledges it (it
reads the container from the queue, so it knows it). A spilled subscription that goes away
(unsubscribed, faulted) releases what it alone still held. ``SpillBook`` keeps the account:
for each stream, its spilled subscriptions and where each one is (``after``: the sequence
of the last container it delivered).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["SpillBook", "Spilled", "placeholder"]


class Spilled(Protocol):
    """What the book needs of a spilled subscription."""

    stream_id: StreamId
    after: int  # sequence of the last container it delivered (or one before its next)


def placeholder(container: BatchContainer) -> BatchContainer:
    """What acknowledges ``container`` without keeping its events alive."""
    return BatchContainer(container.stream_id, container.token, (), 0)


class SpillBook:
    """The spilled subscriptions of one agent, by stream."""

    __slots__ = ("_spilled",)

    def __init__(self) -> None:
        self._spilled: dict[StreamId, set[Spilled]] = {}

    def __bool__(self) -> bool:
        return bool(self._spilled)

    def __len__(self) -> int:
        return sum(len(s) for s in self._spilled.values())

    def add(self, sub: Spilled) -> None:
        self._spilled.setdefault(sub.stream_id, set()).add(sub)

    def discard(self, sub: Spilled) -> None:
        """``sub`` rejoined the cache or went away."""
        subs = self._spilled.get(sub.stream_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._spilled[sub.stream_id]

    def min_after(self, stream_id: StreamId, but: Spilled | None = None) -> int | None:
        """Where the furthest-behind spilled subscription of the stream is (``None``: none)."""
        subs = self._spilled.get(stream_id)
        if not subs:
            return None
        afters = [s.after for s in subs if s is not but]
        return min(afters) if afters else None

    def acknowledgeable(self, purged: Sequence[BatchContainer]) -> list[BatchContainer]:
        """Of containers the cache purged, those no spilled subscription still has to deliver
        (the others are acknowledged by the last spilled one to deliver them)."""
        if not self._spilled:
            return list(purged)
        marks: dict[StreamId, int | None] = {}
        out: list[BatchContainer] = []
        for container in purged:
            sid = container.stream_id
            if sid not in marks:
                marks[sid] = self.min_after(sid)
            mark = marks[sid]
            if mark is None or container.token.sequence <= mark:
                out.append(container)
        return out

    def delivered(
        self, sub: Spilled, containers: Iterable[BatchContainer], purged_up_to: int
    ) -> list[BatchContainer]:
        """``sub`` delivered ``containers``: those to acknowledge now, as placeholders.

        A container is acknowledged here if the cache purged it already (its sequence is at
        most ``purged_up_to``, the stream's last purged one) and every other spilled
        subscription of the stream is past it; otherwise the cache's purge or another
        spilled subscription acknowledges it later.
        """
        others = self.min_after(sub.stream_id, but=sub)
        return [
            placeholder(c) for c in containers
            if c.token.sequence <= purged_up_to and (others is None or c.token.sequence <= others)
        ]


def release_range(after: int, up_to: int, others: int | None) -> tuple[SequenceToken, int] | None:
    """When a spilled subscription at ``after`` goes away: the first token and the last
    sequence of the containers only it held (purged up to ``up_to``, other spilled ones at
    ``others``); ``None`` if there are none."""
    last = up_to if others is None else min(up_to, others)
    if last <= after:
        return None
    return SequenceToken(after + 1), last
