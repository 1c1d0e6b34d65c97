"""What a pulling agent reports: its statistics (the ``statistics`` turn, the operations
endpoints, the dashboard) and the runtime events of its read cycle (``orleanspy.diagnostics``),
built only while the silo's hub listens."""

from __future__ import annotations

from dataclasses import dataclass
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
from orleanspy.streams.pulling.registry import StreamTable
from orleanspy.streams.subscription import Subscription

if TYPE_CHECKING:
    from orleanspy._util.clock import Clock
    from orleanspy.diagnostics import Diagnostics
    from orleanspy.streams.cache import QueueCache
    from orleanspy.streams.ids import QueueId
    from orleanspy.streams.options import StreamProviderOptions
    from orleanspy.streams.spill import Spiller

__all__ = ["AgentStatistics", "Reported", "Reporter", "SubscriptionFigures", "snapshot"]


class Reported(Protocol):
    """What the reporting reads of its pulling agent."""

    queue: QueueId
    cache: QueueCache
    table: StreamTable
    spiller: Spiller
    clock: Clock
    options: StreamProviderOptions
    diagnostics: Diagnostics
    pressured: bool
    period: float
    read: int
    acknowledged: int
    last_read: int

    @property
    def silo(self) -> Any: ...

    @property
    def provider(self) -> Any: ...

    @property
    def delivered(self) -> int: ...

    @property
    def failures(self) -> int: ...

    @property
    def filtered(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SubscriptionFigures:
    """One subscription of a queue: which (stream, consumer) it is and how far behind.

    A subscription id names a subscription only within its stream (every stream's implicit
    subscription of a consumer type is ``implicit:TYPE``): the figures are per (stream,
    subscription), and ``consumer`` is the consumer grain.
    """

    stream: str
    subscription: str
    consumer: str
    lag: int  # queue positions behind the newest read (the backlog)
    #: seconds since its oldest undelivered cached event was written (None: no such event,
    #: or its write time is unknown)
    age: float | None = None
    failing: int = 0  # failed attempts of the delivery under way (0: none failing)


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
    #: every subscription the agent serves, failing first, then furthest behind
    subs: tuple[SubscriptionFigures, ...] = ()
    spilled: int = 0  # subscriptions served from the queue (they fell out of the cache)
    spill_count: int = 0  # subscriptions spilled since the agent started
    flow_control: str = "min"  # the provider's flow control (min, max or tagged)
    filtered: int = 0  # events a subscription's filter did not match (never sent to it)

    @property
    def max_lag(self) -> int:
        return max((s.lag for s in self.subs), default=0)


def snapshot(agent: Reported) -> AgentStatistics:
    """Cache size and pressure, pull period, counters and each subscription's figures."""
    stats = agent.cache.statistics()
    now = agent.clock.time()
    figures = []
    for s in agent.table.subscriptions():
        item = s.cursor.item if s.cursor is not None else None
        age = None
        if item is not None and item.container.enqueued_at:
            age = max(0.0, now - item.container.enqueued_at)
        figures.append(SubscriptionFigures(
            stream=str(s.stream_id), subscription=s.record.sub_id,
            consumer=str(s.consumer.grain_id), lag=_lag(agent, s), age=age,
            failing=s.failing))
    figures.sort(key=lambda f: (-f.failing, -f.lag, f.stream, f.subscription))
    return AgentStatistics(
        queue=str(agent.queue), cache_size=stats.size, cache_max=stats.max_size,
        under_pressure=stats.under_pressure or agent.pressured, pull_period=agent.period,
        read=agent.read, delivered=agent.delivered, acknowledged=agent.acknowledged,
        failures=agent.failures, streams=len(agent.table.streams),
        subscriptions=len(figures), subs=tuple(figures), spilled=len(agent.spiller),
        spill_count=agent.spiller.count, flow_control=str(agent.options.flow_control),
        filtered=agent.filtered,
    )


def _lag(agent: Reported, sub: Subscription) -> int:
    """Queue positions behind the newest read (cache) or sequences behind it (spilled)."""
    if sub.cursor is not None:
        return sub.cursor.lag()
    if sub.spilled_from is not None:
        return max(0, agent.last_read - sub.after)
    return 0


class Reporter:
    """The runtime events of one agent's read cycle (each built only while the hub
    listens: callers check ``hub.listening`` first)."""

    __slots__ = ("hub", "provider", "queue", "silo")

    def __init__(self, agent: Reported) -> None:
        self.hub = agent.diagnostics
        self.provider = agent.provider.name
        self.queue = str(agent.queue)
        self.silo = str(agent.silo.address)

    def read(self, count: int, total: int) -> None:
        self.hub.emit(QueueRead(self.silo, self.provider, self.queue, count, total))

    def purged(self, count: int, left: int) -> None:
        self.hub.emit(CachePurged(self.silo, self.provider, self.queue, count, left))

    def acknowledged(self, count: int, total: int) -> None:
        self.hub.emit(EventsAcknowledged(self.silo, self.provider, self.queue, count, total))

    def period(self, period: float) -> None:
        self.hub.emit(PullPeriodChanged(self.silo, self.provider, self.queue, period))

    def pressure(self, pressured: bool) -> None:
        self.hub.emit(CachePressureChanged(self.silo, self.provider, self.queue, pressured))

    def moved(self, sub: Subscription, spilled: bool) -> None:
        kind = SubscriptionSpilled if spilled else SubscriptionRejoined
        self.hub.emit(kind(self.silo, self.provider, self.queue, str(sub.stream_id),
                           sub.record.sub_id))
