"""TestCluster: a silo and a connected client in the test's own process.

The silo listens on a free loopback port, so calls through ``cluster.client`` cross a real
socket and the msgpack wire format; calls through ``cluster.silo.get_grain`` stay in-process.
A TestCluster runs one silo. Several silos in one process form a cluster by sharing one
``MemoryMembershipTable`` (``Silo(SiloOptions(membership="memory"), membership_table=table)``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from types import ModuleType
from typing import Any, TypeVar, overload

from orleanspy._util.clock import Clock
from orleanspy.client import ClusterClient
from orleanspy.grains.ref import GrainRef
from orleanspy.hosting.silo import Silo
from orleanspy.runtime.options import SiloOptions

__all__ = ["TestCluster"]

G = TypeVar("G")


class TestCluster:
    """Start with ``await cluster.start()`` (or ``async with``), stop with ``stop()``."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        grains: Iterable[type] = (),
        *,
        modules: Iterable[ModuleType | str] = (),
        options: SiloOptions | None = None,
        clock: Clock | None = None,
        gateway: bool = True,
        **silo_kwargs: Any,
    ) -> None:
        opts = options or SiloOptions()
        opts = dataclasses.replace(
            opts,
            gateway_port=0 if gateway else None,
            port=0 if opts.port == SiloOptions().port else opts.port,
            cluster_id=opts.cluster_id if options else "test",
        )
        self.silo = Silo(opts, grains=grains, modules=modules, clock=clock, **silo_kwargs)
        self._gateway = gateway
        self.client: ClusterClient = None  # type: ignore[assignment]

    async def start(self) -> TestCluster:
        await self.silo.start()
        if self._gateway:
            opts = self.silo.options
            self.client = ClusterClient(
                gateways=[f"{opts.host}:{self.silo.gateway.port}"],
                cluster_id=opts.cluster_id,
                secret=opts.secret,
            )
            await self.client.connect()
        return self

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
        await self.silo.stop()

    @overload
    def get_grain(self, grain_class: type[G], key: Any) -> GrainRef[G]: ...
    @overload
    def get_grain(self, grain_class: str, key: Any) -> GrainRef[Any]: ...
    def get_grain(self, grain_class: type[G] | str, key: Any) -> Any:
        """An in-process reference (no socket)."""
        return self.silo.get_grain(grain_class, key)

    async def __aenter__(self) -> TestCluster:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
