"""In a cluster each reminder is served by exactly one active silo (the owner of its grain on
the ring): ticks do not multiply with the silos, follow joins and leaves, and stop after an
unregister made on any silo."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.cluster.membership import MemoryMembershipTable
from orleanspy.reminders.memory import MemoryReminderTable
from orleanspy.storage.memory import MemoryGrainStorage

WAIT = 10.0
PERIOD = 0.3
TICKS: list[tuple[float, str, str]] = []


class Alarm(Grain):
    async def arm(self, name: str) -> None:
        await self.register_reminder(name, due=PERIOD, period=PERIOD)

    async def disarm(self, name: str) -> bool:
        return await self.unregister_reminder(name)

    async def receive_reminder(self, name: str, status: Any) -> None:
        TICKS.append((time.monotonic(), name, self.silo.name))


class Cluster:
    def __init__(self) -> None:
        self.table = MemoryMembershipTable()
        self.reminders = MemoryReminderTable()
        self.storage = MemoryGrainStorage()
        self.silos: list[Silo] = []

    async def add(self) -> Silo:
        opts = SiloOptions(membership="memory", port=0, gateway_port=None, cluster_id="rem",
                           probe_period=0.3, i_am_alive_period=0.3, table_refresh_period=0.3,
                           minimum_reminder_period=0.1, shutdown_timeout=5.0)
        silo = Silo(opts, grains=[Alarm], membership_table=self.table,
                    reminder_table=self.reminders, storage={"default": self.storage})
        await silo.start()
        self.silos.append(silo)
        await self.settle()
        return silo

    async def settle(self) -> None:
        live = [s for s in self.silos if not s.stopping]
        for silo in live:
            assert silo.cluster is not None
            await silo.cluster.wait_for_view(lambda s: len(s.active_silos) == len(live), WAIT)

    async def stop(self, silo: Silo) -> None:
        await silo.stop()
        self.silos.remove(silo)
        await self.settle()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    TICKS.clear()
    c = Cluster()
    yield c
    for silo in c.silos:
        await silo.stop()


async def ticks_during(seconds: float, name: str | None = "r") -> list[tuple[float, str, str]]:
    start = time.monotonic()
    await asyncio.sleep(seconds)  # ticking in real time is what is measured here
    return [t for t in TICKS if t[0] >= start and (name is None or t[1] == name)]


def assert_once_per_period(ticks: list[tuple[float, str, str]], seconds: float) -> None:
    expected = seconds / PERIOD
    assert expected - 2 <= len(ticks) <= expected + 1, (len(ticks), expected, ticks)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(ticks)]
    assert all(gap > PERIOD / 2 for gap in gaps), gaps  # no tick fired twice


@pytest.mark.parametrize("silos", [1, 2, 3])
async def test_a_reminder_ticks_once_per_period_whatever_the_silo_count(
    cluster: Cluster, silos: int
) -> None:
    first = await cluster.add()
    await first.get_grain(Alarm, "a").arm("r")
    for _ in range(silos - 1):  # silos that start after the reminder exists
        await cluster.add()
    assert_once_per_period(await ticks_during(2.4), 2.4)


async def test_a_reminder_follows_a_join_and_a_leave(cluster: Cluster) -> None:
    first = await cluster.add()
    for key in range(6):  # several grains: some move to each joining silo
        await first.get_grain(Alarm, key).arm(f"k{key}")
    await cluster.add()
    await cluster.add()
    fired = {silo.name: silo.reminders.fired for silo in cluster.silos}
    after_join = await ticks_during(2.1, None)
    for key in range(6):
        assert_once_per_period([t for t in after_join if t[1] == f"k{key}"], 2.1)
    serving = [s for s in cluster.silos if s.reminders.fired > fired[s.name]]
    assert len(serving) > 1  # the reminders are spread over the silos' rings
    await cluster.stop(first)
    after_leave = await ticks_during(2.1, None)
    for key in range(6):
        assert_once_per_period([t for t in after_leave if t[1] == f"k{key}"], 2.1)


async def test_unregister_on_any_silo_stops_the_ticks(cluster: Cluster) -> None:
    first = await cluster.add()
    await first.get_grain(Alarm, "x").arm("r")
    await cluster.add()
    await cluster.add()
    assert_once_per_period(await ticks_during(1.5), 1.5)
    assert await cluster.silos[-1].get_grain(Alarm, "x").disarm("r")
    await asyncio.sleep(PERIOD)  # a tick already being delivered may still land
    assert await ticks_during(1.2) == []


async def test_a_reminder_armed_on_a_silo_that_does_not_own_it_is_handed_to_the_owner(
    cluster: Cluster,
) -> None:
    from structlog.testing import capture_logs

    a = await cluster.add()
    await cluster.add()
    with capture_logs() as logs:
        for key in itertools.count():
            ref = a.get_grain(Alarm, f"handed-{key}")
            await ref.arm("handed")
            act_silo = next(s for s in cluster.silos if ref.grain_id in s.catalog.activations)
            assert act_silo.cluster is not None
            if not act_silo.cluster.owns(ref.grain_id):
                break
            await ref.disarm("handed")
        ticks = await ticks_during(4 * PERIOD, "handed")
    assert ticks, "the owner never fired the reminder"
    assert [e for e in logs if e["event"] == "reminder_owner_not_told"] == []
