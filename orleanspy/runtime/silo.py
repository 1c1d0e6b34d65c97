"""Silo core: hosts activations and system targets, routes calls, runs the lifecycle.

This is the runtime layer's silo. It builds nothing: ``orleanspy.hosting.builder`` builds
every component from the options (storage, membership, transport, directory, catalog,
dispatcher, gateway, reminders, streams) in dependency order, subscribes each to
``lifecycle``, and hands them to the silo at construction (``SiloParts``). The components
see the silo as ``runtime.host.SiloHost`` (its name, options, clock, logger, loop and
status) and activations as ``runtime.activation.ActivationHost``; none of their modules
imports this one.

Start runs the lifecycle's stages upwards; the graceful stop runs them downwards: stop
accepting and tell the cluster SHUTTING_DOWN (ACTIVE) → application → streams → services →
finish running requests and deactivate every activation (GRAINS; each runs on_deactivate,
writes changed state and leaves the directory) → gateway closes → the cluster is left →
storage closes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self, TypeVar, overload

from orleanspy import tracing
from orleanspy._util import gc_freeze
from orleanspy._util.clock import Clock
from orleanspy._util.lifecycle import Lifecycle
from orleanspy.diagnostics import Diagnostics, SiloStatusChanged
from orleanspy.errors import ConfigurationError
from orleanspy.grains.grain import Grain
from orleanspy.grains.grain_interface import GrainInterface
from orleanspy.grains.interface import GrainClassInfo, class_info
from orleanspy.grains.proxy import References, make_reference
from orleanspy.grains.reference import GrainRef
from orleanspy.grains.state import PersistentState, StateSpec, StateStorage
from orleanspy.ids import GrainId, SiloAddress, normalize_key
from orleanspy.messaging.codec import Codec
from orleanspy.runtime.activation import Activation, ActivationState, DeactivationReason
from orleanspy.runtime.call_filters import CallFilter, CallFilters
from orleanspy.runtime.call_stats import CallStatistics
from orleanspy.runtime.catalog import Catalog
from orleanspy.runtime.collector import ActivationCollector
from orleanspy.runtime.dispatcher import Dispatcher
from orleanspy.runtime.grain_classes import register_grain_class
from orleanspy.runtime.identity import SiloIdentity
from orleanspy.runtime.locator import GrainLocator
from orleanspy.runtime.options import SiloOptions
from orleanspy.runtime.system_target import SystemTarget
from orleanspy.runtime.tracing_filters import TracingFilters

if TYPE_CHECKING:
    from types import TracebackType

__all__ = [
    "COLLECTOR", "GATEWAY", "REMINDERS", "STREAMS_PREFIX", "Silo", "SiloParts", "SiloStatistics",
]

G = TypeVar("G")
Iface = TypeVar("Iface", bound=GrainInterface)

#: Lifecycle participants whose statistics are ``SiloStatistics`` fields (the rest are its
#: ``extensions``): the collector (collected), the gateway (connections, requests), the reminder
#: service (fired) and each stream provider (``streams.<name>``).
COLLECTOR = "collector"
GATEWAY = "gateway"
REMINDERS = "reminders"
STREAMS_PREFIX = "streams."
LAG_INTERVAL = 0.5  # seconds between event-loop lag samples


@dataclass(frozen=True, slots=True)
class SiloStatistics:
    name: str
    cluster_id: str
    status: str
    uptime: float
    activations: int
    activations_by_type: dict[str, int]
    gateway_connections: int
    #: requests of gateway clients this silo is not done with (runtime/gateway.py)
    gateway_requests: int
    collected: int
    reminders_fired: int
    streams: dict[str, list[Any]]
    extensions: dict[str, Any] = field(default_factory=dict)  # e.g. "spark": SparkStatistics


@dataclass(frozen=True, slots=True)
class SiloParts:
    """The components a silo is made of: ``orleanspy.hosting.builder`` builds them, in
    dependency order, and the silo takes them at construction (a lone silo has no
    cluster, fence or operations; a silo without a gateway port no gateway)."""

    options: SiloOptions
    clock: Clock
    identity: SiloIdentity
    codec: Codec
    registry: dict[str, GrainClassInfo]
    storage: dict[str, StateStorage]
    stream_providers: dict[str, Any]
    lifecycle: Lifecycle
    diagnostics: Diagnostics
    call_statistics: CallStatistics
    locator: GrainLocator
    catalog: Catalog
    dispatcher: Dispatcher
    collector: ActivationCollector
    references: References
    cluster: Any = None
    fence: Callable[[], bool] | None = None
    reminders: Any = None
    gateway: Any = None
    operations: Any = None


class Silo:
    """A process (or part of one) that hosts grains: the core the builder composes.

    ``orleanspy.Silo`` (``orleanspy.hosting.silo``) is the public class; its constructor
    builds the parts from options (``orleanspy.hosting.builder.build_silo``).
    """

    def __init__(self, parts: SiloParts) -> None:
        self.options: SiloOptions = parts.options
        self.clock = parts.clock
        self.identity = parts.identity
        self.codec = parts.codec
        self.registry = parts.registry
        self.storage = parts.storage
        self.stream_providers = parts.stream_providers
        #: Components join the silo's start and stop here (``orleanspy._util.lifecycle``).
        self.lifecycle = parts.lifecycle
        #: Runtime events (``orleanspy.diagnostics``); free while nobody listens.
        self.diagnostics = parts.diagnostics
        #: Each grain method's calls, errors and latency (``runtime.call_stats``).
        self.call_statistics = parts.call_statistics
        #: The cluster side (``orleanspy.cluster.runtime.ClusterRuntime``), or None for a
        #: lone silo.
        self.cluster: Any = parts.cluster
        #: True while this silo must not serve requests from outside (a cluster silo that
        #: cannot confirm its membership); None for a lone silo.
        self.fence = parts.fence
        #: Where grains live: the cluster runtime, or every grain here.
        self.locator = parts.locator
        self.catalog = parts.catalog
        self.dispatcher = parts.dispatcher
        #: Incoming and outgoing call filters (``runtime.call_filters``).
        self.call_filters = CallFilters()
        if any(CallFilters.grain_outgoing_class(info.cls) for info in self.registry.values()):
            self.dispatcher.outgoing = ()
        tracer = tracing.tracer()  # spans when the process has a tracer provider
        if tracer is not None:
            spans = TracingFilters(tracer, self.identity.name)
            self.call_filters.add(spans.incoming)
            self.call_filters.add(spans.outgoing, outgoing=True)
            self.dispatcher.outgoing = self.call_filters.outgoing()
        self._references = parts.references
        self.collector = parts.collector
        #: The reminder service (``orleanspy.reminders.service.ReminderService``).
        self.reminders: Any = parts.reminders
        #: The client gateway (``orleanspy.runtime.gateway.Gateway``), or None.
        self.gateway: Any = parts.gateway
        #: The control requests of a cluster silo (``orleanspy.cluster.ops``), or None.
        self.operations: Any = parts.operations
        self.declared_dead = False
        self.stopping = False
        self.started = False
        #: True from the end of a successful start until the stop begins.
        self.active = False
        self._started_at = 0.0
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopped: asyncio.Event | None = None
        self._gc_frozen = False  # this silo holds the process's gc.freeze()
        #: How late the event loop last ran a timer, in seconds (sampled every LAG_INTERVAL)
        self.loop_lag = 0.0
        self._lag_timer: asyncio.TimerHandle | None = None

    @property
    def address(self) -> SiloAddress:
        """This silo's address (a cluster silo's port is known once its transport listens)."""
        return self.identity.address

    @property
    def name(self) -> str:
        """``host:port``."""
        return self.identity.name

    @property
    def log(self) -> Any:
        return self.identity.log

    # -- registration ---------------------------------------------------------------------
    def register_grain_class(self, cls: type) -> None:
        register_grain_class(self.registry, self.codec.policy, cls)
        if CallFilters.grain_outgoing_class(cls) and self.dispatcher.outgoing is None:
            self.dispatcher.outgoing = self.call_filters.outgoing()

    def add_call_filter(self, fn: CallFilter, *, outgoing: bool = False) -> None:
        """Register a silo call filter (``runtime.call_filters``), before the silo starts:
        incoming filters run in the callee's turn, outgoing ones around calls made here."""
        self.call_filters.add(fn, outgoing=outgoing)
        if outgoing:
            self.dispatcher.outgoing = self.call_filters.outgoing()

    def add_system_target(self, target: SystemTarget, key: Any) -> Any:
        """Host an explicitly created system target; returns a reference to it."""
        cls = type(target)
        self.register_grain_class(cls)
        info = class_info(cls)
        grain_id = GrainId(info.type_name, normalize_key(key))
        act = Activation(self, grain_id, info)
        target._orleanspy_activation = act
        act.grain = target
        act.state = ActivationState.VALID
        self.catalog.add(act)
        return make_reference(self.dispatcher, cls, key)

    def get_system_target(self, cls: type[G], key: Any) -> GrainRef[G]:
        return make_reference(self.dispatcher, cls, key)

    # -- the in-process client --------------------------------------------------------------
    @overload
    def get_grain(self, grain_class: type[G], key: Any) -> GrainRef[G]: ...
    @overload
    def get_grain(self, grain_class: Callable[[], Iface], key: Any) -> GrainRef[Iface]: ...
    @overload
    def get_grain(self, grain_class: str, key: Any) -> GrainRef[Any]: ...
    def get_grain(self, grain_class: Any, key: Any) -> Any:
        """A reference to a grain, callable from this process."""
        return self._references.get(grain_class, key)

    # Plain functions returning the dispatcher's coroutine: one coroutine per call, not two.
    def call(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
             kwargs: dict[str, Any] | None, timeout: float | None) -> Coroutine[Any, Any, Any]:
        """Call a grain. (References made here call the dispatcher itself: one frame fewer.)"""
        return self.dispatcher.call(grain_id, method, args, kwargs, timeout)

    def send_one_way(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
                     kwargs: dict[str, Any] | None) -> Coroutine[Any, Any, None]:
        """Send a one-way call (what references use)."""
        return self.dispatcher.send_one_way(grain_id, method, args, kwargs)

    def get_stream_provider(self, name: str) -> Any:
        """The stream provider ``name`` of this silo (``.get_stream(namespace, key)``)."""
        try:
            return self.stream_providers[name]
        except KeyError:
            raise KeyError(
                f"no stream provider {name!r} on this silo (configured: "
                f"{sorted(self.stream_providers) or 'none'}); add it to the silo's "
                f"orleanspy.toml as a [streams.{name}] table, or to "
                "Silo(stream_providers=...) in code"
            ) from None

    def reference_factory(self, cls_name: str, grain_id: GrainId) -> Any:
        """The grain reference a decoded value names (the codec's reference factory)."""
        info = self.registry.get(grain_id.type_name)
        if info is not None:
            return make_reference(self.dispatcher, info.cls, grain_id.key, grain_id)
        cls = self.codec.policy.resolve(cls_name) if cls_name else None
        if cls is not None and issubclass(cls, Grain):
            return make_reference(self.dispatcher, cls, grain_id.key, grain_id)
        if info is not None:
            return make_reference(self.dispatcher, info.cls, grain_id.key, grain_id)
        return make_reference(self.dispatcher, grain_id.type_name, grain_id.key, grain_id)

    # -- state ----------------------------------------------------------------------------
    def make_state(self, spec: StateSpec[Any], grain_id: GrainId) -> PersistentState[Any]:
        storage = self.storage.get(spec.storage)
        if storage is None and spec.storage == "pubsub":
            storage = self.storage.get("default")
        if storage is None:
            raise ConfigurationError(
                f"grain {grain_id} declares state {spec.name!r} in storage {spec.storage!r}, "
                f"but the silo has only {sorted(self.storage) or 'none'}; configure it"
            )
        return PersistentState(spec.factory, spec.name or spec.attr, storage, grain_id, self.codec,
                               stream_tokens=spec.stream_tokens)

    def log_grain_error(self, event: str, **fields: Any) -> None:
        """Log an exception a grain method raised, at ``options.grain_error_log_level``."""
        getattr(self.log, self.options.grain_error_log_level)(event, **fields)

    def request_stop(self) -> None:
        """Start a graceful stop without waiting for it (``wait_stopped`` waits)."""
        if self.stopping or not self.started:
            return
        self.track(asyncio.get_running_loop().create_task(self.stop()))

    def _sample_lag(self, due: float) -> None:
        """A timer every LAG_INTERVAL: how late the loop ran it is the event loop's lag."""
        now = self.loop.time()
        self.loop_lag = max(0.0, now - due)
        self._lag_timer = self.loop.call_at(now + LAG_INTERVAL, self._sample_lag,
                                            now + LAG_INTERVAL)

    def track(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Run the lifecycle's stages upwards; a failed start stops what had started."""
        if self.started:
            raise RuntimeError(f"silo {self.name} was already started")
        self.started = True
        self.loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._status("joining")
        try:
            await self.lifecycle.start()
        except BaseException:
            self.stopping = True
            self._stopped.set()
            self._status("stopped")
            raise
        self._started_at = self.clock.monotonic()
        if self.options.gc_freeze:
            gc_freeze.acquire()
            self._gc_frozen = True
        self.active = True
        self._status("active")
        self._lag_timer = self.loop.call_later(LAG_INTERVAL, self._sample_lag,
                                               self.loop.time() + LAG_INTERVAL)
        self.log.info(
            "silo_started",
            gateway=self.gateway.address if self.gateway else None,
            grain_types=sorted(t for t, i in self.registry.items() if not i.runtime),
            storage=self.options.storage,
            address=str(self.address) if self.cluster is not None else None,
        )

    async def stop(self) -> None:
        """Graceful shutdown (the lifecycle's stages downwards); idempotent."""
        if self.stopping or not self.started:
            if self._stopped is not None:
                await self._stopped.wait()
            return
        self.stopping = True
        self.active = False
        assert self._stopped is not None
        if self._lag_timer is not None:
            self._lag_timer.cancel()
            self._lag_timer = None
        self.log.info("silo_stopping", activations=len(self.catalog))
        self._status("shutting_down")
        try:
            await self.lifecycle.stop()
        finally:
            if self._gc_frozen:
                self._gc_frozen = False
                gc_freeze.release()
            self._stopped.set()
            self.log.info("silo_stopped")
            self._status("stopped")

    def _status(self, status: str) -> None:
        """Tell listeners this silo's own status: joining, active, shutting_down, stopped
        (before ``start`` it is created, and nobody can listen yet)."""
        diag = self.diagnostics
        if diag.listening:
            diag.emit(SiloStatusChanged(silo=self.name, subject=self.name, status=status))

    async def _drain(self, deadline: float) -> None:
        """Let running and queued requests finish (the gateway no longer accepts): wait for
        the running turns, turn by turn, until nothing runs or waits, or the deadline."""
        me = asyncio.current_task()
        while self.clock.monotonic() < deadline:
            busy = [a for a in self.catalog if a.running or a.waiting or a.blocked]
            if not busy:
                return
            pending: list[asyncio.Future[Any]] = [t for a in busy for t in a.turn_waits()]
            pending.extend(t for t in self._tasks if t is not me)
            try:
                async with self.clock.timeout_at(deadline):
                    if pending:
                        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    else:  # a turn its caller carries, or one being admitted: let the
                        # loop move it on (real time: it moves on the loop, not a test clock)
                        await asyncio.sleep(0.01)
            except TimeoutError:
                return

    def stop_declared_dead(self) -> None:
        """The cluster declared this silo dead: stop at once — nothing is drained, no
        ``on_deactivate`` runs and no state is written (the grains live elsewhere now)."""
        self.declared_dead = True
        self.request_stop()

    async def deactivate_all(self) -> None:
        dead = self.declared_dead
        if not dead:
            await self._drain(self.clock.monotonic() + self.options.shutdown_timeout / 2)
        acts = list(self.catalog)
        reason = DeactivationReason.DECLARED_DEAD if dead else DeactivationReason.SHUTTING_DOWN
        for act in acts:
            act.deactivate(reason)
        waits = [act.wait_deactivated() for act in acts]
        # The stop may itself run in a tracked task (``request_stop``): never wait for it.
        me = asyncio.current_task()
        try:
            async with self.clock.timeout(1.0 if dead else self.options.shutdown_timeout):
                await asyncio.gather(*waits)
        except TimeoutError:
            stuck = [a.name for a in acts if a.state is not ActivationState.INVALID]
            self.log.error("silo_shutdown_timeout", stuck=stuck[:20], count=len(stuck))
            for act in acts:
                act.cancel_turns()
            for task in list(self._tasks):  # hanging on_activate / on_deactivate
                if task is not me:
                    task.cancel()
        # Cancelled turns start their teardowns (on_deactivate, state flush) from their done
        # callbacks: wait for those too, bounded, before storage closes.
        deadline = self.clock.monotonic() + (1.0 if dead else self.options.shutdown_timeout)
        while True:
            turns = [t for act in acts for t in act.turn_waits()]
            pending = [*turns, *(t for t in self._tasks if t is not me)]
            # a turn its caller's task carries ends there: look again shortly
            carried = not pending and any(act.running for act in acts)
            if not pending and not carried:
                break
            if self.clock.monotonic() >= deadline:
                self.log.error("silo_shutdown_tasks_abandoned",
                               count=len(pending) or sum(len(a.running) for a in acts))
                break
            try:
                async with self.clock.timeout_at(deadline):
                    if pending:
                        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    else:  # (real time: a carried turn moves on the loop, not a test clock)
                        await asyncio.sleep(0.01)
            except TimeoutError:
                pass

    async def wait_stopped(self) -> None:
        if self._stopped is None:
            raise RuntimeError("the silo was never started")
        await self._stopped.wait()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- observability --------------------------------------------------------------------
    def statistics(self) -> SiloStatistics:
        by_type: dict[str, int] = {}
        for act in self.catalog:
            by_type[act.grain_id.type_name] = by_type.get(act.grain_id.type_name, 0) + 1
        # Components report through the lifecycle; the ones with a field of their own are
        # taken out, the rest (Spark, application services) are the extensions.
        figures = self.lifecycle.statistics()
        streams = {
            name: figures.pop(key)
            for name in self.stream_providers
            if (key := f"{STREAMS_PREFIX}{name}") in figures
        }
        connections, requests = figures.pop(GATEWAY, (0, 0))
        return SiloStatistics(
            name=self.name,
            cluster_id=self.options.cluster_id,
            status="stopping" if self.stopping else ("active" if self.started else "created"),
            uptime=self.clock.monotonic() - self._started_at if self.started else 0.0,
            activations=len(self.catalog),
            activations_by_type=by_type,
            gateway_connections=connections,
            gateway_requests=requests,
            collected=figures.pop(COLLECTOR, 0),
            reminders_fired=figures.pop(REMINDERS, 0),
            streams=streams,
            extensions=figures,
        )
