"""Shared fixtures of the unit tests: in-process silos, test clusters and a probe.

Grains reach the test's ``Probe`` as ``self.silo.probe``: they record events in it and wait
on its gates, so a test can hold a turn open and await what happened instead of sleeping.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from orleanspy import Silo, SiloOptions
from orleanspy.diagnostics import RequestQueued
from orleanspy.testing import EventCollector, EventRecorder, TestCluster

# Upper bound for anything a test awaits: a hang fails fast instead of at pytest-timeout.
WAIT = 5.0


class Probe:
    """Events recorded by grains, gates they wait on, and bounded waits for the test."""

    def __init__(self) -> None:
        self.events = EventCollector()
        self.counts: Counter[Any] = Counter()
        self._gates: dict[str, asyncio.Event] = {}
        self._all_open = False

    @property
    def log(self) -> list[Any]:
        return self.events.events

    def record(self, *event: Any) -> None:
        self.events.record(event[0] if len(event) == 1 else event)

    def count(self, name: Any) -> int:
        self.counts[name] += 1
        return self.counts[name]

    def gate(self, name: str = "gate") -> asyncio.Event:
        gate = self._gates.get(name)
        if gate is None:
            gate = self._gates[name] = asyncio.Event()
            if self._all_open:
                gate.set()
        return gate

    def open(self, name: str = "gate") -> None:
        self.gate(name).set()

    def open_all(self) -> None:
        """Open every gate, including gates first asked for later (used before teardown)."""
        self._all_open = True
        for gate in self._gates.values():
            gate.set()

    async def wait_for(self, predicate: Callable[[list[Any]], bool], timeout: float = WAIT) -> None:
        await self.events.wait_for(predicate, timeout)

    async def wait_logged(self, *event: Any, timeout: float = WAIT) -> None:
        """Wait until ``event`` has been recorded."""
        wanted = event[0] if len(event) == 1 else event
        await self.events.wait_for(lambda log: wanted in log, timeout)

    async def until_queued(
        self, silo: Any, condition: Callable[[], bool], timeout: float = WAIT
    ) -> None:
        """Wait until ``condition()`` about a mailbox holds, re-checked each time a message
        queues in or blocks on a mailbox of ``silo`` (the ``RequestQueued`` event)."""
        with EventRecorder(silo.diagnostics) as rec:
            await rec.wait_state(RequestQueued, condition, timeout)

    async def until(self, condition: Callable[[], bool], timeout: float = WAIT) -> None:
        """Yield to the event loop until ``condition()`` holds.

        Only for runtime state that has no event to await (e.g. a message that reached a
        mailbox, a sender that got suspended); it never sleeps for a duration.
        """
        async with asyncio.timeout(timeout):
            while True:
                if condition():
                    return
                await asyncio.sleep(0)


@pytest.fixture
def probe() -> Probe:
    return Probe()


SiloFactory = Callable[..., Awaitable[Silo]]


@pytest_asyncio.fixture
async def make_silo(probe: Probe) -> AsyncIterator[SiloFactory]:
    """Factory: ``silo = await make_silo(Grain1, Grain2, clock=..., storage=..., **options)``.

    The silo has no gateway and a short shutdown timeout; it is stopped after the test,
    after every probe gate was opened (so no turn stays blocked on one).
    """
    silos: list[Silo] = []

    async def make(
        *grains: type, clock: Any = None, storage: dict[str, Any] | None = None, **options: Any
    ) -> Silo:
        options.setdefault("gateway_port", None)
        options.setdefault("shutdown_timeout", 5.0)
        silo = Silo(SiloOptions(**options), grains=grains, clock=clock, storage=storage)
        silo.probe = probe  # type: ignore[attr-defined]
        await silo.start()
        silos.append(silo)
        return silo

    yield make
    probe.open_all()
    async with asyncio.timeout(30):
        for silo in reversed(silos):
            await silo.stop()


@pytest_asyncio.fixture
async def make_cluster(
    orleanspy_cluster: Callable[..., Awaitable[TestCluster]], probe: Probe
) -> AsyncIterator[Callable[..., Awaitable[TestCluster]]]:
    """Factory: ``cluster = await make_cluster(Grain1, ..., **options)`` (silo + real client).

    Built on the plugin fixture ``orleanspy_cluster``, which stops the cluster after the
    test; this fixture opens the probe gates first.
    """

    async def make(*grains: type, **options: Any) -> TestCluster:
        options.setdefault("shutdown_timeout", 5.0)
        cluster = await orleanspy_cluster(grains=grains, options=SiloOptions(**options))
        cluster.silo.probe = probe  # type: ignore[attr-defined]
        return cluster

    yield make
    probe.open_all()
