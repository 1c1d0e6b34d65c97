"""Await what happened instead of sleeping: ``EventCollector`` and ``EventRecorder``.

``EventCollector`` records whatever a test's grains hand it and wakes ``wait_for`` on every
record. ``EventRecorder`` records a silo's runtime events (``orleanspy.diagnostics``)::

    async with EventRecorder(silo.diagnostics) as events:
        await ref.poke()
        created = await events.wait_event(ActivationCreated, lambda e: e.grain_id == gid)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Self, TypeVar

from orleanspy.diagnostics import Diagnostics, RuntimeEvent

__all__ = ["EventCollector", "EventRecorder"]

E = TypeVar("E", bound=RuntimeEvent)


class EventCollector:
    """A list of events plus ``wait_for(predicate)`` that wakes on every ``record``."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._waiters: list[tuple[Callable[[list[Any]], bool], asyncio.Future[None]]] = []

    def record(self, event: Any) -> None:
        self.events.append(event)
        if self._waiters:
            self._wake()

    def _wake(self) -> None:
        keep = []
        for predicate, fut in self._waiters:
            if fut.done():
                continue
            try:
                ok = predicate(self.events)
            except Exception as exc:  # a broken predicate fails its waiter, not the emitter
                fut.set_exception(exc)
                continue
            if ok:
                fut.set_result(None)
            else:
                keep.append((predicate, fut))
        self._waiters = keep

    async def wait_for(
        self, predicate: Callable[[list[Any]], bool], timeout: float = 10.0
    ) -> list[Any]:
        """Wait until ``predicate(events)`` holds; raise TimeoutError after ``timeout`` s."""
        if predicate(self.events):
            return self.events
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, fut))
        try:
            async with asyncio.timeout(timeout):
                await fut
        except TimeoutError:
            raise TimeoutError(
                f"condition not met within {timeout:g} s; {len(self.events)} events recorded, "
                f"last: {self.events[-3:]!r}"
            ) from None
        finally:
            fut.cancel()
        return self.events

    async def wait_count(self, n: int, timeout: float = 10.0) -> list[Any]:
        """Wait until at least ``n`` events were recorded."""
        return await self.wait_for(lambda ev: len(ev) >= n, timeout)


class EventRecorder(EventCollector):
    """Records the runtime events of one or more hubs (a silo's ``diagnostics``).

    Use as a context manager, or call ``close()`` to stop listening.
    """

    def __init__(self, *hubs: Diagnostics) -> None:
        super().__init__()
        self._unsubscribe = [hub.subscribe(self.record) for hub in hubs]

    def of(self, kind: type[E]) -> list[E]:
        """The recorded events of one type."""
        return [e for e in self.events if isinstance(e, kind)]

    async def wait_event(
        self,
        kind: type[E],
        predicate: Callable[[E], bool] | None = None,
        timeout: float = 10.0,
        *,
        count: int = 1,
    ) -> E:
        """Wait until ``count`` events of type ``kind`` (that satisfy ``predicate``) were
        recorded, counting those recorded already; returns the last of them."""

        def matches(events: list[Any]) -> list[E]:
            return [
                e for e in events
                if isinstance(e, kind) and (predicate is None or predicate(e))
            ]

        try:
            await self.wait_for(lambda ev: len(matches(ev)) >= count, timeout)
        except TimeoutError:
            raise TimeoutError(
                f"no {kind.__name__} (x{count}) within {timeout:g} s; recorded: "
                f"{[type(e).__name__ for e in self.events[-10:]]}"
            ) from None
        return matches(self.events)[count - 1]

    async def wait_state(
        self,
        kinds: type[RuntimeEvent] | tuple[type[RuntimeEvent], ...],
        predicate: Callable[[], bool],
        timeout: float = 10.0,
    ) -> None:
        """Wait until ``predicate()`` holds, checking it now and after every recorded event
        of ``kinds``: the events that report a change of the state it reads (the cache
        purged, events acknowledged, ...). No event, no check: nothing polls."""
        if predicate():
            return
        try:
            await self.wait_for(
                lambda ev: bool(ev) and isinstance(ev[-1], kinds) and predicate(), timeout
            )
        except TimeoutError:
            names = kinds.__name__ if isinstance(kinds, type) else [k.__name__ for k in kinds]
            raise TimeoutError(
                f"state not reached within {timeout:g} s, checked on {names}; recorded: "
                f"{[type(e).__name__ for e in self.events[-10:]]}"
            ) from None

    def close(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
