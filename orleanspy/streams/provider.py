"""PersistentStreamProvider: wires adapter, mapper, balancer, pulling agents and pub-sub.

Producer side (1): ``stream.on_next`` → ``adapter.enqueue`` on the stream's queue.
Consumer side (5): ``stream.subscribe`` records a subscription with the stream's pub-sub
rendezvous; the queue's pulling agent delivers to the subscribing grain.

Queue ownership (``orleanspy.streams.pulling.manager``): a silo without membership (or a
provider given a ``StaticQueueBalancer``) pulls its balancer's queues from start to stop; a
clustered silo balances at runtime with a ``LeaseQueueBalancer`` (the default there), so a
queue is pulled by one silo at a time and a planned move delivers nothing twice; after a
crash the new owner reads from the last acknowledgement (at-least-once).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from orleanspy._util.clock import Clock, SystemClock
from orleanspy._util.histogram import Histogram
from orleanspy.diagnostics import Diagnostics
from orleanspy.logging import get_logger
from orleanspy.streams.adapters.base import QueueAdapter, QueueAdapterFactory
from orleanspy.streams.admin import StreamSubscriptionManager
from orleanspy.streams.balancer import LeaseQueueBalancer, QueueBalancer, StaticQueueBalancer
from orleanspy.streams.balancing.named import assigner_named
from orleanspy.streams.client_consumer import release_polls
from orleanspy.streams.filters import compile_filter
from orleanspy.streams.ids import QueueId, StreamId, StreamKey
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.publisher import StreamPublisher
from orleanspy.streams.pubsub import SubscriptionRecord
from orleanspy.streams.pulling.agent import PullingAgent
from orleanspy.streams.pulling.manager import PullingManager
from orleanspy.streams.stream import IMPLICIT_ATTR, IMPLICIT_FILTER_ATTR, AsyncStream
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy.cluster.runtime import ClusterRuntime
    from orleanspy.runtime.silo import Silo

__all__ = ["PersistentStreamProvider", "implicit_namespaces", "implicit_subscription"]

T = TypeVar("T")

_IMPLICIT_ATTR = IMPLICIT_ATTR

FailureHandler = Callable[[SubscriptionRecord, StreamId, SequenceToken, BaseException], None]


def implicit_subscription(
    *namespaces: str, filter: str | None = None,
) -> Callable[[type], type]:
    """Class decorator: the grain whose key is a stream's key receives every event of the
    stream in these namespaces, without subscribing. It implements
    ``async def on_next(self, item, token)``, or ``async def on_next_batch(self, items)`` to
    receive each delivery whole (a list of ``(item, token)``, up to ``batch_size``
    containers, in one turn), and optionally ``on_error(self, exc)``. With ``filter`` (an
    expression, ``orleanspy.streams.filters``) it receives only the events that match.

    Raises:
        FilterError: ``filter`` is not a valid filter expression.
    """
    if not namespaces or not all(isinstance(n, str) and n for n in namespaces):
        raise ValueError("implicit_subscription() needs one or more non-empty namespaces")
    if filter is not None:
        compile_filter(filter)

    def deco(cls: type) -> type:
        if not callable(getattr(cls, "on_next", None)) and not callable(
            getattr(cls, "on_next_batch", None)
        ):
            raise TypeError(
                f"{cls.__name__} subscribes implicitly to {namespaces} but has no "
                "'async def on_next(self, item, token)' (or 'on_next_batch(self, items)')"
            )
        setattr(cls, _IMPLICIT_ATTR, tuple(namespaces))
        setattr(cls, IMPLICIT_FILTER_ATTR, filter)
        return cls

    return deco


def implicit_namespaces(cls: type) -> tuple[str, ...]:
    return tuple(getattr(cls, _IMPLICIT_ATTR, ()))


class PersistentStreamProvider:
    """A named stream provider on a silo: ``Silo(stream_providers={"events": provider})``."""

    def __init__(
        self,
        adapter_factory: QueueAdapterFactory,
        options: StreamProviderOptions | None = None,
        *,
        balancer: QueueBalancer | None = None,
        failure_handler: FailureHandler | None = None,
    ) -> None:
        self.options = options or StreamProviderOptions()
        self.adapter_factory = adapter_factory
        self._default_balancer = balancer is None
        self.balancer: QueueBalancer = balancer or StaticQueueBalancer()
        self.failure_handler = failure_handler
        self._queue_of: dict[StreamId, QueueId] = {}  # the mapper's answers, remembered
        self.name = ""
        self.adapter: QueueAdapter = None  # type: ignore[assignment]
        self.mapper: HashRingQueueMapper = None  # type: ignore[assignment]
        self.silo: Silo = None  # type: ignore[assignment]
        self.clock: Clock = SystemClock()  # the silo's, from bind
        self.diagnostics = Diagnostics()  # the silo's hub, from bind
        self.manager: PullingManager | None = None  # from start
        self.delivery_failures = 0
        #: Service-level figures of this provider on this silo: how long a publish took
        #: to be acknowledged by the queue (sampled), and how long an event took from the
        #: queue's write to its consumer's return (per delivery, from each container's
        #: ``enqueued_at``).
        self.publish_latency = Histogram()
        self.delivery_latency = Histogram()
        self.log: Any = None
        self.cluster: ClusterRuntime | None = None  # from bind, on a cluster silo

    # -- lifecycle (the silo calls these) -------------------------------------------------------
    def bind(self, name: str, silo: Silo, *, clock: Clock, diagnostics: Diagnostics,
             silo_name: str, cluster: ClusterRuntime | None = None) -> None:
        """Join a silo (the silo builder calls this once): its name, the silo that hosts the
        provider's system targets and agents (read on use), its clock and diagnostics hub,
        and on a cluster silo its cluster runtime (this silo's address and the membership
        view once joined, and the queue lease store kept with the membership table)."""
        self.name = name
        self.silo = silo
        self.clock = clock
        self.diagnostics = diagnostics
        self.cluster = cluster
        self.mapper = HashRingQueueMapper(self.options.total_queues, name)
        self.adapter = self.adapter_factory.create_adapter(name)
        self.adapter.use_clock(clock)
        self.adapter.retain(self.options.retention, self.options.retention_count)
        self.log = get_logger(__name__, provider=name, silo=silo_name)

    async def replay_token(
        self, stream_id: StreamId, start: SequenceToken | float
    ) -> SequenceToken | None:
        """Where a replay of ``stream_id`` from ``start`` (a token, or a time in seconds since
        the epoch by the silo's clock) begins: the token of the stream's first container
        kept from there on (``start`` itself for a token), None if the queue keeps none.

        Raises:
            ReplayUnavailableError: the queue no longer keeps everything from ``start`` on
                (beyond the provider's retention), naming the oldest point available; or
                the adapter keeps nothing to replay.
        """
        found = await self.adapter.read_range(self.mapper.queue_for(stream_id), start, 1,
                                              stream_id)
        if isinstance(start, SequenceToken):
            return start
        return found[0].token if found else None

    async def start(self) -> None:
        """Open the adapter and start an agent for every queue the balancer gives us (on a
        clustered silo: start following membership; ``take_queues`` takes this silo's share
        of the leases once it is ACTIVE)."""
        await self.adapter.open()
        self.log = get_logger(__name__, provider=self.name, silo=self.silo.name)  # final name
        self.silo.add_system_target(StreamPublisher(self), self.name)
        self.manager = manager = PullingManager(self, self.log)
        balancer = self.balancer
        cluster = self.cluster
        if cluster is not None and (self._default_balancer
                                    or isinstance(balancer, LeaseQueueBalancer)):
            if not isinstance(balancer, LeaseQueueBalancer):
                balancer = self.balancer = LeaseQueueBalancer(
                    assigner_named(self.options.balancer)
                )
            if balancer.store is None:
                balancer.store = cluster.lease_store()
            fence = balancer.store.fence(str(cluster.me))
            if fence is not None and self.adapter.fence_with(fence):
                self.log.info("stream_queue_acks_fenced", leases=type(balancer.store).__name__)
            await manager.start_balancing(balancer)
        else:
            await manager.start_static(balancer)
        self.log.info("stream_provider_started", queues=len(manager.agents),
                      balancer=type(self.balancer).__name__)

    async def take_queues(self) -> None:
        """Take this silo's share of the queues (the silo calls it once its membership row
        reads ACTIVE: a silo leases no queue before; the balancer follows membership from
        then on). A silo without membership has started its agents in ``start``."""
        if self.manager is not None:
            await self.manager.take_share()

    async def stop(self) -> None:
        """Stop every agent (deliveries finish, acknowledgements commit), release this silo's
        leases so that other silos take the queues over, close the adapter."""
        release_polls(self.silo.catalog)
        if self.manager is not None:
            await self.manager.stop()
        await self.adapter.close()

    @property
    def agents(self) -> dict[QueueId, PullingAgent]:
        """This silo's pulling agents of this provider, by queue."""
        return self.manager.agents if self.manager is not None else {}

    # -- operator commands (``orleanspy streams agents``) ----------------------------------
    async def stop_agents(self) -> None:
        """Stop this silo's pulling agents of the provider: each delivers what it cached and
        acknowledges; the queues (and their leases) stay with this silo, unread, until
        ``start_agents``. Published events wait in the queue."""
        if self.manager is not None:
            await self.manager.stop_agents()

    async def start_agents(self) -> None:
        """Start the agents ``stop_agents`` stopped; they read from each queue's
        acknowledgement, so nothing published while they were stopped is lost."""
        if self.manager is not None:
            await self.manager.start_agents()

    def agents_state(self) -> dict[str, Any]:
        """``{"state": "running" | "stopped", "queues": [...]}``: this silo's queues of the
        provider, pulled (running) or kept unread (stopped)."""
        manager = self.manager
        if manager is None:
            return {"state": "not started", "queues": []}
        queues = sorted({*manager.agents, *manager.held}, key=lambda q: q.index)
        return {"state": "stopped" if manager.agents_stopped else "running",
                "queues": [str(q) for q in queues]}

    def subscription_manager(self) -> StreamSubscriptionManager:
        """List and remove the subscriptions of this provider's streams
        (``orleanspy.streams.admin``); from a grain or the silo's own code."""
        return StreamSubscriptionManager(self.silo, self.name)

    @property
    def rebalances(self) -> int:
        """Balancing rounds run so far (clustered silos)."""
        return self.manager.rebalances if self.manager is not None else 0

    async def wait_for_queues(
        self, predicate: Callable[[set[QueueId]], bool], timeout: float | None = None
    ) -> set[QueueId]:
        """Wait until the queues this silo pulls satisfy ``predicate`` (checked after every
        balancing round). Raises TimeoutError after ``timeout`` seconds."""
        if self.manager is None:
            raise RuntimeError(f"stream provider {self.name!r} has not started")
        return await self.manager.wait_for_queues(predicate, timeout)

    # -- producing ----------------------------------------------------------------------------
    @overload
    def stream(self, namespace: str, key: StreamKey) -> AsyncStream[Any]: ...
    @overload
    def stream(self, namespace: str, key: StreamKey, item_type: type[T]) -> AsyncStream[T]: ...
    def stream(
        self, namespace: str, key: StreamKey, item_type: type[Any] | None = None
    ) -> AsyncStream[Any]:
        """The stream ``(namespace, key)``; ``item_type`` (for type checkers only) names the
        type of its items: ``provider.get_stream("clicks", user, Click)``."""
        return AsyncStream(self, StreamId(namespace, key))

    get_stream = stream

    def sender(self, stream_id: StreamId) -> Callable[[list[Any]], Awaitable[None]]:
        """A publisher bound to the stream's queue (``AsyncStream`` keeps it): no lookup per
        event."""
        return self.adapter.sender(self.mapper.queue_for(stream_id), stream_id)

    def immediate_sender(self, stream_id: StreamId) -> Callable[[list[Any]], bool] | None:
        """The adapter's synchronous publisher for the stream, if it has one."""
        return self.adapter.immediate_sender(self.mapper.queue_for(stream_id), stream_id)

    def submitter(
        self, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], asyncio.Future[None]] | None:
        """The adapter's pipelined publisher bound to the stream's queue, if it has one."""
        return self.adapter.submitter(self.mapper.queue_for(stream_id), stream_id)

    async def enqueue(self, stream_id: StreamId, events: list[Any]) -> None:
        queues = self._queue_of
        queue = queues.get(stream_id)
        if queue is None:
            if len(queues) >= 65536:
                queues.clear()  # a bound, not an LRU: re-hashing is cheap, just not free
            queue = queues[stream_id] = self.mapper.queue_for(stream_id)
        await self.adapter.enqueue(queue, stream_id, events)

    # -- consuming ----------------------------------------------------------------------------
    def implicit_records(self, stream_id: StreamId) -> list[SubscriptionRecord]:
        records = []
        for type_name, info in self.silo.registry.items():
            if stream_id.namespace in implicit_namespaces(info.cls):
                records.append(SubscriptionRecord(
                    sub_id=f"implicit:{type_name}", namespace=stream_id.namespace,
                    key=stream_id.key, consumer_type=type_name, consumer_key=stream_id.key,
                    filter=getattr(info.cls, IMPLICIT_FILTER_ATTR, None),
                ))
        return records

    @staticmethod
    def new_subscription_id() -> str:
        return uuid.uuid4().hex

    def on_delivery_failure(
        self, record: SubscriptionRecord, stream_id: StreamId, token: SequenceToken,
        exc: BaseException,
    ) -> None:
        self.delivery_failures += 1
        if self.failure_handler is not None:
            try:
                self.failure_handler(record, stream_id, token, exc)
            except Exception as err:
                self.log.error("stream_failure_handler_failed", error=repr(err))

    def statistics(self) -> list[Any]:
        """One ``AgentStatistics`` per pulling agent of this silo."""
        return [agent.snapshot() for agent in self.agents.values()]
