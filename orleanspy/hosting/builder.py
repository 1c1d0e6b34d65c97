"""The silo builder: every component of a silo, built in one place from its options.

``build_silo`` is the map of a silo. It builds each component once, in dependency order,
hands each the objects it uses through its constructor, puts every control request the
silo's transport answers in one table, and subscribes each component to the lifecycle in
one list. No component creates, replaces or looks up another.

What it builds, in order (and who takes it):

1. identity (address, name, logger), codec, grain registry, lifecycle, diagnostics, call
   statistics: the silo and every component that logs or reads the options.
2. grain storage (``SiloOptions.storage`` as ``default``, and any given) and the reminder
   table: the silo (persistent state) and the reminder service.
3. cluster silos only: the membership table, the view, the transport (with its handler
   table and its reroute), the grain directory, the placement director, the directory
   registrations, and the cluster runtime, which makes the membership service once its
   transport has bound the silo's address (port 0 picks one at start). The cluster runtime
   is the locator; a lone silo has the local locator.
4. catalog, dispatcher, references and activation collector.
5. the client gateway (``SiloOptions.gateway_port``), the reminder service, the operations
   handlers, Spark (given options or a shared manager; otherwise a ``SparkGrain`` makes one
   on first use) and the stream providers' grain classes.

The silo object exists before its parts: each part holds it as its host and reads it on use
(``runtime.host``), never while being built; the silo takes the parts in its constructor.

The operations server (``/healthz``, ``/metrics``, the dashboard) is not built here: it is
the silo host's (``silo.dashboard``, installed by ``silo.startup.run_silo``), an HTTP
application of the command-line host, which the framework may not import.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from functools import partial
from types import ModuleType
from typing import Any

from orleanspy._util.clock import Clock, SystemClock
from orleanspy._util.lifecycle import Lifecycle, SiloStage
from orleanspy._util.tasks import TaskSet
from orleanspy._util.urls import parse_backend_url
from orleanspy.cluster.config import membership_options_of
from orleanspy.cluster.directory import GrainDirectory
from orleanspy.cluster.membership.memory import MemoryMembershipTable
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.cluster.membership.redis import RedisMembershipTable
from orleanspy.cluster.membership.service import MembershipService
from orleanspy.cluster.membership.sqlite import SqliteMembershipTable
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.cluster.ops import SiloOperations
from orleanspy.cluster.placement import PlacementDirector
from orleanspy.cluster.registrations import DirectoryRegistrations
from orleanspy.cluster.runtime import ClusterRuntime
from orleanspy.cluster.transport import Handler, SiloTransport
from orleanspy.cluster.view import ClusterView
from orleanspy.diagnostics import Diagnostics
from orleanspy.grains.proxy import References
from orleanspy.ids import SiloAddress
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.message import Message
from orleanspy.messaging.types import TypePolicy
from orleanspy.reminders.base import ReminderTable
from orleanspy.reminders.memory import MemoryReminderTable
from orleanspy.reminders.postgres import PostgresReminderTable
from orleanspy.reminders.redis import RedisReminderTable
from orleanspy.reminders.service import ReminderService
from orleanspy.reminders.sqlite import SqliteReminderTable
from orleanspy.runtime.call_stats import CallStatistics
from orleanspy.runtime.catalog import Catalog
from orleanspy.runtime.collector import ActivationCollector
from orleanspy.runtime.dispatcher import Dispatcher
from orleanspy.runtime.gateway import Gateway
from orleanspy.runtime.grain_classes import grain_classes_in, register_grain_class
from orleanspy.runtime.identity import SiloIdentity, new_generation
from orleanspy.runtime.locator import GrainLocator, LocalLocator
from orleanspy.runtime.observer_hub import ClientObserverHub
from orleanspy.runtime.options import BACKENDS_OF, SiloOptions
from orleanspy.runtime.silo import (
    COLLECTOR,
    GATEWAY,
    REMINDERS,
    STREAMS_PREFIX,
    Silo,
    SiloParts,
)
from orleanspy.spark.lake import check_lake
from orleanspy.spark.options import SparkOptions
from orleanspy.spark.session import SparkSessionManager, bind_spark
from orleanspy.storage.base import GrainStorage
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.storage.postgres import PostgresGrainStorage
from orleanspy.storage.redis import RedisGrainStorage
from orleanspy.storage.sqlite import SqliteGrainStorage
from orleanspy.streams.admin import StreamOperations
from orleanspy.streams.client_consumer import ClientStreamConsumer
from orleanspy.streams.leases import MemoryQueueLeaseStore, QueueLeaseStore, SqliteQueueLeaseStore
from orleanspy.streams.postgres_leases import PostgresQueueLeaseStore
from orleanspy.streams.pubsub import PubSubRendezvous
from orleanspy.streams.pulling.agent import PullingAgent
from orleanspy.streams.redis_leases import RedisQueueLeaseStore

__all__ = [
    "GATEWAY_LISTEN", "build_silo", "open_grain_storage", "open_membership_table",
    "open_reminder_table", "queue_lease_store",
]

#: Stage at which the gateway listens (it takes clients only once the silo is active):
#: with every other port, before anything starts, so that a taken port fails the start
#: at once, and before the cluster joins, so that the membership entry carries its port.
GATEWAY_LISTEN = SiloStage.LISTEN

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


def open_membership_table(url: str, cluster_id: str, data_dir: str) -> MembershipTable:
    """The table of a ``membership`` URL: ``memory``, ``sqlite:PATH`` (relative paths
    resolve against ``data_dir``; the folder is created), ``redis://HOST:PORT/DB?prefix=P``
    or ``postgresql://HOST:PORT/DB?schema=S``."""
    parsed = parse_backend_url(url, key="SiloOptions.membership", data_dir=data_dir,
                               allow=frozenset({"memory", "sqlite", "redis", "postgres"}),
                               example="sqlite:membership.db")
    if parsed.scheme == "memory":
        return MemoryMembershipTable()
    if parsed.scheme == "redis":
        return RedisMembershipTable(parsed.text, cluster_id=cluster_id)
    if parsed.scheme == "postgres":
        return PostgresMembershipTable(parsed.text, cluster_id=cluster_id)
    os.makedirs(os.path.dirname(parsed.path) or ".", exist_ok=True)
    return SqliteMembershipTable(parsed.path, cluster_id=cluster_id)


