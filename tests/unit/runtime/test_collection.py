"""Idle collection, deactivate_on_idle, delay_deactivation and calls during deactivation."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import DeactivationReason, Grain, collection_age, one_way
from orleanspy.testing import FakeClock

WAIT = 5.0


class Idle(Grain):
    async def on_activate(self) -> None:
        self.silo.probe.record(("activate", self.key, id(self)))

    async def on_deactivate(self, reason: DeactivationReason) -> None:
        probe = self.silo.probe
        probe.record(("deactivate", self.key, reason))
        if str(self.key).startswith("gated"):
            await probe.gate(f"deactivate-{self.key}").wait()
        probe.record(("deactivated", self.key, id(self)))

    async def ping(self) -> int:
        return id(self)

    @one_way
    async def post(self, tag: str) -> None:
        self.silo.probe.record(("post", self.key, tag, id(self)))

    async def leave(self) -> int:
        self.deactivate_on_idle()
        return id(self)

    async def keep_alive(self, seconds: float) -> None:
        self.delay_deactivation(seconds)

    async def hold(self) -> None:
        await self.silo.probe.gate(f"hold-{self.key}").wait()


@collection_age(10)
class ShortLived(Idle):
    pass


GRAINS = (Idle, ShortLived)


async def started(make_silo, **options):
    clock = FakeClock()
    silo = await make_silo(*GRAINS, clock=clock, **options)
    return silo, clock


def reasons(log: list, key: str) -> list[DeactivationReason]:
    return [e[2] for e in log if e[0] == "deactivate" and e[1] == key]


async def test_collection_deactivates_grain_idle_for_default_age(make_silo, probe):
    silo, clock = await started(make_silo)  # collection_age defaults to 900 s
    ref = silo.get_grain(Idle, "a")
    first = await ref.ping()
    act = silo.catalog.get(ref.grain_id)

    clock.advance(899.0)
    assert silo.collector.collect_once() == 0
    clock.advance(1.0)
    assert silo.collector.collect_once() == 1
    async with asyncio.timeout(WAIT):
        await act.wait_deactivated()

    assert reasons(probe.log, "a") == [DeactivationReason.IDLE]
    assert silo.catalog.get(ref.grain_id) is None
    assert silo.statistics().collected == 1
    assert await ref.ping() != first  # a new activation serves the next call


async def test_collection_honours_silo_collection_age_option(make_silo, probe):
    silo, clock = await started(make_silo, collection_age=30.0)
    await silo.get_grain(Idle, "a").ping()

    clock.advance(29.0)
    assert silo.collector.collect_once() == 0
    clock.advance(1.0)
    assert silo.collector.collect_once() == 1


async def test_collection_uses_per_class_collection_age(make_silo, probe):
    silo, clock = await started(make_silo)
    await silo.get_grain(Idle, "default").ping()
    await silo.get_grain(ShortLived, "short").ping()

    clock.advance(9.0)
    assert silo.collector.collect_once() == 0
    clock.advance(1.0)
    assert silo.collector.collect_once() == 1
    await probe.wait_for(lambda log: reasons(log, "short") == [DeactivationReason.IDLE])

    assert reasons(probe.log, "default") == []
    assert [a.grain_id.key for a in silo.catalog] == ["default"]


async def test_collection_age_argument_overrides_class_ages(make_silo, probe):
    silo, clock = await started(make_silo)
    await silo.get_grain(Idle, "a").ping()
    await silo.get_grain(ShortLived, "b").ping()

    clock.advance(5.0)
    assert silo.collector.collect_once(age=5.0) == 2


async def test_collection_counts_idle_time_from_last_request(make_silo, probe):
    silo, clock = await started(make_silo)
    ref = silo.get_grain(Idle, "a")
    await ref.ping()

    clock.advance(800.0)
    await ref.ping()
    clock.advance(800.0)
    assert silo.collector.collect_once() == 0
    clock.advance(100.0)
    assert silo.collector.collect_once() == 1


async def test_collection_skips_activation_with_running_request(make_silo, probe):
    silo, clock = await started(make_silo)
    ref = silo.get_grain(Idle, "busy")
    # The call's expiry runs on the same clock: it must outlive the jump.
    call = asyncio.create_task(ref.with_timeout(100_000.0).hold())
    await probe.until(lambda: (a := silo.catalog.get(ref.grain_id)) is not None
                      and a.statistics().running == 1)

    clock.advance(10_000.0)
    assert silo.collector.collect_once() == 0

    probe.open("hold-busy")
    async with asyncio.timeout(WAIT):
        await call
    clock.advance(900.0)
    assert silo.collector.collect_once() == 1


async def test_collection_delay_deactivation_keeps_grain_alive(make_silo, probe):
    silo, clock = await started(make_silo)
    ref = silo.get_grain(Idle, "kept")
    await ref.keep_alive(2000.0)

    clock.advance(1999.0)
    assert silo.collector.collect_once() == 0
    clock.advance(1.0)
    assert silo.collector.collect_once() == 1


async def test_collection_delay_deactivation_zero_cancels_keep_alive(make_silo, probe):
    silo, clock = await started(make_silo)
    ref = silo.get_grain(Idle, "kept")
    await ref.keep_alive(5000.0)
    await ref.keep_alive(0.0)

    clock.advance(900.0)
    assert silo.collector.collect_once() == 1


async def test_deactivate_on_idle_deactivates_after_request_completes(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Idle, "a")
    await ref.ping()
    act = silo.catalog.get(ref.grain_id)

    act_id = await ref.leave()
    async with asyncio.timeout(WAIT):
        await act.wait_deactivated()

    assert act_id == id(act.grain)
    assert ("deactivated", "a", act_id) in probe.log
    assert reasons(probe.log, "a") == [DeactivationReason.REQUESTED]
    assert silo.catalog.get(ref.grain_id) is None

    assert await ref.ping() != act_id


async def test_deactivation_calls_arriving_meanwhile_complete_on_next_activation(
    make_silo, probe
):
    silo, clock = await started(make_silo)
    ref = silo.get_grain(Idle, "gated")
    old = await ref.ping()
    act = silo.catalog.get(ref.grain_id)
    clock.advance(900.0)
    assert silo.collector.collect_once() == 1
    await probe.wait_logged("deactivate", "gated", DeactivationReason.IDLE)

    calls = [asyncio.create_task(ref.ping()) for _ in range(20)]
    async with asyncio.timeout(WAIT):
        for i in range(3):
            await ref.post(f"p{i}")
    await probe.until_queued(silo, lambda: act.statistics().queued == 23)
    assert not any(c.done() for c in calls)

    probe.open("deactivate-gated")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*calls)
        await act.wait_deactivated()
    await probe.wait_for(lambda log: sum(1 for e in log if e[0] == "post") == 3)

    new = silo.catalog.get(ref.grain_id)
    assert new is not None and new is not act
    assert set(results) == {id(new.grain)} and old not in results
    posts = [e for e in probe.log if e[0] == "post"]
    assert [e[2] for e in posts] == ["p0", "p1", "p2"]
    assert {e[3] for e in posts} == {id(new.grain)}
    activations = [e for e in probe.log if e[0] == "activate"]
    assert len(activations) == 2
    assert probe.log.index(("deactivated", "gated", old)) < probe.log.index(activations[1])


@pytest.mark.parametrize("via", ["deactivate_on_idle", "collector"])
async def test_deactivation_client_calls_arriving_meanwhile_are_not_lost(
    make_cluster, probe, via
):
    cluster = await make_cluster(*GRAINS)
    silo = cluster.silo
    ref = cluster.client.get_grain(Idle, "gated")
    old = await ref.ping()
    act = silo.catalog.get(ref.grain_id)
    if via == "collector":
        assert silo.collector.collect_once(age=0.0) == 1
    else:
        await ref.leave()
    await probe.wait_logged("deactivate", "gated", act.reason)

    calls = [asyncio.create_task(ref.ping()) for _ in range(10)]
    await probe.until_queued(silo, lambda: act.statistics().queued == 10)

    probe.open("deactivate-gated")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*calls)
    new = silo.catalog.get(ref.grain_id)
    assert new is not None and new is not act
    assert set(results) == {id(new.grain)} != {old}


async def test_deactivation_hanging_on_deactivate_does_not_block_silo_stop(make_silo, probe):
    silo = await make_silo(*GRAINS, shutdown_timeout=0.2)
    await silo.get_grain(Idle, "gated-forever").ping()

    async with asyncio.timeout(1.5):
        await silo.stop()
    assert silo.stopping and len(silo.catalog) == 0
