"""A graceful stop under load: a client with every gateway sees no failed call, and no grain
ever has two activations (the stopping silo keeps serving what it hosts until each grain has
deactivated, and sends clients to the other gateways)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import ClusterClient
from orleanspy.cluster.membership import SiloStatus, SqliteMembershipTable

from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration

APP = "tests.integration.cluster_app"
CLUSTER = "draining"
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5",
        "--table-refresh-period", "0.5")
KEYS = [f"k{i}" for i in range(24)]


async def test_a_graceful_stop_under_load_fails_no_call(silo_launcher: SiloLauncher) -> None:
    silos = [
        await silo_launcher.start("--membership", "sqlite:membership.db", "--cluster-id",
                                  CLUSTER, "--storage", "memory", "--reminders", "memory",
                                  *FAST, app=APP)
        for _ in range(3)
    ]
    table = SqliteMembershipTable(str(silo_launcher.data_dir / "membership.db"),
                                  cluster_id=CLUSTER)

    async def active() -> int:
        return sum(e.status is SiloStatus.ACTIVE for e in (await table.read_all()).entries())

    await poll_until(active, lambda n: n == 3, timeout=15)
    client = ClusterClient(gateways=[s.gateway for s in silos], cluster_id=CLUSTER,
                           response_timeout=10.0)
    await client.connect()
    await client.wait_gateways(lambda connected: len(connected) == 3, timeout=10)
    seen: dict[str, list[str]] = {k: [] for k in KEYS}
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async def load(worker: int) -> None:
        i = worker
        while not stop.is_set():
            key = KEYS[i % len(KEYS)]
            try:
                info: dict[str, Any] = await client.get_grain("SpreadSpot", key).info()
                tags = seen[key]
                if not tags or tags[-1] != info["activation"]:
                    tags.append(info["activation"])
            except Exception as exc:
                failures.append(exc)
            i += 7

    try:
        workers = [asyncio.create_task(load(w)) for w in range(8)]
        await poll_until(lambda: _count(seen), lambda n: n >= len(KEYS), timeout=10)
        victim = silos[1]
        victim.proc.terminate()  # SIGTERM: a graceful stop while the load runs
        assert await victim.wait_exit(timeout=20) == 0
        await poll_until(active, lambda n: n == 2, timeout=15)
        await asyncio.sleep(0.5)  # keep the load running on the smaller cluster for a while
        stop.set()
        await asyncio.gather(*workers)
    finally:
        stop.set()
        await client.close()
        await table.close()
    assert failures == [], failures[:5]
    for key, tags in seen.items():
        assert len(tags) == len(set(tags)), f"{key} went back to an older activation: {tags}"


async def _count(seen: dict[str, list[str]]) -> int:
    return sum(1 for tags in seen.values() if tags)
