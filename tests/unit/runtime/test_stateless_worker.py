"""Stateless workers: several local activations per grain id, at most max_local."""

from __future__ import annotations

import asyncio

from orleanspy import Grain, stateless_worker

WAIT = 5.0


@stateless_worker(max_local=3)
class Resizer(Grain):
    async def on_activate(self) -> None:
        self.silo.probe.record(("activate", id(self)))

    async def resize(self, n: int) -> tuple[int, int]:
        probe = self.silo.probe
        probe.counts["running"] += 1
        probe.counts["max-running"] = max(probe.counts["max-running"], probe.counts["running"])
        workers = len(self.silo.catalog.workers_of(self.grain_id))
        probe.counts["max-workers"] = max(probe.counts["max-workers"], workers)
        probe.record(("start", n, id(self)))
        await probe.gate("slow").wait()
        probe.counts["running"] -= 1
        return n, id(self)

    async def quick(self) -> int:
        return id(self)


@stateless_worker()
class DefaultWorker(Grain):
    async def work(self) -> int:
        await self.silo.probe.gate("slow").wait()
        return id(self)


async def test_stateless_worker_caps_activations_at_max_local(make_silo, probe):
    silo = await make_silo(Resizer)
    ref = silo.get_grain(Resizer, 0)

    calls = [asyncio.create_task(ref.resize(n)) for n in range(10)]
    await probe.wait_for(lambda log: sum(1 for e in log if e[0] == "start") == 3)
    workers = silo.catalog.workers_of(ref.grain_id)
    await probe.until_queued(silo, lambda: sum(w.statistics().queued for w in workers) == 7)

    assert len(workers) == 3
    assert len({id(w) for w in workers}) == 3
    assert len(silo.catalog) == 3
    assert silo.catalog.get(ref.grain_id) is None  # workers are not the single activation
    probe.open("slow")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*calls)

    assert sorted(n for n, _ in results) == list(range(10))
    assert {w for _, w in results} == {id(w.grain) for w in workers}
    assert probe.counts["max-workers"] == 3
    assert probe.counts["max-running"] == 3
    assert len(silo.catalog.workers_of(ref.grain_id)) == 3
    assert sum(1 for e in probe.log if e[0] == "activate") == 3


async def test_stateless_worker_each_worker_runs_one_turn_at_a_time(make_silo, probe):
    silo = await make_silo(Resizer)
    ref = silo.get_grain(Resizer, 0)
    calls = [asyncio.create_task(ref.resize(n)) for n in range(10)]
    await probe.wait_for(lambda log: sum(1 for e in log if e[0] == "start") == 3)

    probe.open("slow")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(*calls)

    starts = [e for e in probe.log if e[0] == "start"]
    assert len(starts) == 10
    assert len({e[2] for e in starts[:3]}) == 3  # the first three went to three workers


async def test_stateless_worker_reuses_idle_worker(make_silo, probe):
    silo = await make_silo(Resizer)
    ref = silo.get_grain(Resizer, 0)

    first = await ref.quick()
    results = [await ref.quick() for _ in range(5)]

    assert set(results) == {first}
    assert len(silo.catalog.workers_of(ref.grain_id)) == 1


async def test_stateless_worker_default_cap_is_max_local_workers_option(make_silo, probe):
    silo = await make_silo(DefaultWorker, max_local_workers=2)
    ref = silo.get_grain(DefaultWorker, 0)

    calls = [asyncio.create_task(ref.work()) for _ in range(6)]
    await probe.until(
        lambda: sum(w.statistics().queued + w.statistics().running
                    for w in silo.catalog.workers_of(ref.grain_id)) == 6
    )
    assert len(silo.catalog.workers_of(ref.grain_id)) == 2
    probe.open("slow")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*calls)
    assert len(set(results)) == 2


async def test_stateless_worker_ids_are_independent(make_silo, probe):
    silo = await make_silo(Resizer)
    a, b = silo.get_grain(Resizer, "a"), silo.get_grain(Resizer, "b")

    assert await a.quick() != await b.quick()
    assert len(silo.catalog.workers_of(a.grain_id)) == 1
    assert len(silo.catalog.workers_of(b.grain_id)) == 1
