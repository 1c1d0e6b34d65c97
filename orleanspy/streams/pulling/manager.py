"""PullingManager: which queues this silo pulls, and their agents' start and stop (3).

A silo without membership (or a provider given a ``StaticQueueBalancer``) starts an agent for
each of its balancer's queues once, at start. A clustered silo balances at runtime with a
``LeaseQueueBalancer``: it follows membership, and once the view has been unchanged for
``balance_settle_time`` it recomputes its target queues; agents of queues it lost are stopped
(running deliveries finish, acknowledgements commit) before their leases are released, and
agents of queues it gained start only once it holds their leases. Leases are renewed every
third of ``lease_duration`` on the silo's clock.

``stop_agents`` (the operator's ``orleanspy streams agents stop``) stops every agent as a
planned move does (what is cached is delivered and acknowledged) but keeps the queues and
their leases: nothing reads them, so their events wait in the queue, and no other silo takes
them. ``start_agents`` starts an agent for each again, reading from the acknowledgement.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from orleanspy.cluster.membership.entry import SiloStatus
from orleanspy.diagnostics import QueueAcquired, QueueReleased
from orleanspy.streams.balancer import LeaseQueueBalancer, QueueBalancer
from orleanspy.streams.ids import QueueId
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.pulling.agent import AgentHost, PullingAgent

if TYPE_CHECKING:
    from orleanspy.cluster.membership.snapshot import MembershipSnapshot
    from orleanspy.cluster.runtime import ClusterRuntime
    from orleanspy.runtime.silo import Silo

__all__ = ["ManagedProvider", "PullingManager"]


class ManagedProvider(AgentHost, Protocol):
    """What the manager needs of its provider, beyond what its agents need."""

    @property
    def silo(self) -> Silo: ...

    @property
    def mapper(self) -> HashRingQueueMapper: ...

    @property
    def cluster(self) -> ClusterRuntime | None: ...


class PullingManager:
    """The pulling agents of one provider on one silo, by queue."""

    def __init__(self, provider: ManagedProvider, log: Any) -> None:
        self.provider = provider
        self.log = log
        self.agents: dict[QueueId, PullingAgent] = {}
        #: stopped by ``stop_agents``: the queues this silo keeps (and their leases) unread
        self.held: set[QueueId] = set()
        self.agents_stopped = False
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

    async def start_static(self, balancer: QueueBalancer) -> None:
        """Start an agent for each queue ``balancer`` gives this silo, once."""
        provider = self.provider
        for queue in balancer.my_queues(provider.mapper.all_queues(), provider.silo.name):
            await self._start_agent(queue)

    async def start_balancing(self, leases: LeaseQueueBalancer) -> None:
        """Take this silo's share of the queues and follow membership from now on."""
        cluster = self.provider.cluster
        assert cluster is not None
        self._leases = leases
        self._me = str(cluster.me)
        await self._rebalance()
        membership = cluster.membership
        if membership is not None:
            self._remove_listener = membership.add_listener(self._on_view)
        self._balance_task = asyncio.get_running_loop().create_task(self._balance_loop())

    async def take_share(self) -> None:
        """One balancing round now (clustered silos): the silo has just become ACTIVE, and
        takes its share of the queues before it reports itself started."""
        if self._leases is not None:
            await self._rebalance()

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
            await self._stop_agents(queues)
            queues += sorted(self.held - set(queues), key=lambda q: q.index)
            self.held.clear()
            if self._leases is not None:
                try:
                    await self._leases.release(queues, self._me)
                except Exception as exc:  # they expire anyway
                    self.log.warning("stream_lease_release_failed", error=repr(exc))
                await self._leases.close()

    async def _stop_agents(self, queues: list[QueueId]) -> None:
        results = await asyncio.gather(*(self._stop_agent(q) for q in queues),
                                       return_exceptions=True)
        for queue, result in zip(queues, results, strict=True):
            if isinstance(result, BaseException):
                self.log.error("stream_agent_stop_failed", queue=str(queue),
                               error=repr(result))

    async def stop_agents(self) -> None:
        """Stop pulling: every agent hands its queue off (delivers what it cached, for up
        to ``handoff_timeout``, and acknowledges) and stops; this silo keeps the queues and
        their leases, so their events wait in the queue. Serialised with balancing."""
        async with self._balance_lock:
            if self._stopping or self.agents_stopped:
                return
            self.agents_stopped = True
            queues = list(self.agents)
            self.held.update(queues)
            await self._stop_agents(queues)
            self.log.info("stream_agents_stopped", queues=len(self.held))

    async def start_agents(self) -> None:
        """Pull again: start an agent for every queue kept by ``stop_agents`` (each reads
        from the queue's acknowledgement, so nothing published meanwhile is lost).

        Raises:
            RuntimeError: some agents did not start (the others did); on a balancing silo
                the next rounds retry those queues.
        """
        async with self._balance_lock:
            if self._stopping or not self.agents_stopped:
                return
            self.agents_stopped = False
            failed: list[str] = []
            for queue in sorted(self.held, key=lambda q: q.index):
                self.held.discard(queue)
                try:
                    await self._start_agent(queue)
                except Exception as exc:  # the others start all the same
                    self.log.error("stream_agent_start_failed", queue=str(queue),
                                   error=repr(exc))
                    failed.append(f"{queue}: {exc!r}")
            self.log.info("stream_agents_started", queues=len(self.agents))
        if failed:
            raise RuntimeError(f"{len(failed)} pulling agents did not start: "
                               + "; ".join(failed))

    async def restart_agent(self, queue: QueueId) -> bool:
        """Hand ``queue`` over from its agent to a new one on this silo, as a planned move
        does (the old agent delivers what it cached and acknowledges; the new one reads from
        the acknowledgement point). Serialised with balancing rounds. False if this silo does
        not pull ``queue``."""
        async with self._balance_lock:
            if self._stopping or queue not in self.agents:
                return False
            await self._stop_agent(queue)
            await self._start_agent(queue)
            return True

    async def _start_agent(self, queue: QueueId) -> None:
        provider = self.provider
        silo = provider.silo
        agent = PullingAgent(provider, queue)
        silo.add_system_target(agent, (provider.name, queue.index, str(silo.address)))
        try:
            await agent.start()
        except BaseException:
            self._drop_target(agent)
            raise
        self.agents[queue] = agent
        hub = provider.diagnostics
        if hub.listening:
            hub.emit(QueueAcquired(str(silo.address), provider.name, str(queue)))

    async def _stop_agent(self, queue: QueueId) -> None:
        agent = self.agents.get(queue)
        if agent is None:
            return
        try:
            await agent.stop()
        finally:
            self.agents.pop(queue, None)
            self._drop_target(agent)
            hub = self.provider.diagnostics
            if hub.listening:
                hub.emit(QueueReleased(str(self.provider.silo.address), self.provider.name,
                                       str(queue)))

    def _drop_target(self, agent: PullingAgent) -> None:
        act = getattr(agent, "_orleanspy_activation", None)
        if act is not None:
            self.provider.silo.catalog.remove(act)

    # -- runtime balancing (clustered silos) ----------------------------------------------------
    async def _on_view(self, snapshot: MembershipSnapshot) -> None:
        self._view_changed.set()

    async def _balance_loop(self) -> None:
        """Rebalance after membership settles; renew leases; retry queues still handed off."""
        opts = self.provider.options
        clock = self.provider.clock
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
            lost = await self._leases.renew([*self.agents, *self.held], self._me,
                                            self.provider.options.lease_duration)
            for queue in lost:  # another silo took it after it expired: stop pulling at once
                self.log.warning("stream_lease_lost", queue=str(queue))
                self.held.discard(queue)
                await self._stop_agent(queue)

    async def _rebalance(self) -> None:
        """One round: compute the target, give up what is no longer ours (stop the agent,
        then release), acquire and start what is ours and free."""
        leases = self._leases
        cluster = self.provider.cluster
        assert leases is not None and cluster is not None
        async with self._balance_lock:
            if self._stopping:
                return
            snapshot = cluster.snapshot
            me = self._me
            active = [str(s) for s in snapshot.active_silos]
            if me not in active:
                return  # joining or leaving: the stop hands everything off

            dead = {str(s) for s in snapshot.silos(SiloStatus.DEAD, SiloStatus.STOPPED)}
            queues = self.provider.mapper.all_queues()
            target = await leases.plan(queues, me, active)
            wanted = set(target)
            for queue in [q for q in (*self.agents, *self.held) if q not in wanted]:
                self.held.discard(queue)
                await self._stop_agent(queue)
                await leases.release([queue], me)
                self.log.info("stream_queue_released", queue=str(queue))
            pending = 0
            duration = self.provider.options.lease_duration
            for queue in target:
                if queue in self.agents or queue in self.held or self._stopping:
                    continue
                if await leases.acquire(queue, me, duration, dead):
                    if self.agents_stopped:  # kept unread until ``start_agents``
                        self.held.add(queue)
                        continue
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
        async with self.provider.clock.timeout(timeout), self._rounds:
            await self._rounds.wait_for(lambda: predicate(set(self.agents)))
        return set(self.agents)

