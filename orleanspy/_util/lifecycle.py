"""Lifecycle: ordered start and stop stages that a silo's components join.

A component subscribes a start and a stop at a stage; ``start()`` runs the stages in
ascending order and ``stop()`` in descending order, so what started first stops last. A
component that must act at two moments (a gateway that stops accepting early and closes its
connections late) subscribes twice. A component created lazily keeps itself on the
lifecycle under its type (``set_component``/``component``) so that its users find the one
instance of their silo without a module-level registry. A start that fails stops, in
reverse, everything that had started, then raises; a stop that fails is logged and the
remaining stops still run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

__all__ = ["Lifecycle", "LifecycleObserver", "SiloStage"]

Step = Callable[[], Awaitable[None]]
C = TypeVar("C")


class SiloStage(IntEnum):
    """The silo's stages, in start order (stop runs them backwards)."""

    LISTEN = 500
    """Every port the silo was asked for is bound (client gateway, operations endpoints):
    a port that is taken fails the start before anything else has started. A listener
    bound here serves nothing a client or peer could act on until ``ACTIVE``."""
    STORAGE = 1000
    """Grain storage and the reminder table open; they close last."""
    CLUSTER = 2000
    """Silo-to-silo transport listens and membership joins; on stop, the silo leaves."""
    DIRECTORY = 3000
    """The grain directory follows membership."""
    GATEWAY = 4000
    """On stop, the client gateway's connections close once answered (the gateway listens
    from ``LISTEN``, so that its port goes into the silo's membership row)."""
    GRAINS = 5000
    """On stop: running requests finish and every activation deactivates."""
    SERVICES = 6000
    """Grain services such as reminders."""
    STREAMS = 7000
    """Stream providers and their pulling agents."""
    APPLICATION = 8000
    """Extensions and application services (Spark)."""
    ACTIVE = 9000
    """Every component has started: idle collection runs, the silo's membership row reads
    ACTIVE (others place work and lease stream queues here), then the gateway takes client
    handshakes. On stop, accepting ends and peers are told."""


@dataclass(frozen=True, slots=True)
class LifecycleObserver:
    """One subscription: ``name`` (for logs), its stage and its steps."""

    name: str
    stage: int
    on_start: Step | None
    on_stop: Step | None
    statistics: Callable[[], Any] | None = None


class Lifecycle:
    """Ordered stages of one silo (or any composite that starts parts in order).

    Args:
        log: a structlog logger; stop failures are logged on it as ``lifecycle_stop_failed``.
    """

    __slots__ = ("_components", "_log", "_observers", "_running", "_started", "_stopping")

    def __init__(self, log: Any) -> None:
        self._log = log
        self._observers: list[LifecycleObserver] = []
        self._started: list[LifecycleObserver] = []
        self._stopping = False
        self._running = False
        self._components: dict[type[Any], Any] = {}

    def subscribe(
        self,
        name: str,
        stage: int,
        *,
        on_start: Step | None = None,
        on_stop: Step | None = None,
        statistics: Callable[[], Any] | None = None,
    ) -> None:
        """Join the lifecycle at ``stage``. ``statistics``, if given, is the participant's
        figures, listed by ``statistics()`` under ``name``.

        A participant that joins once the lifecycle has started (a component created lazily
        on first use) has started itself: its ``on_start`` is not run, its ``on_stop`` is.

        Raises:
            RuntimeError: the lifecycle is stopping or stopped.
        """
        if self._stopping:
            raise RuntimeError(
                f"lifecycle participant {name!r} joined while stopping; it cannot be stopped"
            )
        obs = LifecycleObserver(name, int(stage), on_start, on_stop, statistics)
        self._observers.append(obs)
        if self._running:
            self._started.append(obs)

    def component(self, key: type[C]) -> C | None:
        """The component kept under ``key`` (its type), or None."""
        found: C | None = self._components.get(key)
        return found

    def set_component(self, key: type[C], value: C) -> None:
        """Keep ``value`` under ``key`` for ``component(key)``; replaces an earlier one."""
        self._components[key] = value

    @property
    def observers(self) -> tuple[LifecycleObserver, ...]:
        """Every subscription, in start order."""
        return tuple(sorted(self._observers, key=lambda o: o.stage))

    def statistics(self) -> dict[str, Any]:
        """The figures of every participant that offers them, by name."""
        return {o.name: o.statistics() for o in self._observers if o.statistics is not None}

    async def start(self) -> None:
        """Run every ``on_start`` by ascending stage (registration order within a stage)."""
        if self._running:
            raise RuntimeError("the lifecycle was already started")
        self._running = True
        for obs in self.observers:
            self._started.append(obs)
            if obs.on_start is None:
                continue
            try:
                await obs.on_start()
            except BaseException:
                await self.stop()
                raise

    async def stop(self) -> None:
        """Run the ``on_stop`` of everything started, by descending stage; idempotent."""
        if self._stopping:
            return
        self._stopping = True
        for obs in sorted(reversed(self._started), key=lambda o: o.stage, reverse=True):
            if obs.on_stop is None:
                continue
            try:
                await obs.on_stop()
            except Exception as exc:
                self._log.error(
                    "lifecycle_stop_failed", participant=obs.name, stage=obs.stage,
                    error=repr(exc),
                )
        self._started.clear()
