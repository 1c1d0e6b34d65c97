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

from collections.abc import Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from orleanspy.errors import ReplayUnavailableError
from orleanspy.logging import get_logger
from orleanspy.streams.adapters.base import BatchContainer, QueueAdapterReceiver
from orleanspy.streams.cache import QueueCache
from orleanspy.streams.ids import StreamId
from orleanspy.streams.subscription import Subscription
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy._util.clock import Clock
    from orleanspy.streams.options import StreamProviderOptions

__all__ = ["SpillBook", "SpillHost", "Spilled", "Spiller", "placeholder", "release_range"]


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


class SpillHost(Protocol):
    """What the ``Spiller`` needs of its pulling agent."""

    cache: QueueCache
    streams: dict[StreamId, dict[str, Subscription]]
    options: StreamProviderOptions
    clock: Clock
    receiver: QueueAdapterReceiver | None

    @property
    def stopping(self) -> bool: ...

    @property
    def last_read(self) -> int: ...

    def restart(self, sub: Subscription) -> None: ...

    def subscription_moved(self, sub: Subscription, spilled: bool) -> None:
        """``sub`` left the cache (``spilled``) or rejoined it (reported as an event)."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

    def notify_later(self, sub: Subscription, exc: Exception) -> None: ...


class Spiller:
    """Spills an agent's laggards, serves them from the queue and keeps the account of what
    their deliveries may acknowledge."""

    __slots__ = ("_acks", "_pressure_since", "_replaying", "book", "count", "enabled", "host",
                 "log", "replays")

    def __init__(self, host: SpillHost, enabled: bool, log: Any = None) -> None:
        self.host = host
        self.enabled = enabled  # a rewindable adapter and the ``spill`` option
        self.replays = False  # a rewindable adapter with a retention: time travel
        #: replays whose first read still checks the retention (``read_range``)
        self._replaying: set[Subscription] = set()
        self.book = SpillBook()
        self.count = 0  # subscriptions spilled so far
        self._acks: list[BatchContainer] = []  # acknowledged by spilled deliveries
        self._pressure_since: float | None = None  # when the current pressure began
        self.log = log if log is not None else get_logger(__name__)

    def __len__(self) -> int:
        return len(self.book)

    @property
    def busy(self) -> bool:
        """Spilled subscriptions, or acknowledgements not handed to the queue yet."""
        return bool(self.book) or bool(self._acks)

    def acknowledgeable(self, purged: list[BatchContainer]) -> list[BatchContainer]:
        """Of the containers the cache purged, those to acknowledge now, with what spilled
        deliveries made acknowledgeable since the last call."""
        if self.book:
            purged = self.book.acknowledgeable(purged)
        if self._acks:
            purged, self._acks = [*purged, *self._acks], []
        return purged

    def pressure_ended(self) -> None:
        self._pressure_since = None

    def spill_laggards(self) -> bool:
        """Under pressure: spill the subscriptions that hold the cache back, if another one
        waits for newer events of its stream, or once the pressure has lasted
        ``max_pull_period`` (a stream not read yet may wait).

        A subscription waits when it is caught up (or within a bucket of the newest read)
        and its stream is in the cache: its events came in the same stretch of the queue as
        the backlog, so more of them are likely queued behind it. A caught-up subscription
        of a stream the cache no longer holds is idle, not held back: a burst on one stream
        among idle ones does not spill its consumer, which would then read it twice.

        Candidates are set gating cursors of a policy that spills (``min``); those more than
        half the cache behind (or over their outstanding limit) go, at least the furthest
        behind. While no subscription waits, spilling at once would mostly read the queue
        twice: the agent backs off first. Returns whether any subscription was spilled.
        """
        if not self.enabled:
            return False
        host = self.host
        cache = host.cache
        near = cache.bucket_size
        candidates: list[tuple[int, Subscription]] = []
        waiting = False
        for sid, subs in host.streams.items():
            spills = host.options.flow_for(sid.namespace).policy.spills
            for sub in subs.values():
                cursor = sub.cursor
                if cursor is None:
                    continue
                if cursor.is_set:
                    lag = cursor.lag()
                    if lag <= near:
                        waiting = True
                    elif spills and cursor.gating:
                        candidates.append((lag, sub))
                elif not waiting and cache.holds(sid):
                    waiting = True
        if not candidates:
            return False
        if not waiting:
            # Nobody known waits, but a stream not read yet may (its events are behind the
            # backlog): spill anyway once the pressure has lasted ``max_pull_period``.
            now = host.clock.monotonic()
            if self._pressure_since is None:
                self._pressure_since = now
            if now - self._pressure_since < host.options.max_pull_period:
                return False
        half = len(cache) // 2
        chosen = [
            s for lag, s in candidates
            if lag > half or (s.cursor is not None and cache.over_limit(s.cursor))
        ]
        if not chosen:
            chosen = [max(candidates, key=lambda pair: pair[0])[1]]
        for sub in chosen:
            self._spill(sub)
        self._pressure_since = None  # a later spill waits for its own pressure to last
        return True

    def _spill(self, sub: Subscription) -> None:
        cursor = sub.spill()
        self.host.cache.remove_cursor(cursor)
        self.book.add(sub)
        self.count += 1
        self.log.info("stream_subscription_spilled", subscription=sub.record.sub_id,
                      stream=str(sub.stream_id), lag=cursor.lag())
        self.host.subscription_moved(sub, True)
        self.host.restart(sub)

    def start_spilled(self, sub: Subscription, start: SequenceToken,
                      replay: bool = False) -> None:
        """``sub`` starts served from the queue, at ``start`` (``replay``: older than the
        cache, from storage kept past acknowledgement; its first read checks that nothing
        from ``start`` on was trimmed)."""
        if replay:
            self._replaying.add(sub)
        cache = self.host.cache
        marker = cache.cursor(sub.stream_id, gating=False)  # a marker only
        cache.remove_cursor(marker)
        sub.start_spilled(marker, start.sequence)
        self.book.add(sub)
        self.count += 1
        self.host.subscription_moved(sub, True)
        self.host.restart(sub)

    def queue_holds(self, sid: StreamId, start: SequenceToken) -> bool:
        """Does the queue still hold every container of ``sid`` from ``start`` on, although
        the cache purged some? Yes if a spilled subscription of the stream is behind
        ``start``: no container of the stream after it has been acknowledged."""
        if not self.enabled:
            return False
        behind = self.book.min_after(sid)
        return behind is not None and behind < start.sequence

    async def read(
        self, sub: Subscription, receiver: QueueAdapterReceiver
    ) -> list[BatchContainer] | None:
        """The spilled ``sub``'s next containers from the queue; ``None`` once it rejoined."""
        host = self.host
        if not sub.buffer:
            after = sub.after
            cache = host.cache
            count = min(max(cache.bucket_size, 16), 256)
            if sub in self._replaying:
                self._replaying.discard(sub)
                batch = await self._replay(sub, receiver, count)
            else:
                batch = await receiver.read_from(SequenceToken(after + 1), count, sub.stream_id)
            if sub.detached or sub.after != after:
                return []
            sub.fill(batch)
            if not sub.buffer:
                # Caught up with the queue: every later container is cached or still to be
                # read (no await since read_from returned), so the cache can take over.
                cursor = cache.rejoin(sub.stream_id, after, tag=sub.record.tag)
                if cursor is None:
                    return []  # one was purged meanwhile (not acknowledged): read it first
                sub.rejoin(cursor)
                self.book.discard(sub)
                self.log.info("stream_subscription_rejoined", subscription=sub.record.sub_id,
                              stream=str(sub.stream_id))
                host.subscription_moved(sub, False)
                return None
        return sub.take(host.options.batch_size)

    async def _replay(self, sub: Subscription, receiver: QueueAdapterReceiver,
                      count: int) -> list[BatchContainer]:
        """The first read of a replay: beyond retention, ``on_error`` hears it (naming the
        oldest point available) and the replay goes on from that point, never silently."""
        start = SequenceToken(sub.after + 1)
        try:
            return await receiver.read_range(start, count, sub.stream_id)
        except ReplayUnavailableError as exc:
            self.log.warning("stream_replay_beyond_retention", subscription=sub.record.sub_id,
                             stream=str(sub.stream_id), error=str(exc))
            self.host.notify_later(sub, exc)
            oldest = exc.oldest_token
            if isinstance(oldest, SequenceToken) and oldest > start:
                return await receiver.read_from(oldest, count, sub.stream_id)
            raise

    def delivered(self, sub: Subscription, containers: list[BatchContainer]) -> None:
        """The spilled ``sub`` delivered ``containers``: it moves on past them."""
        sub.moved_past(containers)
        self._acks += self.book.delivered(
            sub, containers, self.host.cache.purged_sequence(sub.stream_id)
        )

    def leave(self, sub: Subscription) -> None:
        """The spilled ``sub`` went away: release what it alone still held."""
        self._replaying.discard(sub)
        sid = sub.stream_id
        span = release_range(sub.after, self.host.cache.purged_sequence(sid),
                             self.book.min_after(sid, but=sub))
        self.book.discard(sub)
        sub.leave_spill()
        if span is not None:  # containers only it still held: acknowledge them
            self.host.spawn(self._release(sid, *span))

    async def _release(self, sid: StreamId, first: SequenceToken, last: int) -> None:
        host = self.host
        while host.receiver is not None and not host.stopping:
            try:
                batch = await host.receiver.read_from(first, 256, sid)
            except Exception as exc:
                self.log.warning("stream_release_failed", stream=str(sid), error=repr(exc))
                return
            mine = [placeholder(c) for c in batch if c.token.sequence <= last]
            self._acks += mine
            if len(mine) < len(batch) or len(batch) < 256:
                return
            first = SequenceToken(batch[-1].token.sequence + 1)
