"""A cluster whose membership, grain state and reminders are all on Redis: two silo processes
find each other through the Redis membership table (no shared file), serve one grain once,
and after a kill -9 the survivor declares the dead silo dead and serves the grain with the
state it had. A client discovers the gateways from the Redis table."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import ClusterClient
from orleanspy.cluster.membership import SiloStatus
from orleanspy.cluster.membership.redis import RedisMembershipTable
from orleanspy.options import ClientOptions

from .silo_process import SiloLauncher, SiloProcess, poll_until

pytestmark = pytest.mark.integration

CLUSTER = "redis-itest"
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5", "--table-refresh-period", "0.5")
DETECTION = 15.0


async def statuses(url: str) -> dict[str, SiloStatus]:
    table = RedisMembershipTable(url, CLUSTER)
    try:
        data = await table.read_all()
    finally:
        await table.close()
    return {f"{e.silo.host}:{e.silo.port}": e.status for e in data.entries()}


async def start(launcher: SiloLauncher, url: str) -> SiloProcess:
    return await launcher.start(
        "--membership", url, "--storage", url, "--reminders", url, "--cluster-id", CLUSTER,
        *FAST,
    )


async def test_a_cluster_on_redis_survives_kill_9(silo_launcher: SiloLauncher,
                                                  redis_url: str) -> None:
    silos = [await start(silo_launcher, redis_url) for _ in range(2)]
    await poll_until(lambda: statuses(redis_url),
                     lambda s: sorted(s.values(), key=str) == [SiloStatus.ACTIVE] * 2,
                     timeout=DETECTION)
    client = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, gateways=(silos[0].gateway,), membership=redis_url,
        gateway_refresh_period=0.5, reconnect_delay=0.2, reconnect_delay_max=1.0))
    try:
        await client.connect()
        await client.wait_gateways(lambda g: len(g) == 2, timeout=DETECTION)  # discovered
        counter: Any = client.get_grain("Counter", "on-redis")
        assert await counter.add(3) == 3
        host = (await counter.info())["pid"]
        victim = next(s for s in silos if s.pid == host)
        assert await victim.kill() == -9
        await poll_until(lambda: statuses(redis_url),
                         lambda s: SiloStatus.DEAD in s.values(), timeout=DETECTION)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DETECTION
        while True:  # calls in flight to the dead silo fail until the directory moves on
            try:
                value = await client.get_grain("Counter", "on-redis").get()
                break
            except Exception:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.2)
        assert value == 3
    finally:
        await client.close()
