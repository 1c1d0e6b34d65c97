"""ActivationCollector: deactivates activations idle longer than their collection age."""

from __future__ import annotations

import asyncio

from orleanspy.runtime.activation import DeactivationReason
from orleanspy.runtime.catalog import Catalog
from orleanspy.runtime.host import SiloHost

__all__ = ["ActivationCollector"]


class ActivationCollector:
    """Every ``collection_quantum`` seconds, condemn idle activations.

    An activation is idle when nothing runs or waits, its keep-alive has passed and no
    keep-alive request completed for its class's collection age (``@collection_age`` or the
    silo's ``collection_age``). Timer ticks do not count as activity unless ``keep_alive``.
    """

    __slots__ = ("_catalog", "_silo", "_task", "collected")

    def __init__(self, silo: SiloHost, catalog: Catalog) -> None:
        self._silo = silo
        self._catalog = catalog
        self._task: asyncio.Task[None] | None = None
        self.collected = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        silo = self._silo
        while True:
            await silo.clock.sleep(silo.options.collection_quantum)
            try:
                self.collect_once()
            except Exception as exc:  # loop boundary: log and go on
                silo.log.error("activation_collection_failed", error=repr(exc))

    def collect_once(self, age: float | None = None) -> int:
        """Deactivate idle activations now; ``age`` overrides every class's age."""
        silo = self._silo
        now = silo.clock.monotonic()
        default_age = silo.options.collection_age
        condemned = 0
        for act in self._catalog:
            info = act.info
            if info.is_system_target:
                continue
            limit = age if age is not None else (info.collection_age or default_age)
            if act.is_idle(now, limit):
                act.deactivate(DeactivationReason.IDLE)
                condemned += 1
        if condemned:
            self.collected += condemned
            silo.log.debug("activations_collected", count=condemned)
        return condemned
