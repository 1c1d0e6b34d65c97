"""Silo: the public silo, composed from options on top of the runtime's silo core.

A subclass of ``orleanspy.runtime.silo.Silo`` rather than a wrapper: grains, streams,
system targets and tests hold the silo object itself (``grain.silo``, ``provider.silo``),
so the composed silo must be that object, with every attribute of the core. This module
adds what the runtime layer may not import: storage back ends and the reminder table
opened from their URLs, the cluster runtime when membership is configured, the stream
providers with their lease store and the PubSubRendezvous grain, and the client gateway;
each joins ``silo.lifecycle`` at its stage.

Start (stages upwards): storage and the reminder table open → the gateway listens (just
below CLUSTER, so that the membership entry carries its port) → transport listens and
membership joins → reminders → stream providers → collector. Stop (downwards): the gateway
stops accepting, membership SHUTTING_DOWN, collector → stream providers → reminders →
every activation deactivates → the gateway closes → the cluster is left → storage closes.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType
from typing import Any

from orleanspy._util.clock import Clock
from orleanspy._util.lifecycle import SiloStage
from orleanspy._util.urls import parse_backend_url
from orleanspy.cluster.membership.memory import MemoryMembershipTable
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.cluster.membership.redis import RedisMembershipTable
from orleanspy.cluster.membership.sqlite import SqliteMembershipTable
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.cluster.runtime import ClusterRuntime
from orleanspy.reminders.base import ReminderTable
from orleanspy.reminders.memory import MemoryReminderTable
from orleanspy.reminders.postgres import PostgresReminderTable
from orleanspy.reminders.redis import RedisReminderTable
from orleanspy.reminders.service import ReminderService
from orleanspy.reminders.sqlite import SqliteReminderTable
from orleanspy.runtime.gateway import Gateway
from orleanspy.runtime.locator import GrainLocator
from orleanspy.runtime.options import BACKENDS_OF, SiloOptions
from orleanspy.runtime.silo import GATEWAY, REMINDERS, STREAMS_PREFIX
from orleanspy.runtime.silo import Silo as SiloCore
from orleanspy.storage.base import GrainStorage
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.storage.postgres import PostgresGrainStorage
from orleanspy.storage.redis import RedisGrainStorage
from orleanspy.storage.sqlite import SqliteGrainStorage
from orleanspy.streams.client_consumer import ClientStreamConsumer
from orleanspy.streams.leases import MemoryQueueLeaseStore, QueueLeaseStore, SqliteQueueLeaseStore
from orleanspy.streams.postgres_leases import PostgresQueueLeaseStore
from orleanspy.streams.pubsub import PubSubRendezvous
from orleanspy.streams.pulling.agent import PullingAgent
from orleanspy.streams.redis_leases import RedisQueueLeaseStore

__all__ = ["Silo", "open_grain_storage", "open_reminder_table", "queue_lease_store"]

#: Stage at which the gateway listens: before the cluster joins (see the module doc).
GATEWAY_LISTEN = SiloStage.CLUSTER - 100

_STATE_BACKENDS = BACKENDS_OF["storage"]


def open_grain_storage(url: str, data_dir: str) -> GrainStorage:
    """The grain storage of a ``SiloOptions.storage`` URL (``memory``, ``sqlite:PATH``,
    ``redis://HOST:PORT/DB?prefix=P`` or ``postgresql://HOST:PORT/DB?schema=S``)."""
    parsed = parse_backend_url(url, key="SiloOptions.storage", data_dir=data_dir,
                               allow=_STATE_BACKENDS, example="sqlite:state.db")
    if parsed.scheme == "memory":
        return MemoryGrainStorage()
    if parsed.scheme == "redis":
        return RedisGrainStorage(parsed.text)
    if parsed.scheme == "postgres":
        return PostgresGrainStorage(parsed.text)
    return SqliteGrainStorage(parsed.path)


def open_reminder_table(url: str, data_dir: str) -> ReminderTable:
    """The reminder table of a ``SiloOptions.reminders`` URL (as for storage)."""
    parsed = parse_backend_url(url, key="SiloOptions.reminders", data_dir=data_dir,
                               allow=_STATE_BACKENDS, example="sqlite:reminders.db")
    if parsed.scheme == "memory":
        return MemoryReminderTable()
    if parsed.scheme == "redis":
        return RedisReminderTable(parsed.text)
    if parsed.scheme == "postgres":
        return PostgresReminderTable(parsed.text)
    return SqliteReminderTable(parsed.path)


def queue_lease_store(table: MembershipTable) -> QueueLeaseStore:
    """The stream-queue lease store kept with a membership table: table ``stream_leases``
    of the SQLite file (a new connection; the caller closes it), or the one in-memory store
    the silos sharing an in-memory table share (it lives on the table)."""
    if isinstance(table, SqliteMembershipTable):
        return SqliteQueueLeaseStore(table.path, table.cluster_id)
    if isinstance(table, RedisMembershipTable):
        return RedisQueueLeaseStore(table.url, table.cluster_id)
    if isinstance(table, PostgresMembershipTable):
        return PostgresQueueLeaseStore(table.url, table.cluster_id)
    if isinstance(table, MemoryMembershipTable):
        store = table.shared.get("stream_leases")
        if store is None:
            store = table.shared["stream_leases"] = MemoryQueueLeaseStore()
        assert isinstance(store, QueueLeaseStore)
        return store
    raise TypeError(f"no stream-queue lease store for membership table {table!r}")


class Silo(SiloCore):
    """A process (or part of one) that hosts grains.

    Example::

        async with Silo(SiloOptions(gateway_port=None), grains=[Counter]) as silo:
            counter = silo.get_grain(Counter, "a")
            await counter.increment()
    """

    def __init__(
        self,
        options: SiloOptions | None = None,
        *,
        grains: Iterable[type] = (),
        modules: Iterable[ModuleType | str] = (),
        storage: dict[str, GrainStorage] | None = None,
        reminder_table: ReminderTable | None = None,
        clock: Clock | None = None,
        stream_providers: dict[str, Any] | None = None,
        membership_table: MembershipTable | None = None,
        membership_options: MembershipOptions | None = None,
    ) -> None:
        opts = options if options is not None else SiloOptions()
        self._membership_table = membership_table
        self._membership_options = membership_options
        stores: dict[str, GrainStorage] = dict(storage or {})
        if "default" not in stores:
            stores["default"] = open_grain_storage(opts.storage, opts.data_dir)
        super().__init__(opts, grains=grains, modules=modules, storage=dict(stores),
                         clock=clock, stream_providers=stream_providers)
        table = reminder_table or open_reminder_table(opts.reminders, opts.data_dir)
        self.reminders = ReminderService(self, self.dispatcher, table)
        lc = self.lifecycle

        async def open_storage() -> None:
            for store in stores.values():
                await store.open()
            await table.open()

        async def close_storage() -> None:
            for store in stores.values():
                await store.close()
            await table.close()

        lc.subscribe("storage", SiloStage.STORAGE, on_start=open_storage,
                     on_stop=close_storage)
        if opts.gateway_port is not None:
            gateway = self.gateway = Gateway(self)

            async def gateway_shut() -> None:  # also after a failed start: both idempotent
                await gateway.stop_accepting()
                await gateway.close()

            lc.subscribe(GATEWAY, GATEWAY_LISTEN, on_start=gateway.start,
                         on_stop=gateway_shut, statistics=lambda: gateway.connection_count)
            lc.subscribe("gateway.connections", SiloStage.GATEWAY, on_stop=gateway.close)
        cluster = self.cluster
        if cluster is not None:
            joined = False

            async def join() -> None:
                nonlocal joined
                await cluster.start()  # cleans up after itself when it fails
                joined = True

            async def leave() -> None:
                if joined:
                    await cluster.stop()

            lc.subscribe("cluster", SiloStage.CLUSTER, on_start=join, on_stop=leave)
        reminders = self.reminders
        if cluster is not None:
            # Each reminder is served by the owner of its grain on the ring (see
            # reminders/service.py); the others tell it when they change one.
            # "reminder_sync", not "reminders": that is the tools' query of what a silo fires
            cluster.transport.handlers["reminder_sync"] = reminders.sync
            reminders.follow(cluster.owns, lambda gid: cluster.tell_owner("reminder_sync", gid),
                             refresh_period=opts.table_refresh_period)
            cluster.add_view_listener(reminders.membership_changed)
        lc.subscribe(REMINDERS, SiloStage.SERVICES, on_start=reminders.start,
                     on_stop=reminders.stop, statistics=lambda: reminders.fired)
        if self.stream_providers:
            self.register_grain_class(PubSubRendezvous)
            # Known on every silo, agent or not: a rendezvous here reaches agents elsewhere.
            self.register_grain_class(PullingAgent)
            self.register_grain_class(ClientStreamConsumer)
        for name, provider in self.stream_providers.items():
            provider.bind(name, self)
            lc.subscribe(f"{STREAMS_PREFIX}{name}", SiloStage.STREAMS, on_start=provider.start,
                         on_stop=provider.stop, statistics=provider.statistics)
        # Stopping runs one stage's steps in reverse: the gateway stops accepting first,
        # then membership says SHUTTING_DOWN, then the collector (the core's) stops.
        if cluster is not None:
            lc.subscribe("cluster.leaving", SiloStage.ACTIVE, on_stop=cluster.begin_shutdown)
        if self.gateway is not None:
            lc.subscribe("gateway.accepting", SiloStage.ACTIVE,
                         on_stop=self.gateway.stop_accepting)

    def _build_cluster(self) -> ClusterRuntime | None:
        if self.options.membership is None and self._membership_table is None:
            return None
        cluster = ClusterRuntime(self, self._membership_table, self._membership_options,
                                 lease_stores=queue_lease_store)
        _locator: GrainLocator = cluster  # the core routes through it (mypy checks the fit)
        return cluster