def queue_lease_store(table: MembershipTable,
                      clock: Callable[[], float] = time.time) -> QueueLeaseStore:
    """The stream-queue lease store kept with a membership table: table ``stream_leases``
    of the SQLite file (a new connection; the caller closes it), or the one in-memory store
    the silos sharing an in-memory table share (it lives on the table). ``clock`` is the
    wall clock lease expiries are read on (the silo's)."""
    if isinstance(table, SqliteMembershipTable):
        return SqliteQueueLeaseStore(table.path, table.cluster_id, clock=clock)
    if isinstance(table, RedisMembershipTable):
        return RedisQueueLeaseStore(table.url, table.cluster_id, clock=clock)
    if isinstance(table, PostgresMembershipTable):
        return PostgresQueueLeaseStore(table.url, table.cluster_id, clock=clock)
    if isinstance(table, MemoryMembershipTable):
        store = table.shared.get("stream_leases")
        if store is None:
            store = table.shared["stream_leases"] = MemoryQueueLeaseStore(clock)
        assert isinstance(store, QueueLeaseStore)
        return store
    raise TypeError(f"no stream-queue lease store for membership table {table!r}")


def build_silo(
    silo: Silo,
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
    spark: SparkOptions | SparkSessionManager | None = None,
) -> SiloParts:
    """Build the parts of ``silo`` (the object that takes them: each part's host).

    Arguments as ``orleanspy.Silo``; ``membership_table`` or ``options.membership`` makes
    a cluster silo.
    """
    # 1. Who the silo is, and what it hosts.
    opts = options if options is not None else SiloOptions()
    opts.check_listening()
    clock = clock or SystemClock()
    identity = SiloIdentity(SiloAddress(opts.advertised_host, opts.port, new_generation()),
                            opts.cluster_id)
    codec = Codec(silo.reference_factory, policy=TypePolicy())
    codec.traceback_paths = opts.traceback_paths
    registry: dict[str, Any] = {}
    providers = dict(stream_providers or {})
    classes = [*grains, *(cls for module in modules for cls in grain_classes_in(module)),
               ClientObserverHub]  # (clients' observers: grains call them through it)
    if providers:
        # Known on every silo, agent or not: a rendezvous here reaches agents elsewhere.
        classes += [PubSubRendezvous, PullingAgent, ClientStreamConsumer]
    for cls in classes:
        register_grain_class(registry, codec.policy, cls)
    lifecycle = Lifecycle(identity.log)
    diagnostics = Diagnostics()
    call_statistics = CallStatistics(opts.call_statistics)

    # 2. Storage.
    stores: dict[str, GrainStorage] = dict(storage or {})
    if "default" not in stores:
        stores["default"] = open_grain_storage(opts.storage, opts.data_dir)
    reminder_table = reminder_table or open_reminder_table(opts.reminders, opts.data_dir)

    # 3. The cluster side; the transport's handler table is filled in step 5.
    handlers: dict[str, Handler] = {}
    cluster: ClusterRuntime | None = None
    if opts.membership is not None or membership_table is not None:
        owns_table = membership_table is None
        table = membership_table or open_membership_table(
            opts.membership or "memory", opts.cluster_id, opts.data_dir)
        view = ClusterView(silo, identity, table)

        # The transport, the cluster runtime and the dispatcher use each other: the transport
        # takes these functions, which reach the runtime and the dispatcher built below.
        def deliver(msg: Message, sender: SiloAddress | None) -> None:
            runtime.deliver_remote(msg, sender)

        def reroute(msg: Message, to: SiloAddress) -> bool:
            return runtime.reroute(msg, to)

        def cancel(msg: Message) -> None:
            dispatcher.cancel(msg)

        transport = SiloTransport(
            identity.address, codec, identity.log, cluster_id=opts.cluster_id,
            secret=opts.secret, key=None, max_frame_size=opts.max_frame_size,
            default_timeout=opts.response_timeout, deliver=deliver, is_dead=view.is_dead,
            clock=clock, verify_peer=view.verify_peer, handshake_timeout=opts.handshake_timeout,
            max_pending_handshakes=opts.max_pending_handshakes, reroute=reroute,
            handlers=handlers, cancel=cancel,
        )
        directory = GrainDirectory(identity, transport.request, view.valid)
        placement = PlacementDirector(identity)
        tasks = TaskSet()
        registrations = DirectoryRegistrations(silo, identity, directory, tasks)
        detection = membership_options or membership_options_of(opts)

        def make_membership(me: SiloAddress) -> MembershipService:
            # Called by the runtime's start, once the transport has bound ``me``.
            return MembershipService(
                table, me, transport, gossiper=transport, options=detection, clock=clock,
                silo_name=identity.name, host_name=socket.gethostname(),
                gateway_port=gateway.port if gateway is not None else None,
                on_declared_dead=runtime.declared_dead, diagnostics=diagnostics,
            )

        runtime = cluster = ClusterRuntime(
            silo, identity, transport=transport, directory=directory, placement=placement,
            view=view, registrations=registrations, tasks=tasks, table=table,
            owns_table=owns_table, make_membership=make_membership,
            max_forwards=opts.max_forward_count,
            lease_stores=partial(queue_lease_store, clock=clock.time),
        )
    locator: GrainLocator = cluster if cluster is not None else LocalLocator(silo)

    # 4. Activations and calls.
    catalog = Catalog(silo, registry)
    dispatcher = Dispatcher(silo, catalog, locator, codec, clock=clock,
                            default_timeout=opts.response_timeout)
    references = References(dispatcher)
    collector = ActivationCollector(silo, catalog)

    # 5. Services, and the control requests the transport answers.
    gateway = (Gateway(silo, options=opts, clock=clock, log=identity.log)
               if opts.gateway_port is not None else None)
    operations: SiloOperations | None = None
    if cluster is None:
        reminders = ReminderService(silo, dispatcher, reminder_table)
    else:
        # Each reminder is served by the owner of its grain on the ring (see
        # reminders/service.py); the others tell it when they change one.
        owner = cluster
        reminders = ReminderService(
            silo, dispatcher, reminder_table, owns=owner.owns,
            notify=lambda gid: owner.tell_owner("reminder_sync", gid),
            refresh_period=opts.table_refresh_period,
        )
        operations = SiloOperations(silo, cluster)
        stream_ops = StreamOperations(silo, cluster)
        handlers.update({
            "dir": cluster.directory.handle_wire,
            "probe": operations.handle_probe,
            "probe_indirect": operations.probe_indirect,
            "gossip": operations.on_gossip,
            "load": operations.on_load,
            "cache": operations.on_cache,
            "status": operations.status,
            "streams": operations.streams_status,
            "stream_subscriptions": stream_ops.subscriptions,  # operator commands (tools)
            "stream_unsubscribe": stream_ops.unsubscribe,
            "stream_agents": stream_ops.agents,
            "locate": operations.locate,
            "grain": operations.grain,  # the grain page (tools, the dashboard)
            "calls": operations.call_statistics,
            "reminders": operations.reminders_status,  # what a silo fires (tools)
            "reminder_sync": reminders.sync,  # a reminder of a grain this silo owns changed
        })
        cluster.add_view_listener(reminders.membership_changed)
    for name, provider in providers.items():  # each learns its name, host and parts
        provider.bind(
            name, silo, clock=clock, diagnostics=diagnostics, silo_name=identity.name,
            cluster=cluster,
        )
    manager: SparkSessionManager | None = None
    if spark is not None:
        manager = (spark if isinstance(spark, SparkSessionManager)
                   else SparkSessionManager(spark, clock=clock))
        in_cluster = membership_table is not None or opts.membership is not None
        check_lake(manager.options.lake, "cluster" if in_cluster else None)

    # 6. The lifecycle. Start runs the stages upwards: the gateway listens (refusing
    # clients) → storage opens → transport listens and membership joins (JOINING) →
    # reminders → stream providers → collector → membership ACTIVE → the gateway takes
    # clients. Nothing a client or another silo can act on happens before every component
    # has started, so a failed start leaves no ACTIVE row, no queue lease and no request
    # served. Stop runs them downwards, and one stage's steps in reverse: the gateway stops
    # accepting, membership says SHUTTING_DOWN, the collector stops → stream providers →
    # reminders → every activation deactivates → the gateway closes → the cluster is left
    # (STOPPED) → storage closes.
    async def open_storage() -> None:
        for store in stores.values():
            await store.open()
        await reminder_table.open()

    async def close_storage() -> None:
        for store in stores.values():
            await store.close()
        await reminder_table.close()

    lc = lifecycle
    lc.subscribe("storage", SiloStage.STORAGE, on_start=open_storage, on_stop=close_storage)
    if manager is not None:  # stops at STORAGE, before storage closes and after every grain
        bind_spark(lc, manager, owned=not isinstance(spark, SparkSessionManager))
    if gateway is not None:
        gw = gateway

        async def gateway_shut() -> None:  # also after a failed start: both idempotent
            await gw.stop_accepting()
            await gw.close()

        lc.subscribe(GATEWAY, GATEWAY_LISTEN, on_start=gw.start, on_stop=gateway_shut,
                     statistics=lambda: (gw.connection_count, gw.request_count))
        lc.subscribe("gateway.connections", SiloStage.GATEWAY, on_stop=gw.close)
    if cluster is not None:
        member = cluster
        joined = False

        async def join() -> None:
            nonlocal joined
            await member.start()  # cleans up after itself when it fails
            joined = True

        async def leave() -> None:
            if joined:
                await member.stop()

        lc.subscribe("cluster", SiloStage.CLUSTER, on_start=join, on_stop=leave)
    lc.subscribe("grains", SiloStage.GRAINS, on_stop=silo.deactivate_all)
    lc.subscribe(REMINDERS, SiloStage.SERVICES, on_start=reminders.start,
                 on_stop=reminders.stop, statistics=lambda: reminders.fired)
    for name, provider in providers.items():
        lc.subscribe(f"{STREAMS_PREFIX}{name}", SiloStage.STREAMS, on_start=provider.start,
                     on_stop=provider.stop, statistics=provider.statistics)
    async def start_collector() -> None:
        collector.start()

    lc.subscribe(COLLECTOR, SiloStage.ACTIVE, on_start=start_collector,
                 on_stop=collector.stop, statistics=lambda: collector.collected)
    if cluster is not None:  # after every component: the row reads ACTIVE
        lc.subscribe("cluster.active", SiloStage.ACTIVE, on_start=cluster.become_active,
                     on_stop=cluster.begin_shutdown)
        for name, provider in providers.items():  # queue leases: only an ACTIVE silo's
            take = getattr(provider, "take_queues", None)
            if take is not None:
                lc.subscribe(f"{STREAMS_PREFIX}{name}.queues", SiloStage.ACTIVE, on_start=take)
    if gateway is not None:  # last: clients are served once the silo is active
        lc.subscribe("gateway.accepting", SiloStage.ACTIVE, on_start=gateway.open,
                     on_stop=gateway.stop_accepting)

    return SiloParts(
        options=opts, clock=clock, identity=identity, codec=codec, registry=registry,
        storage=dict(stores), stream_providers=providers, lifecycle=lifecycle,
        diagnostics=diagnostics, call_statistics=call_statistics, locator=locator,
        catalog=catalog, dispatcher=dispatcher, collector=collector, references=references,
        cluster=cluster, fence=cluster.fenced if cluster is not None else None,
        reminders=reminders, gateway=gateway, operations=operations,
    )
