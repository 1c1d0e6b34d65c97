"""PersistentStreamProvider: wires adapter, mapper, balancer, pulling agents and pub-sub.

Producer side (1): ``stream.on_next`` → ``adapter.enqueue`` on the stream's queue.
Consumer side (5): ``stream.subscribe`` records a subscription with the stream's pub-sub
rendezvous; the queue's pulling agent delivers to the subscribing grain.

Queue ownership. A silo without membership (or a provider given a ``StaticQueueBalancer``)
starts an agent for each of its balancer's queues once, at start. A clustered silo balances at
runtime with a ``LeaseQueueBalancer`` (the default there): it follows membership, and once the
view has been unchanged for ``balance_settle_time`` it recomputes its target queues; agents of
queues it lost are stopped (running deliveries finish, acknowledgements commit) before their
leases are released, and agents of queues it gained start only once it holds their leases. So
a queue is pulled by one silo at a time and a planned move delivers nothing twice; after a
crash the new owner reads from the last acknowledgement (at-least-once).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from orleanspy._util.clock import Clock, SystemClock
from orleanspy.cluster.balancing.named import assigner_named
from orleanspy.cluster.membership.entry import SiloStatus
from orleanspy.diagnostics import Diagnostics, QueueAcquired, QueueReleased
from orleanspy.logging import get_logger
from orleanspy.streams.adapters.base import QueueAdapter, QueueAdapterFactory
from orleanspy.streams.balancer import LeaseQueueBalancer, QueueBalancer, StaticQueueBalancer
from orleanspy.streams.ids import QueueId, StreamId, StreamKey
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.publisher import StreamPublisher
from orleanspy.streams.pubsub import SubscriptionRecord
from orleanspy.streams.pulling.agent import PullingAgent
from orleanspy.streams.stream import AsyncStream
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy.cluster.membership.snapshot import MembershipSnapshot
    from orleanspy.runtime.silo import Silo

__all__ = ["PersistentStreamProvider", "implicit_namespaces", "implicit_subscription"]

T = TypeVar("T")

_IMPLICIT_ATTR = "_orleanspy_implicit_namespaces"

FailureHandler = Callable[[SubscriptionRecord, StreamId, SequenceToken, BaseException], None]


def implicit_subscription(*namespaces: str) -> Callable[[type], type]:
    """Class decorator: the grain whose key is a stream's key receives every event of the
    stream in these namespaces, without subscribing. It implements
    ``async def on_next(self, item, token)``, or ``async def on_next_batch(self, items)`` to
    receive each delivery whole (a list of ``(item, token)``, up to ``batch_size``
    containers, in one turn), and optionally ``on_error(self, exc)``."""
    if not namespaces or not all(isinstance(n, str) and n for n in namespaces):
        raise ValueError("implicit_subscription() needs one or more non-empty namespaces")

    def deco(cls: type) -> type:
        if not callable(getattr(cls, "on_next", None)) and not callable(
            getattr(cls, "on_next_batch", None)
        ):
            raise TypeError(
                f"{cls.__name__} subscribes implicitly to {namespaces} but has no "
                "'async def on_next(self, item, token)' (or 'on_next_batch(self, items)')"
            )
        setattr(cls, _IMPLICIT_ATTR, tuple(namespaces))
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
        self.agents: dict[QueueId, PullingAgent] = {}
        self.delivery_failures = 0
        self.log: Any = None
        # runtime balancing (clustered silos)
        self._leases: LeaseQueueBalancer | None = None
        self._me = ""
        self._view_changed = asyncio.Event()
        self._balance_task: asyncio.Task[None] | None = None
        self._remove_listener: Callable[[], None] | None = None
        self._balance_lock = asyncio.Lock()
        self._pending = 0  # > 0: retry soon (queues handed off, leases not settled)
        self._stopping = False
        self.rebalances = 0
        self._rounds = asyncio.Condition()  # notified after each balancing round

    # -- lifecycle (the silo calls these) -------------------------------------------------------
    def bind(self, name: str, silo: Silo) -> None:
        self.name = name
        self.silo = silo
        self.clock = silo.clock
        self.diagnostics = silo.diagnostics
        self.mapper = HashRingQueueMapper(self.options.total_queues, name)
        self.adapter = self.adapter_factory.create_adapter(name)
        self.adapter.use_clock(silo.clock)
        self.log = get_logger(__name__, provider=name, silo=silo.name)

    async def start(self) -> None:
        """Open the adapter and start an agent for every queue the balancer gives us (on a
        clustered silo: start following membership and take this silo's share of leases)."""
        await self.adapter.open()
        self.log = get_logger(__name__, provider=self.name, silo=self.silo.name)  # final name
        self.silo.add_system_target(StreamPublisher(self), self.name)
        cluster = self.silo.cluster
        balancer = self.balancer
        if cluster is not None and (self._default_balancer
                                    or isinstance(balancer, LeaseQueueBalancer)):
            if not isinstance(balancer, LeaseQueueBalancer):
                balancer = self.balancer = LeaseQueueBalancer(
                    assigner_named(self.options.balancer)
                )
            if balancer.store is None:
                balancer.store = cluster.lease_store()
            self._leases = balancer
            self._me = str(cluster.me)
            await self._rebalance()
            membership = cluster.membership
            if membership is not None:
                self._remove_listener = membership.add_listener(self._on_view)
            self._balance_task = asyncio.get_running_loop().create_task(self._balance_loop())
        else:
            for queue in balancer.my_queues(self.mapper.all_queues(), self.silo.name):
                await self._start_agent(queue)
        self.log.info("stream_provider_started", queues=len(self.agents),
                      balancer=type(self.balancer).__name__)

    async def stop(self) -> None:
        """Stop every agent (deliveries finish, acknowledgements commit), then release this
        silo's leases so that other silos take the queues over."""
        self._stopping = True
        if self._remove_listener is not None:
            self._remove_listener()
            self._remove_listener = None
        self._view_changed.set()
        async with self._balance_lock:
            task = self._balance_task
            if task is not None:
                task.cancel()  # waits in its timer, never in a round (it holds the lock then)
                await asyncio.gather(task, return_exceptions=True)
            queues = list(self.agents)
            results = await asyncio.gather(*(self._stop_agent(q) for q in queues),
                                           return_exceptions=True)
            for queue, result in zip(queues, results, strict=True):
                if isinstance(result, BaseException):
                    self.log.error("stream_agent_stop_failed", queue=str(queue),
                                   error=repr(result))
            if self._leases is not None:
                try:
                    await self._leases.release(queues, self._me)
                except Exception as exc:  # they expire anyway
                    self.log.warning("stream_lease_release_failed", error=repr(exc))
                await self._leases.close()
        await self.adapter.close()

    async def _start_agent(self, queue: QueueId) -> None:

        agent = PullingAgent(self, queue)
        self.silo.add_system_target(agent, (self.name, queue.index, str(self.silo.address)))
        try:
            await agent.start()
        except BaseException:
            self._drop_target(agent)
            raise
        self.agents[queue] = agent
        hub = self.diagnostics
        if hub.listening:
            hub.emit(QueueAcquired(str(self.silo.address), self.name, str(queue)))

    async def _stop_agent(self, queue: QueueId) -> None:
        agent = self.agents.get(queue)
        if agent is None:
            return
        try:
            await agent.stop()
        finally:
            self.agents.pop(queue, None)
            self._drop_target(agent)
            hub = self.diagnostics
            if hub.listening:
                hub.emit(QueueReleased(str(self.silo.address), self.name, str(queue)))

    def _drop_target(self, agent: PullingAgent) -> None:
        act = getattr(agent, "_orleanspy_activation", None)
        if act is not None:
            self.silo.catalog.remove(act)

    # -- runtime balancing (clustered silos) ------------------------------------------------------
    async def _on_view(self, snapshot: MembershipSnapshot) -> None:
        self._view_changed.set()

    async def _balance_loop(self) -> None:
        """Rebalance after membership settles; renew leases; retry queues still handed off."""
        opts = self.options
        clock = self.clock
        renew_every = opts.lease_duration / 3
        next_renew = clock.monotonic() + renew_every
        while not self._stopping:
            wait = opts.lease_retry_period if self._pending else renew_every
            wait = min(wait, max(0.0, next_renew - clock.monotonic()))
            with contextlib.suppress(TimeoutError):
                async with clock.timeout(wait):
                    await self._view_changed.wait()
            if self._stopping:
                return
            if self._view_changed.is_set():  # settle: no change for balance_settle_time
                while True:
                    self._view_changed.clear()
                    try:
                        async with clock.timeout(opts.balance_settle_time):
                            await self._view_changed.wait()
                    except TimeoutError:
                        break
                    if self._stopping:
                        return
            try:
                if clock.monotonic() >= next_renew:
                    next_renew = clock.monotonic() + renew_every
                    await self._renew()
                await self._rebalance()
            except Exception as exc:  # loop boundary: log, try again next round
                self.log.warning("stream_rebalance_failed", error=repr(exc))

    async def _renew(self) -> None:
        assert self._leases is not None
        async with self._balance_lock:
            if self._stopping:
                return
            lost = await self._leases.renew(list(self.agents), self._me,
                                            self.options.lease_duration)
            for queue in lost:  # another silo took it after it expired: stop pulling at once
                self.log.warning("stream_lease_lost", queue=str(queue))
                await self._stop_agent(queue)

    async def _rebalance(self) -> None:
        """One round: compute the target, give up what is no longer ours (stop the agent,
        then release), acquire and start what is ours and free."""
        leases = self._leases
        cluster = self.silo.cluster
        assert leases is not None and cluster is not None
        async with self._balance_lock:
            if self._stopping:
                return
            snapshot = cluster.snapshot
            me = self._me
            active = [str(s) for s in snapshot.active_silos]
            if me not in active:
                return  # joining or leaving: the stop hands everything off

            dead = {str(s) for s in snapshot.silos(SiloStatus.DEAD)}
            queues = self.mapper.all_queues()
            target = await leases.plan(queues, me, active)
            wanted = set(target)
            for queue in [q for q in self.agents if q not in wanted]:
                await self._stop_agent(queue)
                await leases.release([queue], me)
                self.log.info("stream_queue_released", queue=str(queue))
            pending = 0
            duration = self.options.lease_duration
            for queue in target:
                if queue in self.agents or self._stopping:
                    continue
                if await leases.acquire(queue, me, duration, dead):
                    try:
                        await self._start_agent(queue)
                    except Exception:
                        await leases.release([queue], me)
                        raise
                    self.log.info("stream_queue_acquired", queue=str(queue))
                else:
                    pending += 1
            # retry soon while handing off, or while the cluster's leases do not match the
            # layout yet (another silo may release a queue this silo should take)
            self._pending = pending + (not leases.settled)
            self.rebalances += 1
        async with self._rounds:
            self._rounds.notify_all()

    async def wait_for_queues(
        self, predicate: Callable[[set[QueueId]], bool], timeout: float | None = None
    ) -> set[QueueId]:
        """Wait until the queues this silo pulls satisfy ``predicate`` (checked after every
        balancing round). Raises TimeoutError after ``timeout`` seconds."""
        async with self.clock.timeout(timeout), self._rounds:
            await self._rounds.wait_for(lambda: predicate(set(self.agents)))
        return set(self.agents)

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
