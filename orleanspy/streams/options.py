"""StreamProviderOptions and the flow-control setting, validated on creation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from orleanspy.errors import ConfigurationError
from orleanspy.streams.flow_control import FlowPolicy, FlowStrategy, flow_policy

__all__ = ["FlowControl", "StreamProviderOptions", "parse_flow_control"]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)?$")


@dataclass(frozen=True, slots=True)
class FlowControl:
    """How the consumers of one queue gate its cache (see docs/streams.md).

    ``strategy``: ``min`` (the slowest consumer gates), ``max`` (the fastest gates; laggards
    are told what they missed) or ``tagged`` (only subscriptions with ``group`` as their tag
    gate; delivery waits until ``min_members`` of them subscribed; a member that does not
    advance for ``timeout`` seconds stops gating and is told so).
    """

    strategy: FlowStrategy = FlowStrategy.MIN
    group: str | None = None
    min_members: int = 1
    timeout: float | None = None
    policy: FlowPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        strategy = FlowStrategy(self.strategy)
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(
            self, "policy", flow_policy(strategy, self.group, self.min_members, self.timeout)
        )

    def __str__(self) -> str:
        if self.strategy is not FlowStrategy.TAGGED:
            return str(self.strategy)
        parts = [f"tagged,group={self.group}", f"min={self.min_members}"]
        if self.timeout is not None:
            parts.append(f"timeout={self.timeout:g}s")
        return ",".join(parts)


def _duration(text: str, where: str) -> float:
    m = _DURATION.match(text.strip())
    if not m:
        raise ConfigurationError(f"{where}: {text!r} is not a duration; write e.g. 2s or 500ms")
    value = float(m.group(1))
    unit = m.group(2) or "s"
    return value / 1000 if unit == "ms" else value * 60 if unit == "m" else value


def parse_flow_control(text: str | FlowControl, where: str = "flow_control") -> FlowControl:
    """Parse ``"min"``, ``"max"`` or ``"tagged,group=NAME[,min=N][,timeout=2s]"``."""
    if isinstance(text, FlowControl):
        return text
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or parts[0] not in tuple(FlowStrategy):
        raise ConfigurationError(
            f"{where} = {text!r}: the strategy must be min, max or tagged "
            "(e.g. \"tagged,group=archive,min=2,timeout=2s\")"
        )
    strategy = FlowStrategy(parts[0])
    if strategy is not FlowStrategy.TAGGED:
        if len(parts) > 1:
            raise ConfigurationError(f"{where} = {text!r}: {strategy} takes no parameters")
        return FlowControl(strategy)
    group, min_members, timeout = None, 1, None
    for part in parts[1:]:
        key, _, value = part.partition("=")
        key = key.strip()
        if key == "group" and value:
            group = value.strip()
        elif key == "min" and value.strip().isdigit() and int(value) >= 1:
            min_members = int(value)
        elif key == "timeout" and value:
            timeout = _duration(value, where)
        else:
            raise ConfigurationError(
                f"{where} = {text!r}: bad parameter {part!r}; tagged takes group=NAME, "
                "min=N (>= 1) and timeout=DURATION"
            )
    if group is None:
        raise ConfigurationError(f"{where} = {text!r}: tagged needs group=NAME")
    return FlowControl(FlowStrategy.TAGGED, group, min_members, timeout)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamProviderOptions:
    """Options of a persistent stream provider. Durations are float seconds.

    Attributes:
        total_queues: queues the streams are hashed onto (``HashRingQueueMapper``).
        pull_period: period of each agent's read cycle when the cache has room.
        max_pull_period: the period the agent backs off to while its cache is under pressure.
        cache_size: events (containers) each agent's cache holds at most.
        batch_size: containers handed to a subscription in one delivery call.
        max_delivery_time: how long one delivery is retried before the error protocol.
        failure: what a delivery that keeps failing does. ``retry`` (the default) gives
            nothing up: ``on_error`` hears of it once per ``max_delivery_time``, the delivery
            is retried with back-off for as long as it fails, and the events stay queued
            (the subscription is spilled, so the others of its queue go on); ``skip`` gives
            the failing event up after ``max_delivery_time`` (``on_error``, then it is
            acknowledged undelivered); ``fault`` faults the subscription (what it did not
            take is acknowledged undelivered too).
        flow_control: the default strategy; ``namespace_flow_control`` overrides it per
            stream namespace (a queue uses the setting of the namespace that has it).
        max_outstanding_events / max_outstanding_bytes: per subscription, how far the cache
            may run ahead of it before the agent stops reading, or spills it (None: no limit).
        spill: with a rewindable adapter and ``min`` flow control, a subscription that holds
            the full cache back is *spilled*: served from the queue until it catches up, so the
            other subscriptions of the queue go on at their own pace and the queue (not the
            cache) holds the laggard's backlog. False: the laggard fills the cache and the
            agent stops reading the queue until it drains (as in Orleans).
        pubsub_storage: the grain storage that keeps explicit subscriptions (falls back to
            ``default``).
        balancer: on a clustered silo, the algorithm that lays queues out over the silos
            (leases make the layout exclusive): ``sticky`` (default: exactly balanced, fewest
            moves), ``even``, ``bounded[:EPSILON]`` or ``ring`` (docs/cluster.md).
        balance_settle_time: on a clustered silo, how long membership must stay unchanged
            before the provider recomputes its queues (a burst of joins moves queues once).
        lease_duration: a queue lease expires this long after its last renewal; the owner
            renews every third of it and then also re-checks the balance.
        lease_retry_period: while a queue this silo should own is still leased to a silo
            that is handing it off, the lease is tried again this often.
        handoff_timeout: on a graceful stop or a planned hand-off of a queue, how long its
            agent keeps delivering what it has cached (so that the next owner delivers
            nothing twice) before it stops; then what is left is delivered by the next owner.
        client_timeout: how long a ClusterClient that stopped polling (disconnected, or
            closed without unsubscribing) keeps its subscriptions; then they are removed.
        max_client_subscriptions: subscriptions to this provider's streams that one client
            may hold (a client is the id it proved on its connection, and a connection acts
            as that one id, so the cap holds per connection too); one more is refused.
        inactivity_period: an agent forgets a stream (its subscriptions and registration)
            that had no event for this long and has nothing cached or in delivery; the next
            event registers it again (as in Orleans, default 30 minutes).
        retention / retention_count: time travel on a durable adapter (sqlite, redis):
            events stay in the queue's storage for ``retention`` seconds after every
            subscriber acknowledged them, or as the newest ``retention_count`` acknowledged
            of their queue, whichever keeps more, so a subscription can start from a time
            (``from_time``) or a token older than the cache. 0 and 0 (the default): gone once
            acknowledged. Other adapters refuse a retention.
    """

    total_queues: int = 8
    pull_period: float = 0.1
    max_pull_period: float = 1.0
    cache_size: int = 4096
    batch_size: int = 64
    max_delivery_time: float = 60.0
    delivery_backoff: float = 0.1
    max_delivery_backoff: float = 5.0
    read_backoff: float = 1.0
    failure: str = "retry"
    flow_control: FlowControl | str = "min"
    namespace_flow_control: dict[str, FlowControl | str] = field(default_factory=dict)
    max_outstanding_events: int | None = None
    max_outstanding_bytes: int | None = None
    spill: bool = True
    pubsub_storage: str = "pubsub"
    balance_settle_time: float = 1.0
    balancer: str = "sticky"
    lease_duration: float = 30.0
    lease_retry_period: float = 0.5
    handoff_timeout: float = 5.0
    client_timeout: float = 60.0
    max_client_subscriptions: int = 10_000
    inactivity_period: float = 1800.0
    retention: float = 0.0
    retention_count: int = 0

    def __post_init__(self) -> None:
        n = "StreamProviderOptions"

        def check(name: str, ok: bool, rule: str) -> None:
            if not ok:
                raise ConfigurationError(f"{n}.{name} = {getattr(self, name)!r}: {rule}")

        check("total_queues", self.total_queues >= 1, "must be >= 1")
        check("pull_period", self.pull_period > 0, "must be > 0 seconds")
        check("max_pull_period", self.max_pull_period >= self.pull_period,
              "must be >= pull_period")
        check("cache_size", self.cache_size >= 1, "must be >= 1")
        check("batch_size", self.batch_size >= 1, "must be >= 1")
        check("max_delivery_time", self.max_delivery_time > 0, "must be > 0 seconds")
        check("balance_settle_time", self.balance_settle_time >= 0, "must be >= 0 seconds")
        from orleanspy.streams.balancing.named import assigner_named

        try:
            assigner_named(self.balancer)
        except ValueError as exc:
            raise ConfigurationError(f"{n}.balancer = {self.balancer!r}: {exc}") from None
        check("lease_duration", self.lease_duration > 0, "must be > 0 seconds")
        check("lease_retry_period", self.lease_retry_period > 0, "must be > 0 seconds")
        check("handoff_timeout", self.handoff_timeout >= 0, "must be >= 0 seconds")
        check("client_timeout", self.client_timeout > 0, "must be > 0 seconds")
        check("max_client_subscriptions", self.max_client_subscriptions >= 1, "must be >= 1")
        check("inactivity_period", self.inactivity_period > 0, "must be > 0 seconds")
        check("retention", self.retention >= 0, "must be >= 0 seconds (0: keep nothing)")
        check("retention_count", self.retention_count >= 0, "must be >= 0 (0: keep nothing)")
        check("failure", self.failure in ("retry", "skip", "fault"),
              "must be 'retry', 'skip' or 'fault'")
        for name in ("max_outstanding_events", "max_outstanding_bytes"):
            value = getattr(self, name)
            check(name, value is None or value >= 1, "must be >= 1 or None")
        object.__setattr__(self, "flow_control",
                           parse_flow_control(self.flow_control, f"{n}.flow_control"))
        object.__setattr__(self, "namespace_flow_control", {
            ns: parse_flow_control(fc, f"{n}.namespace_flow_control[{ns!r}]")
            for ns, fc in self.namespace_flow_control.items()
        })

    def flow_for(self, namespace: str) -> FlowControl:
        fc = self.namespace_flow_control.get(namespace, self.flow_control)
        assert isinstance(fc, FlowControl)
        return fc
