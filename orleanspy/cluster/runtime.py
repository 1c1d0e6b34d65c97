"""ClusterRuntime: a silo's part in a cluster — joining, leaving and routing.

Where it sits: the silo builder (``orleanspy.hosting.builder``) makes one for a silo with
membership, with the parts it uses: the transport, the grain directory, the placement
director, the view (``view``), the directory registrations (``registrations``) and the
membership table. The dispatcher hands it every message for a grain that is not active on
this silo (``route``); the transport hands it every message from another silo
(``deliver_remote``); activations register through it before ``on_activate`` and leave
the directory through it. What a silo reports to tools is in ``ops``.

Routing a message for grain G (not active here):

1. The directory cache says G lives on silo S: send it there.
2. Else ask G's directory owner (one lookup per grain at a time; concurrent messages for G
   wait for the same answer). An entry on a live silo is cached and used.
3. Else G's placement strategy picks a silo; the message goes there and that silo creates the
   activation, which registers (register-if-absent). A loser forwards its queued messages to
   the winner. Messages are forwarded at most ``MAX_HOPS`` times, then rejected.

A silo that receives a message for a grain it does not host creates the activation unless its
cache knows better (then it forwards and tells the sender where G lives). A stopping silo
forwards instead of creating.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Final, final

from orleanspy._util.tasks import TaskSet
from orleanspy.cluster.config import cluster_key
from orleanspy.cluster.connection import SiloConnection, silo_key
from orleanspy.cluster.directory import GrainDirectory
from orleanspy.cluster.membership.entry import SiloStatus
from orleanspy.cluster.membership.service import MembershipService
from orleanspy.cluster.membership.snapshot import MembershipSnapshot
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.cluster.placement import PlacementDirector, system_target_silo
from orleanspy.cluster.registrations import UNREGISTER_WAIT, DirectoryRegistrations
from orleanspy.cluster.transport import SiloTransport, encode_silo
from orleanspy.cluster.view import ClusterView
from orleanspy.errors import SiloUnavailableError
from orleanspy.grains.host import ActivationHandle
from orleanspy.grains.interface import GrainClassInfo
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.messaging.message import Message
from orleanspy.runtime.identity import SiloIdentity
from orleanspy.runtime.locator import fenced_error, forwarding_failed
from orleanspy.runtime.silo import Silo

__all__ = ["ClusterRuntime", "LeaseStoreFactory", "MembershipFactory"]

#: Makes the stream-queue lease store of a membership table (the hosting layer supplies it:
#: lease stores belong to the streams layer, above this one).
LeaseStoreFactory = Callable[[MembershipTable], Any]
#: Makes this silo's membership service once its address is known (the transport listens).
MembershipFactory = Callable[[SiloAddress], MembershipService]

#: How often a silo tells the others its activation count (activation-count placement).
LOAD_PERIOD: Final = 1.0

_ACTIVE = SiloStatus.ACTIVE


@final
class ClusterRuntime:
    """The cluster side of one silo, and its ``runtime.locator.GrainLocator``.

    Args:
        silo: the silo (options, clock, status, catalog, dispatcher; read on use).
        identity: this silo's address, bound here once the transport listens.
        transport, directory, placement, view, registrations: the parts it drives.
        tasks: its background tasks (load publishing, hand-overs, lookups).
        table: the membership table; ``owns_table``: close it on stop (False when the
            caller shares one table between silos of one process).
        make_membership: makes the membership service for the bound address.
        max_forwards: how often a message may be forwarded (``max_forward_count``).
        lease_stores: makes the stream-queue lease store of the membership table
            (``lease_store()``); None: this silo offers none.
    """

    #: Grains not active here may live on other silos: route them.
    local_only = False

    def __init__(
        self,
        silo: Silo,
        identity: SiloIdentity,
        *,
        transport: SiloTransport,
        directory: GrainDirectory,
        placement: PlacementDirector,
        view: ClusterView,
        registrations: DirectoryRegistrations,
        tasks: TaskSet,
        table: MembershipTable,
        owns_table: bool,
        make_membership: MembershipFactory,
        max_forwards: int,
        lease_stores: LeaseStoreFactory | None = None,
    ) -> None:
        self.silo = silo
        self._identity = identity
        self.transport = transport
        self.directory = directory
        self.placement = placement
        self.view = view
        self._registrations = registrations
        self._tasks = tasks
        self._table = table
        self._owns_table = owns_table
        self._make_membership = make_membership
        self._lease_stores = lease_stores
        self._max_forwards = max_forwards
        self.membership: MembershipService | None = None
        self._addressing: dict[GrainId, asyncio.Future[SiloAddress]] = {}
        self._stopping = False
        self.forwarded = 0

    @property
    def me(self) -> SiloAddress:
        return self._identity.address

    @property
    def snapshot(self) -> MembershipSnapshot:
        return self.view.snapshot

    @property
    def duplicates(self) -> int:
        return self._registrations.duplicates

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen, bind this silo's address, then join the cluster: the row reads JOINING
        until ``become_active``, which the silo calls once every component has started."""
        opts = self.silo.options
        transport = self.transport
        try:
            key = await cluster_key(opts.cluster_key, self._table,
                                    allow_readable=opts.allow_readable_secrets)
        except BaseException:
            if self._owns_table:
                await self._table.close()
            raise
        transport.key = silo_key(key)
        port = await transport.listen(opts.host, opts.port)
        me = SiloAddress(opts.advertised_host, port, self._identity.address.generation)
        self._identity.bind(me)
        transport.set_address(me)
        transport.set_log(self._identity.log)
        membership = self.membership = self._make_membership(me)
        try:
            await membership.join()
        except BaseException:
            await transport.close()
            if self._owns_table:
                await self._table.close()
            raise
        self._apply(membership.snapshot)
        membership.add_listener(self._on_view)
        self._spawn(self._publish_load())

    async def become_active(self) -> None:
        """Write ACTIVE: others place work here, and stream queues may be leased here."""
        assert self.membership is not None, "become_active before start"
        await self.membership.become_active()
        self._apply(self.membership.snapshot)  # the view has this silo active from here

    def _stop_registrations(self) -> None:  # no new work: hand-overs and reregistrations end
        self._stopping = True
        self._registrations.stopping = True

    async def begin_shutdown(self) -> None:
        """First step of a graceful stop: SHUTTING_DOWN (others stop placing work here)."""
        self._stop_registrations()
        if self.membership is not None:
            try:
                await self.membership.begin_shutdown()
            except Exception as exc:
                self.silo.log.warning("cluster_shutdown_write_failed", error=repr(exc))

    async def stop(self) -> None:
        """Last step: wait (bounded) for unregistrations, leave (DEAD), close the transport."""
        self._stop_registrations()
        await self._registrations.wait_unregistered()
        if self.membership is not None:
            await self.membership.stop()
        # Others stop sending here once they see this silo dead; answer what is in flight.
        await self.transport.quiesce(min(self.silo.options.shutdown_timeout, UNREGISTER_WAIT))
        self._tasks.cancel()
        await self._tasks.wait()
        await self.transport.close()
        if self._owns_table:
            await self._table.close()

    async def abort(self) -> None:
        """Stop as a crash would: no membership writes (tests)."""
        self._stop_registrations()
        if self.membership is not None:
            await self.membership.abort()
        self._tasks.cancel()
        await self.transport.close()

    def declared_dead(self) -> None:
        """Membership declared this silo dead: stop at once."""
        self.silo.log.error("cluster_declared_dead_stopping")
        self._stop_registrations()
        self.silo.stop_declared_dead()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        return task

    def lease_store(self) -> Any:
        """The stream-queue lease store kept with the membership table (a
        ``streams.leases.QueueLeaseStore``, made by the factory the silo was given)."""
        if self._lease_stores is None:
            raise RuntimeError("this silo was built without stream-queue lease stores")
        return self._lease_stores(self._table)

    # -- membership view ------------------------------------------------------------------
    @property
    def accepting(self) -> bool:
        """May this silo take new activations?"""
        return (not self._stopping and not self.silo.stopping and self.membership is not None
                and self.membership.status is _ACTIVE)

    def fenced(self) -> bool:
        """Must this silo refuse to serve? True while it cannot confirm that it is still a
        live member of the cluster (``MembershipService.fenced``), and once it is dead."""
        membership = self.membership
        return membership is not None and membership.fenced()

    def add_view_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each change of the view (the directory ring moved)."""
        self.view.add_listener(listener)

    def owns(self, grain_id: GrainId) -> bool:
        """Is this silo the owner of ``grain_id`` on the ring of active silos (the silo that
        keeps its directory entry and serves its reminders)?"""
        return self.directory.ring.owner(grain_id) == self.me

    async def tell_owner(self, op: str, grain_id: GrainId) -> None:
        """Send control request ``op`` with ``grain_id`` to the grain's owner on the ring."""
        owner = self.directory.ring.owner(grain_id)
        if owner is None or owner == self.me:
            handler = self.transport.handlers.get(op)
            if handler is not None:
                await handler(grain_id)
            return
        await self.transport.request(owner, op, [grain_id])

    async def wait_for_view(
        self, predicate: Callable[[MembershipSnapshot], bool], timeout: float | None = None
    ) -> MembershipSnapshot:
        """Wait until the view this runtime routes by (directory ring, placement) satisfies
        ``predicate``. Raises TimeoutError after ``timeout`` seconds."""
        return await self.view.wait_for(predicate, timeout)

    async def _on_view(self, snapshot: MembershipSnapshot) -> None:
        self._apply(snapshot)
        await self.view.notify()

    def _apply(self, snapshot: MembershipSnapshot) -> None:
        view = self.view
        previous = view.snapshot
        if snapshot.version <= previous.version:
            return
        view.snapshot = snapshot
        for change in snapshot.changes_since(previous):
            if change.current.is_gone and change.silo != self.me:
                if change.previous is SiloStatus.SHUTTING_DOWN:
                    self.transport.retire_peer(change.silo)  # it answers what is in flight
                else:
                    self.transport.close_peer(change.silo)
                self.placement.loads.pop(change.silo, None)
        old_ring, moved = self.directory.set_silos(snapshot.active_silos)
        self._registrations.ring_moved(old_ring, moved)
        view.changed()

    def reroute(self, msg: Message, silo: SiloAddress) -> bool:
        """A message that could not be sent to ``silo``: when that silo is dead or leaving,
        route it anew (it was never delivered); else let it fail."""
        status = self.snapshot.status_of(silo)
        if status is None or not status.is_terminating:
            return False
        self.directory.cache.invalidate(msg.target, silo)
        self.route(msg, forwarded=True)
        return True

    async def _publish_load(self) -> None:
        while not self._stopping:
            count = len(self.silo.catalog)
            self.placement.loads[self.me] = count
            for peer in self.snapshot.active_silos:
                if peer != self.me:
                    self.transport.notify(peer, "load", [encode_silo(self.me), count])
            await self.silo.clock.sleep(LOAD_PERIOD)

    # -- activations in the directory ----------------------------------------------------------
    @staticmethod
    def uses_directory(info: GrainClassInfo) -> bool:
        return not info.stateless_worker and not info.is_system_target

    def register_activation(
        self, act: ActivationHandle
    ) -> Coroutine[Any, Any, SiloAddress | None]:
        """Register a new activation; None if it is the grain's one activation, else the
        silo of the activation that won (this one must not run)."""
        return self._registrations.register(act)

    def activation_removed(self, act: ActivationHandle) -> None:
        """The catalog dropped ``act``: remove its directory entry (in the background)."""
        self._registrations.removed(act)

    # -- routing --------------------------------------------------------------------------
    def route(self, msg: Message, *, forwarded: bool = False, local_origin: bool = False) -> None:
        """Send ``msg`` to its grain's activation wherever it is (or place it)."""
        if forwarded:
            hops = msg.hops + 1
            if hops > self._max_forwards:
                self._fail(msg, forwarding_failed(msg, self._max_forwards))
                return
            msg.hops = hops
            self.forwarded += 1
        self._route(msg, local_origin)

    def _route(self, msg: Message, local_origin: bool) -> None:
        gid = msg.target
        unregistering = self._registrations.unregistering_of
        leaving = unregistering.get(gid) if unregistering else None
        if leaving is not None and not leaving.done():
            # This silo's activation of the grain just went away: route once its directory
            # entry is gone, or the lookup would send the message straight back here.
            leaving.add_done_callback(lambda _: self._route(msg, local_origin))
            return
        info = self.silo.registry.get(gid.type_name)
        if info is not None and info.is_system_target:
            # A system target whose key ends with a silo's address lives on that silo (e.g. a
            # pulling agent, told of new subscriptions by a rendezvous on another silo).
            target = system_target_silo(gid.key)
            if target is None or target == self.me:
                self._deliver_local(msg, local_origin)
            elif target in self.snapshot.active_silos:
                self.transport.send_message(target, msg)
            else:
                self._fail(msg, SiloUnavailableError(
                    f"{gid} lives on silo {target}, which is not active"
                ))
            return
        if info is not None and info.stateless_worker:  # (``uses_directory``, inlined)
            self._deliver_local(msg, local_origin)  # stateless workers stay local
            return
        silo = self.directory.cache.get(gid)
        if silo is not None and silo != self.me:
            self.transport.send_message(silo, msg)
            return
        fut = self._addressing.get(gid)
        if fut is None:
            fut = self._spawn(self._address(gid))
            self._addressing[gid] = fut
            fut.add_done_callback(partial(self._addressed, gid))
        fut.add_done_callback(partial(self._send_addressed, msg, local_origin))

    def connection_for(self, gid: GrainId) -> SiloConnection | None:
        """The connection to send a gateway client's request for ``gid`` on as it came, when
        ``_route`` would send it there at once: the directory cache names another silo, the
        grain's class uses the directory, no activation of it is leaving this silo, and the
        connection can be written now. None: route it as a message."""
        unregistering = self._registrations.unregistering_of
        if unregistering and gid in unregistering:
            return None
        info = self.silo.registry.get(gid.type_name)
        if info is None or info.is_system_target or info.stateless_worker:
            return None
        silo = self.directory.cache.get(gid)
        if silo is None or silo is self._identity.address:  # (interned: ``me``, inline)
            return None
        return self.transport.writable(silo)

    def _addressed(self, gid: GrainId, fut: asyncio.Future[SiloAddress]) -> None:
        if self._addressing.get(gid) is fut:
            del self._addressing[gid]

    async def _address(self, gid: GrainId) -> SiloAddress:
        info = self.silo.catalog.info_for(gid)
        if not self.uses_directory(info):
            return self.me
        entry = await self.directory.lookup(gid)
        me = self.me
        if entry is not None and (entry.silo != me or gid in self._registrations.registered):
            if entry.silo != me:
                self.directory.cache.put(gid, entry.silo)
            return entry.silo
        silos = self.snapshot.active_silos
        local_ok = self.accepting
        if not local_ok:
            silos = tuple(s for s in silos if s != me)
        return self.placement.choose(info.placement, gid, silos, local_ok)

    def _send_addressed(self, msg: Message, local_origin: bool,
                        fut: asyncio.Future[SiloAddress]) -> None:
        if fut.cancelled():
            self._fail(msg, SiloUnavailableError(f"silo {self.me} is stopping"))
            return
        exc = fut.exception()
        if exc is not None:
            self._fail(msg, exc)
            return
        silo = fut.result()
        if silo == self.me:
            self._deliver_local(msg, local_origin)
        else:
            self.transport.send_message(silo, msg)

    def _deliver_local(self, msg: Message, local_origin: bool) -> None:
        dispatcher = self.silo.dispatcher
        if local_origin:
            if msg.args:
                msg.args = dispatcher.copy_args(tuple(msg.args))
            if msg.kwargs:
                msg.kwargs = dispatcher.copy_value(msg.kwargs)
            reply = msg.reply
            if reply is not None:
                msg.reply = partial(_copy_reply, dispatcher.copy_value, reply)
        dispatcher.deliver_here(msg)

    def forward(self, msg: Message, silo: SiloAddress) -> None:
        """Send a message that reached a duplicate activation to the winner's silo."""
        hops = msg.hops + 1
        if hops > self._max_forwards:
            self.route(msg, forwarded=True)  # rejects it
            return
        msg.hops = hops
        self.forwarded += 1
        if silo == self.me:
            self.silo.dispatcher.deliver_here(msg)
        else:
            self.transport.send_message(silo, msg)

    def deliver_remote(self, msg: Message, sender: SiloAddress | None) -> None:
        """A request or one-way message from another silo, addressed to this one."""
        silo = self.silo
        membership = self.membership  # (``fenced``, inline: this runs for every request)
        if membership is not None and membership.fenced():
            self._fail(msg, fenced_error(silo.name))
            return
        gid = msg.target
        if gid in silo.catalog.activations:
            silo.dispatcher.deliver_here(msg)
            return
        info = silo.registry.get(gid.type_name)
        if info is None or not self.uses_directory(info):
            silo.dispatcher.deliver_here(msg)
            return
        if silo.stopping or self._stopping:
            self.route(msg, forwarded=True)
            return
        cached = self.directory.cache.get(gid)
        if cached is not None and cached == sender:  # it sent it on: the grain left there
            self.directory.cache.invalidate(gid)
            cached = None
        if (cached is not None and cached != self.me
                and msg.hops < self._max_forwards):
            if sender is not None:
                self.transport.notify(sender, "cache", [gid, encode_silo(cached)])
            self.route(msg, forwarded=True)
            return
        silo.dispatcher.deliver_here(msg)

    def _fail(self, msg: Message, exc: BaseException) -> None:
        if msg.reply is not None:
            msg.reply(False, exc)
        else:
            self.silo.log.warning("one_way_call_failed", grain=str(msg.target),
                                  method=msg.method, error=repr(exc))

    def statistics(self) -> dict[str, Any]:
        return {
            "directory_entries": len(self.directory.partition),
            "cache_entries": len(self.directory.cache),
            "registered": len(self._registrations.registered),
            "forwarded": self.forwarded,
            "duplicates": self.duplicates,
            "transport": dataclasses.asdict(self.transport.statistics()),
        }


def _copy_reply(copy: Any, reply: Any, ok: bool, value: Any) -> None:
    reply(ok, copy(value) if ok else value)
