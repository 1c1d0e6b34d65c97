"""Spilled subscriptions: a laggard leaves the cache and is served from the queue (3, 4).

Under ``min`` flow control every consumer gates the cache, so one slow consumer would fill
it and stop the agent's reads for every stream of the queue. With a rewindable adapter the
agent instead *spills* that subscription: its cursor leaves the cache (which then purges past
it), and its delivery loop reads the stream's containers again with
``QueueAdapterReceiver.read_from``, in token order, until it has caught up and rejoins the
cache. Nothing is skipped: the containers it still needs stay in the queue, because the agent
holds back their acknowledgement. ``SpillBook`` keeps that account.

For each stream with spilled subscriptions it keeps the sequences of purged containers not
yet acknowledged; a container is acknowledged once every spilled subscription of its stream
has delivered it (its ``after`` passed it). Only stream id and sequence are kept per
container (a placeholder is acknowledged, see ``QueueAdapterReceiver.messages_delivered``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Protocol

from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["SpillBook", "Spilled"]


class Spilled(Protocol):
    """What the book needs of a spilled subscription."""

    stream_id: StreamId
    after: int  # sequence of the last container it delivered (or one before its next)


class SpillBook:
    """The spilled subscriptions of one agent and the acknowledgements they hold back."""

    __slots__ = ("_held", "_spilled", "held")

    def __init__(self) -> None:
        self._spilled: dict[StreamId, set[Spilled]] = {}
        self._held: dict[StreamId, deque[int]] = {}
        self.held = 0  # containers whose acknowledgement is held back

    def __bool__(self) -> bool:
        return bool(self._spilled or self._held)

    def __len__(self) -> int:
        return sum(len(s) for s in self._spilled.values())

    def add(self, sub: Spilled) -> None:
        self._spilled.setdefault(sub.stream_id, set()).add(sub)

    def discard(self, sub: Spilled) -> None:
        """``sub`` rejoined the cache or went away: it holds nothing back any more."""
        subs = self._spilled.get(sub.stream_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._spilled[sub.stream_id]

    def acknowledgeable(self, purged: Sequence[BatchContainer]) -> list[BatchContainer]:
        """Of ``purged`` and what was held before, what may be acknowledged now."""
        spilled, held = self._spilled, self._held
        out: list[BatchContainer] = []
        for container in purged:
            sid = container.stream_id
            if sid in spilled:
                held.setdefault(sid, deque()).append(container.token.sequence)
                self.held += 1
            else:
                out.append(container)
        for sid in list(held):
            seqs = held[sid]
            subs = spilled.get(sid)
            mark = min(s.after for s in subs) if subs else None
            while seqs and (mark is None or seqs[0] <= mark):
                out.append(BatchContainer(sid, SequenceToken(seqs.popleft()), (), 0))
                self.held -= 1
            if not seqs:
                del held[sid]
        return out
