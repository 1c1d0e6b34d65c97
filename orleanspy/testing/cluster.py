"""TestCluster: silos and a connected client in the test's own process.

The silos listen on free loopback ports, so calls through ``cluster.client`` cross a real
socket and the msgpack wire format; calls through ``cluster.silo.get_grain`` stay in-process.

``TestCluster(grains)`` runs one silo. ``TestCluster(grains, silos=3)`` runs three silos of
one cluster: they share a ``MemoryMembershipTable``, one in-memory grain storage (a grain
re-activated on another silo reads the state written on the first), one reminder table, and
— when ``stream_providers`` is a function returning a silo's providers — the queues of
memory adapter factories, with failure detection fast enough for tests. The client knows
every silo's gateway. ``kill(silo)`` stops a silo as a crash would (no membership write, no
state written; the others declare it dead by probing), ``stop(silo)`` stops it gracefully,
``add_silo()`` starts one more, and ``wait_active(n)`` waits until every running silo sees
``n`` active silos.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, TypeVar, overload

from orleanspy._util.clock import Clock
from orleanspy.client import ClusterClient
from orleanspy.cluster.membership.memory import MemoryMembershipTable
from orleanspy.grains.grain_interface import GrainInterface
from orleanspy.grains.reference import GrainRef
from orleanspy.hosting.silo import Silo
from orleanspy.reminders.memory import MemoryReminderTable
from orleanspy.runtime.options import SiloOptions
from orleanspy.storage.memory import MemoryGrainStorage

__all__ = ["TestCluster"]

G = TypeVar("G")
Iface = TypeVar("Iface", bound=GrainInterface)

#: Failure detection of a multi-silo TestCluster (a killed silo is declared dead in ~1-2 s).
FAST_DETECTION: dict[str, Any] = {
    "probe_period": 0.3, "i_am_alive_period": 0.3, "table_refresh_period": 0.3,
}
#: How long ``wait_active`` and the start wait for the silos to agree.
AGREE_TIMEOUT = 20.0


class TestCluster:
    """Start with ``await cluster.start()`` (or ``async with``), stop with ``stop()``.

    Args:
        grains, modules: what every silo hosts.
        silos: how many silos (1: a lone silo without membership, as before).
        options: the silos' options (ports are picked; a multi-silo cluster gets
            ``membership="memory"`` and, unless given, fast failure detection). Without
            options the silos leave the garbage collector alone (``gc_freeze=False``): they
            share their process with the test runner.
        clock: the silos' clock (a lone silo only; a cluster's timeouts need real time).
        gateway: whether the silos listen for clients (and ``client`` is connected).
        stream_providers: a silo's stream providers — a dict for a lone silo, or a function
            returning a new dict for each silo (share one ``MemoryAdapterFactory`` between the
            calls so the silos share its queues).
        silo_kwargs: passed on to ``orleanspy.Silo``.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        grains: Iterable[type] = (),
        *,
        silos: int = 1,
        modules: Iterable[ModuleType | str] = (),
        options: SiloOptions | None = None,
        clock: Clock | None = None,
        gateway: bool = True,
        stream_providers: dict[str, Any] | Callable[[], dict[str, Any]] | None = None,
        **silo_kwargs: Any,
    ) -> None:
        if silos < 1:
            raise ValueError(f"TestCluster(silos={silos}): at least one silo")
        if silos > 1 and clock is not None:
            raise ValueError("TestCluster(silos>1) runs on the real clock: drop clock=")
        if silos > 1 and isinstance(stream_providers, dict):
            raise ValueError(
                "TestCluster(silos>1, stream_providers=...): pass a function returning a new "
                "dict of providers for each silo (providers belong to one silo)"
            )
        opts = options or SiloOptions()
        opts = dataclasses.replace(
            opts,
            gateway_port=0 if gateway else None,
            port=0 if opts.port == SiloOptions().port else opts.port,
            cluster_id=opts.cluster_id if options else "test",
            # a test cluster shares its process with the test runner: a freeze would walk the
            # runner's whole heap at every silo start (pass options to choose otherwise)
            gc_freeze=opts.gc_freeze if options else False,
        )
        self._grains = tuple(grains)
        self._modules = tuple(modules)
        self._clock = clock
        self._gateway = gateway
        self._providers = stream_providers
        self._kwargs = dict(silo_kwargs)
        self._clustered = silos > 1
        if self._clustered:
            fast = {k: v for k, v in FAST_DETECTION.items()
                    if options is None or getattr(options, k) == getattr(SiloOptions(), k)}
            opts = dataclasses.replace(opts, membership="memory", **fast)
            self.membership_table = MemoryMembershipTable()
            self._kwargs.setdefault("membership_table", self.membership_table)
            self._kwargs.setdefault("storage", {"default": MemoryGrainStorage()})
            self._kwargs.setdefault("reminder_table", MemoryReminderTable())
        self._options = opts
        self.silos: list[Silo] = [self._make_silo() for _ in range(silos)]
        self.client: ClusterClient = None  # type: ignore[assignment]

    @property
    def silo(self) -> Silo:
        """The first silo still in the cluster."""
        return self.silos[0]

    def _make_silo(self) -> Silo:
        providers = self._providers
        if callable(providers):
            providers = providers()
        return Silo(self._options, grains=self._grains, modules=self._modules,
                    clock=self._clock, stream_providers=providers, **self._kwargs)

    async def start(self) -> TestCluster:
        for silo in self.silos:
            await silo.start()
        if self._clustered:
            await self.wait_active(len(self.silos))
        if self._gateway:
            opts = self._options
            self.client = ClusterClient(
                gateways=[self._gateway_of(s) for s in self.silos],
                cluster_id=opts.cluster_id,
                secret=opts.secret,
            )
            await self.client.connect()
        return self

    @staticmethod
    def _gateway_of(silo: Silo) -> str:
        assert silo.gateway is not None
        return f"{silo.options.host}:{silo.gateway.port}"

    async def stop(self, silo: Silo | None = None) -> None:
        """Stop ``silo`` gracefully (returns once the others see it gone), or, without an
        argument, the client and every silo."""
        if silo is not None:
            await self._stop_one(silo)
            return
        if self.client is not None:
            await self.client.close()
        for running in reversed(self.silos):
            await running.stop()

    # -- changing the cluster ------------------------------------------------------------------
    async def add_silo(self) -> Silo:
        """Start one more silo; returns once every silo sees it active."""
        if not self._clustered:
            raise RuntimeError("add_silo(): this TestCluster has one silo (use silos=2 or more)")
        silo = self._make_silo()
        await silo.start()
        self.silos.append(silo)
        await self.wait_active(len(self.silos))
        return silo

    async def _stop_one(self, silo: Silo) -> None:
        self.silos.remove(silo)
        await silo.stop()
        if self._clustered and self.silos:
            await self.wait_active(len(self.silos))

    async def kill(self, silo: Silo) -> None:
        """Stop ``silo`` as a crash would: no membership write, no ``on_deactivate``, no state
        written; the others declare it dead by probing (returns once they have)."""
        if not self._clustered:
            raise RuntimeError("kill(): this TestCluster has one silo (use silos=2 or more)")
        self.silos.remove(silo)
        silo.declared_dead = True  # its activations go without writing anything
        await silo.cluster.abort()
        if silo.gateway is not None:
            await silo.gateway.abort()
        await silo.stop()
        if self.silos:
            await self.wait_active(len(self.silos))

    async def wait_active(self, n: int, timeout: float = AGREE_TIMEOUT) -> None:
        """Wait until every silo of this cluster sees exactly ``n`` active silos."""
        for silo in self.silos:
            await silo.cluster.wait_for_view(lambda s: len(s.active_silos) == n, timeout)

    @overload
    def get_grain(self, grain_class: type[G], key: Any) -> GrainRef[G]: ...
    @overload
    def get_grain(self, grain_class: Callable[[], Iface], key: Any) -> GrainRef[Iface]: ...
    @overload
    def get_grain(self, grain_class: str, key: Any) -> GrainRef[Any]: ...
    def get_grain(self, grain_class: Any, key: Any) -> Any:
        """An in-process reference through the first silo (no socket)."""
        return self.silo.get_grain(grain_class, key)

    async def __aenter__(self) -> TestCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
