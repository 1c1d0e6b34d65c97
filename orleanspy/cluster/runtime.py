"""ClusterRuntime: a silo's part in a cluster — membership, transport, directory, placement.

Where it sits: ``Silo(options with membership=...)`` owns one. The dispatcher hands it every
message for a grain that is not active on this silo (``route``); the transport hands it every
message from another silo (``deliver_remote``); activations register through it before
``on_activate`` (``register_activation``) and leave the directory through it.

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

Longer than most modules (about 550 lines): routing, directory registration and the
reactions to membership changes share one state (registered activations, lookups in flight,
the view), and split apart they would hand it around. Configuration lives in ``config``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final, final

from orleanspy._util.tasks import TaskSet
from orleanspy.cluster.config import membership_options_of, open_membership_table
from orleanspy.cluster.connection import silo_key
from orleanspy.cluster.directory import DirectoryEntry, DirectoryRing, GrainDirectory
from orleanspy.cluster.membership.entry import SiloStatus
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.service import MembershipService
from orleanspy.cluster.membership.snapshot import MembershipSnapshot
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.cluster.placement import PlacementDirector
from orleanspy.cluster.transport import SiloTransport, decode_silo, encode_silo
from orleanspy.errors import ConfigurationError, MessageRejectedError, SiloUnavailableError
from orleanspy.grains.host import ActivationHandle, DeactivationReason
from orleanspy.grains.interface import GrainClassInfo
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.messaging.message import Message
from orleanspy.runtime.locator import fenced_error, forwarding_failed
from orleanspy.runtime.reports import reminders_report, status_report, streams_report
from orleanspy.runtime.silo import Silo

__all__ = ["ClusterRuntime", "LeaseStoreFactory", "membership_options_of", "open_membership_table"]

#: Makes the stream-queue lease store of a membership table (the hosting layer supplies it:
#: lease stores belong to the streams layer, above this one).
LeaseStoreFactory = Callable[[MembershipTable], Any]

#: How often a silo tells the others its activation count (activation-count placement).
LOAD_PERIOD: Final = 1.0
#: How long a graceful stop waits for its activations' unregistrations.
UNREGISTER_WAIT: Final = 5.0

_DEAD, _ACTIVE = SiloStatus.DEAD, SiloStatus.ACTIVE


@final
class ClusterRuntime:
    """The cluster side of one silo, and its ``runtime.locator.GrainLocator``.

    Args:
        silo: the silo (its options name the membership table, ports and secret).
        table: a membership table to use instead of opening ``options.membership`` (tests
            share one ``MemoryMembershipTable`` between silos of one process).
        membership_options: failure-detection settings (default: from the silo options).
        lease_stores: makes the stream-queue lease store of the membership table
            (``lease_store()``); None: this silo offers none.
    """

    #: Grains not active here may live on other silos: route them.
    local_only = False

    def __init__(
        self,
        silo: Silo,
        table: MembershipTable | None = None,
        membership_options: MembershipOptions | None = None,
        lease_stores: LeaseStoreFactory | None = None,
    ) -> None:
        self.silo = silo
        opts = silo.options
        self.membership_options = membership_options or membership_options_of(opts)
        self._lease_stores = lease_stores
        self._max_forwards = opts.max_forward_count
        self._table = table
        self._owns_table = table is None
        self.me = silo.address
        self.transport = SiloTransport(
            silo.address, silo.codec, silo.log, cluster_id=opts.cluster_id,
            secret=opts.secret, key=None, max_frame_size=opts.max_frame_size,
            default_timeout=opts.response_timeout, deliver=self.deliver_remote,
            is_dead=self._is_dead, clock=silo.clock, verify_peer=self._verify_peer,
            handshake_timeout=opts.handshake_timeout,
            max_pending_handshakes=opts.max_pending_handshakes,
        )
        self.directory = GrainDirectory(silo.address, self.transport.request, self._valid)
        self.transport.reroute = self._reroute
        self.placement = PlacementDirector(silo.address)
        self.membership: MembershipService | None = None
        self.snapshot = MembershipSnapshot.empty()
        self._registered: dict[GrainId, tuple[ActivationHandle, DirectoryEntry]] = {}
        self._addressing: dict[GrainId, asyncio.Future[SiloAddress]] = {}
        self._activation_ids = itertools.count(1)
        self._tasks = TaskSet()  # load publishing, hand-overs, lookups, unregistrations
        self._unregistering: set[asyncio.Task[Any]] = set()
        self._unregistering_of: dict[GrainId, asyncio.Task[Any]] = {}
        self._stopping = False
        self._view_changed = asyncio.Condition()
        self._view_listeners: list[Callable[[], None]] = []
        self.forwarded = 0
        self.duplicates = 0

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Listen, then join the cluster (returns once this silo is ACTIVE)."""
        silo = self.silo
        opts = silo.options
        if self._table is None:
            self._table = open_membership_table(
                opts.membership or "memory", opts.cluster_id, opts.data_dir
            )
        self.transport.key = silo_key(await self._cluster_key(self._table))
        port = await self.transport.listen(opts.host, opts.port)
        me = SiloAddress(opts.advertised_host, port, silo.address.generation)
        silo.set_address(me)
        self.me = me
        self.transport.set_address(me)
        self.transport.set_log(silo.log)
        self.directory = GrainDirectory(me, self.transport.request, self._valid)
        self.placement = PlacementDirector(me)
        handlers = self.transport.handlers
        handlers["dir"] = self.directory_op
        handlers["status"] = self.status
        handlers["streams"] = self.streams_status
        handlers["locate"] = self.locate
        handlers["calls"] = self.call_statistics
        handlers["reminders"] = self.reminders_status
        handlers["load"] = self._on_load
        handlers["cache"] = self._on_cache
        gateway = silo.gateway
        membership = self.membership = MembershipService(
            self._table, me, self.transport, gossiper=self.transport,
            options=self.membership_options, clock=silo.clock, silo_name=silo.name,
            host_name=socket.gethostname(),
            gateway_port=gateway.port if gateway is not None else None,
            on_declared_dead=self._declared_dead, diagnostics=silo.diagnostics,
        )
        handlers["probe"] = membership.handle_probe
        handlers["probe_indirect"] = self._probe_indirect
        handlers["gossip"] = membership.on_gossip
        try:
            await membership.start()
        except BaseException:
            await self.transport.close()
            if self._owns_table:
                await self._table.close()
            raise
        self._apply(membership.snapshot)
        membership.add_listener(self._on_view)
        self._spawn(self._publish_load())

    async def begin_shutdown(self) -> None:
        """First step of a graceful stop: SHUTTING_DOWN (others stop placing work here)."""
        self._stopping = True
        if self.membership is not None:
            try:
                await self.membership.begin_shutdown()
            except Exception as exc:
                self.silo.log.warning("cluster_shutdown_write_failed", error=repr(exc))

    async def stop(self) -> None:
        """Last step: wait (bounded) for unregistrations, leave (DEAD), close the transport."""
        self._stopping = True
        if self._unregistering:
            try:
                async with self.silo.clock.timeout(UNREGISTER_WAIT):
                    await asyncio.wait(list(self._unregistering))
            except TimeoutError:
                pass
        if self.membership is not None:
            await self.membership.stop()
        # Others stop sending here once they see this silo dead; answer what is in flight.
        await self.transport.quiesce(min(self.silo.options.shutdown_timeout, UNREGISTER_WAIT))
        self._tasks.cancel()
        await self._tasks.wait()
        await self.transport.close()
        if self._owns_table and self._table is not None:
            await self._table.close()

    async def abort(self) -> None:
        """Stop as a crash would: no membership writes (tests)."""
        self._stopping = True
        if self.membership is not None:
            await self.membership.abort()
        self._tasks.cancel()
        await self.transport.close()

    async def _cluster_key(self, table: MembershipTable) -> bytes:
        """The cluster key: ``SiloOptions.cluster_key``, else the one the table keeps."""
        configured = self.silo.options.cluster_key
        if configured is not None:
            return configured.encode()
        try:
            await table.open()
            key = await table.cluster_key()
        except BaseException:
            if self._owns_table:
                await table.close()
            raise
        if key is None:
            raise ConfigurationError(
                f"SiloOptions.cluster_key is not set and the membership table {table!r} keeps "
                "no cluster key: set cluster_key (the same secret on every silo of the cluster)"
            )
        return key

    async def _verify_peer(self, peer: SiloAddress) -> str | None:
        """None if ``peer`` may connect: membership lists that silo and generation, not dead."""
        status = self.snapshot.status_of(peer)
        if status is None:
            table = self._table
            if table is None:
                return f"silo {self.me} has no membership table yet"
            row = (await table.read_row(peer)).get(peer)
            status = row[0].status if row is not None else None
        if status is None:
            return (f"silo {peer} is not in the membership table of cluster "
                    f"{self.silo.options.cluster_id!r}")
        if status is _DEAD:
            return f"silo {peer} was declared dead"
        return None

    def _declared_dead(self) -> None:
        self.silo.log.error("cluster_declared_dead_stopping")
        self._stopping = True
        self.silo.stop_declared_dead()

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        return task

    def lease_store(self) -> Any:
        """The stream-queue lease store kept with the membership table (a
        ``streams.leases.QueueLeaseStore``, made by the factory the silo was given)."""
        table = self._table
        if table is None:
            raise RuntimeError("the cluster runtime has not started: no membership table yet")
        if self._lease_stores is None:
            raise RuntimeError("this silo was built without stream-queue lease stores")
        return self._lease_stores(table)

    # -- membership view --------------------------------------------------------------------
    def _is_dead(self, silo: SiloAddress) -> bool:
        return self.snapshot.status_of(silo) is _DEAD

    def _valid(self, silo: SiloAddress) -> bool:
        """Do entries on ``silo`` still count? Until it is dead: a silo that is shutting
        down keeps serving the grains it hosts until each has deactivated and unregistered,
        so a second activation never starts beside one still finishing its requests."""
        if silo == self.me:
            return not self.silo.declared_dead
        return self.snapshot.status_of(silo) is not _DEAD

    @property
    def accepting(self) -> bool:
        """May this silo take new activations?"""
        return (not self._stopping and not self.silo.stopping and self.membership is not None
                and self.membership.status is _ACTIVE)

    async def _on_view(self, snapshot: MembershipSnapshot) -> None:
        self._apply(snapshot)
        async with self._view_changed:
            self._view_changed.notify_all()

    def _reroute(self, msg: Message, silo: SiloAddress) -> bool:
        """A message that could not be sent to ``silo``: when that silo is dead or leaving,
        route it anew (it was never delivered); else let it fail."""
        status = self.snapshot.status_of(silo)
        if status is not _DEAD and status is not SiloStatus.SHUTTING_DOWN:
            return False
        self.directory.cache.invalidate(msg.target, silo)
        self.route(msg, forwarded=True)
        return True

    def fenced(self) -> bool:
        """Must this silo refuse to serve? True while it cannot confirm that it is still a
        live member of the cluster (``MembershipService.fenced``), and once it is dead."""
        membership = self.membership
        return membership is not None and membership.fenced()

    def add_view_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after each change of the view (the directory ring moved)."""
        self._view_listeners.append(listener)

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
        async with self.silo.clock.timeout(timeout), self._view_changed:
            await self._view_changed.wait_for(lambda: predicate(self.snapshot))
        return self.snapshot

    def _apply(self, snapshot: MembershipSnapshot) -> None:
        previous = self.snapshot
        if snapshot.version <= previous.version:
            return
        self.snapshot = snapshot
        for change in snapshot.changes_since(previous):
            if change.current is _DEAD and change.silo != self.me:
                if change.previous is SiloStatus.SHUTTING_DOWN:
                    self.transport.retire_peer(change.silo)  # it answers what is in flight
                else:
                    self.transport.close_peer(change.silo)
                self.placement.loads.pop(change.silo, None)
        old_ring, moved = self.directory.set_silos(snapshot.active_silos)
        if moved:
            self._spawn(self._hand_over(moved))
        self._reregister_changed(old_ring)
        for listener in self._view_listeners:
            listener()

    async def _hand_over(self, moved: list[tuple[GrainId, DirectoryEntry]]) -> None:
        """Give entries this silo no longer owns to their new owners (register-if-absent)."""
        for gid, entry in moved:
            if self._stopping:
                return
            try:
                await self.directory.register(gid, entry)
            except Exception as exc:  # the holder re-registers anyway
                self.silo.log.debug("directory_handover_failed", grain=str(gid),
                                    error=repr(exc))

    def _reregister_changed(self, old_ring: DirectoryRing) -> None:
        ring = self.directory.ring
        changed = [
            (gid, act, entry) for gid, (act, entry) in self._registered.items()
            if old_ring.owner(gid) != ring.owner(gid)
        ]
        if changed:
            self._spawn(self._reregister(changed))

    async def _reregister(
        self, items: list[tuple[GrainId, ActivationHandle, DirectoryEntry]]
    ) -> None:
        for gid, act, entry in items:
            if self._stopping:
                return
            try:
                winner = await self.directory.register(gid, entry)
            except Exception as exc:
                self.silo.log.warning("directory_reregister_failed", grain=str(gid),
                                      error=repr(exc))
                continue
            if winner != entry and self._registered.get(gid, (None,))[0] is act:
                # Another activation registered while the owner changed: it wins.
                self.duplicates += 1
                self.silo.log.warning("duplicate_activation_deactivated", grain=str(gid),
                                      winner=str(winner.silo))
                del self._registered[gid]
                self.directory.cache.put(gid, winner.silo)
                act.deactivate(DeactivationReason.DUPLICATE)

    # -- activations in the directory ----------------------------------------------------------
    @staticmethod
    def uses_directory(info: GrainClassInfo) -> bool:
        return not info.stateless_worker and not info.is_system_target

    async def register_activation(self, act: ActivationHandle) -> SiloAddress | None:
        """Register a new activation; None if it is the grain's one activation, else the
        silo of the activation that won (this one must not run)."""
        gid = act.grain_id
        entry = DirectoryEntry(self.me, next(self._activation_ids))
        winner = await self.directory.register(gid, entry)
        if winner != entry and winner.silo == self.me:
            live = self._registered.get(gid)
            if live is None or live[1] != winner:
                # A leftover of this silo's earlier activation (its unregistration is on its
                # way): take its place.
                await self.directory.unregister(gid, winner)
                winner = await self.directory.register(gid, entry)
        if winner == entry:
            self._registered[gid] = (act, entry)
            return None
        self.duplicates += 1
        self.directory.cache.put(gid, winner.silo)
        return winner.silo

    def activation_removed(self, act: ActivationHandle) -> None:
        """The catalog dropped ``act``: remove its directory entry (in the background)."""
        gid = act.grain_id
        item = self._registered.get(gid)
        if item is None or item[0] is not act:
            return
        del self._registered[gid]
        task = self._spawn(self._unregister(gid, item[1]))
        self._unregistering.add(task)
        self._unregistering_of[gid] = task
        task.add_done_callback(self._unregistering.discard)
        task.add_done_callback(partial(self._unregistered, gid))

    def _unregistered(self, gid: GrainId, task: asyncio.Task[Any]) -> None:
        if self._unregistering_of.get(gid) is task:
            del self._unregistering_of[gid]

    async def _unregister(self, gid: GrainId, entry: DirectoryEntry) -> None:
        try:
            await self.directory.unregister(gid, entry)
        except Exception as exc:  # the entry dies with this silo's row anyway
            self.silo.log.debug("directory_unregister_failed", grain=str(gid), error=repr(exc))

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
        unregistering = self._unregistering_of
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
            target = self._system_target_silo(gid.key)
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

    @staticmethod
    def _system_target_silo(key: Any) -> SiloAddress | None:
        """The silo named by the last element of a system target's key, if any."""
        if type(key) is not tuple or not key or type(key[-1]) is not str:
            return None
        text = key[-1]
        host, sep, rest = text.rpartition(":")
        port, at, generation = rest.partition("@")
        if not sep or not at or not port.isdigit() or not generation.isdigit():
            return None
        return SiloAddress(host, int(port), int(generation))

    def _addressed(self, gid: GrainId, fut: asyncio.Future[SiloAddress]) -> None:
        if self._addressing.get(gid) is fut:
            del self._addressing[gid]

    async def _address(self, gid: GrainId) -> SiloAddress:
        info = self.silo.catalog.info_for(gid)
        if not self.uses_directory(info):
            return self.me
        entry = await self.directory.lookup(gid)
        me = self.me
        if entry is not None and (entry.silo != me or gid in self._registered):
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
        if self.fenced():
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

    # -- control operations -------------------------------------------------------------------
    def directory_op(self, op: Any, grain_id: Any, entry: Any, hops: Any) -> Any:
        return self.directory.handle_wire(op, grain_id, entry, hops)

    async def _probe_indirect(self, target: Any, timeout: Any) -> bool:
        assert self.membership is not None
        return await self.membership.handle_indirect_probe(decode_silo(target), float(timeout))

    def _on_load(self, silo: Any, count: Any) -> None:
        self.placement.loads[decode_silo(silo)] = int(count)

    def _on_cache(self, grain_id: Any, silo: Any) -> None:
        if type(grain_id) is GrainId:
            self.directory.cache.put(grain_id, decode_silo(silo))

    async def _publish_load(self) -> None:
        while not self._stopping:
            count = len(self.silo.catalog)
            self.placement.loads[self.me] = count
            for peer in self.snapshot.active_silos:
                if peer != self.me:
                    self.transport.notify(peer, "load", [encode_silo(self.me), count])
            await self.silo.clock.sleep(LOAD_PERIOD)

    def status(self) -> dict[str, Any]:
        """What ``orleanspy cluster status`` shows for this silo."""
        silo = self.silo
        queues: dict[str, list[str]] = {}
        for name, provider in silo.stream_providers.items():
            agents = getattr(provider, "agents", {})
            queues[name] = sorted(str(q) for q in agents)
        membership = self.membership
        return {
            **status_report(silo, silo.statistics()),
            "silo": str(self.me),
            "status": membership.status.value if membership and membership.status else None,
            "pid": os.getpid(),
            "queues": queues,
            "directory_entries": len(self.directory.partition),
            "view_version": self.snapshot.version,
            "active_silos": [str(s) for s in self.snapshot.active_silos],
        }

    async def locate(self, type_name: Any, key: Any) -> dict[str, Any]:
        """Where a grain is active (``orleanspy grains locate``), from the directory; asking
        never activates it."""
        if not isinstance(type_name, str) or type(key) not in (str, int, uuid.UUID):
            raise MessageRejectedError(
                "locate takes a grain type name and a str, int or UUID key", "bad_arguments")
        grain_id = GrainId(type_name, key)
        info = self.silo.catalog.info_for(grain_id)  # unknown type: says which one is close
        if not self.silo.locator.uses_directory(info):
            return {"grain": f"{type_name}/{key}", "directory": False, "silo": None}
        entry = await self.directory.lookup(grain_id)
        return {"grain": f"{type_name}/{key}", "directory": True,
                "silo": str(entry.silo) if entry is not None else None,
                "entry_held_by": str(self.directory.owner(grain_id))}

    def streams_status(self) -> dict[str, Any]:
        """What ``orleanspy streams status`` shows for this silo: each provider's agents
        and latency histograms."""
        return {"silo": str(self.me), **streams_report(self.silo)}

    def reminders_status(self) -> dict[str, Any]:
        """The reminders this silo fires (the dashboard's reminder panel)."""
        return {"silo": str(self.me), **reminders_report(self.silo)}

    def call_statistics(self) -> dict[str, Any]:
        """What ``orleanspy grains top`` reads: each grain method's cumulative calls,
        errors, seconds and latency buckets on this silo (``runtime.call_stats``)."""
        return {"silo": str(self.me), "types": self.silo.call_statistics.snapshot()}

    def statistics(self) -> dict[str, Any]:
        return {
            "directory_entries": len(self.directory.partition),
            "cache_entries": len(self.directory.cache),
            "registered": len(self._registered),
            "forwarded": self.forwarded,
            "duplicates": self.duplicates,
            "transport": dataclasses.asdict(self.transport.statistics()),
        }


def _copy_reply(copy: Any, reply: Any, ok: bool, value: Any) -> None:
    reply(ok, copy(value) if ok else value)
