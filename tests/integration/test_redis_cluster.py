"""Clusters whose membership, grain state, reminders, queue leases and stream queues are all
on Redis (no shared file): silo processes find each other through the Redis membership
table, and survive a kill -9 of one of them with nothing lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient
from orleanspy.cluster.membership import SiloStatus
from orleanspy.options import ClientOptions
from orleanspy.streams.adapters import RedisAdapterFactory
from orleanspy.streams.leases import Lease
from orleanspy.streams.redis_leases import RedisQueueLeaseStore

from .backends import FAST, STREAM_KEYS, enqueue_numbers, statuses, streams_config
from .silo_process import SiloLauncher, SiloProcess, poll_until
from .test_cluster_streams import balanced_over
from .test_cluster_streams import read_received as received

pytestmark = pytest.mark.integration

CLUSTER = "redis-itest"
DETECTION = 15.0


async def start(launcher: SiloLauncher, url: str) -> SiloProcess:
    return await launcher.start(
        "--membership", url, "--storage", url, "--reminders", url, "--cluster-id", CLUSTER,
        *FAST,
    )


async def test_a_cluster_on_redis_survives_kill_9(redis_url: str,
                                                  silo_launcher: SiloLauncher) -> None:
    silos = [await start(silo_launcher, redis_url) for _ in range(2)]
    await poll_until(lambda: statuses(redis_url, CLUSTER),
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
        await poll_until(lambda: statuses(redis_url, CLUSTER),
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


async def leases(url: str) -> dict[str, Lease]:
    store = RedisQueueLeaseStore(url, CLUSTER)
    try:
        return await store.read_all()
    finally:
        await store.close()


# balance_settle_time + lease_retry_period of the config below, with room for a loaded machine
BALANCING_PERIOD = 0.2 + 0.1 + 1.0
PER_STREAM = 1250  # 20,000 numbered events in all


async def publish(url: str, numbers: range) -> None:
    """Number n on every stream, then n + 1, ..., straight into the Redis queues."""
    adapter = RedisAdapterFactory(url).create_adapter("s")
    await adapter.open()
    try:
        await enqueue_numbers(adapter, numbers)
    finally:
        await adapter.close()


async def test_streams_on_redis_survive_kill_9_of_a_silo(
    redis_url: str, silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    """Three silos, membership, state, reminders, leases and queues all on Redis; a silo is
    killed while 20,000 numbered events flow: every number arrives on every stream, first
    arrivals in order (at least once: the dead silo's unacknowledged events come again)."""
    silo_launcher.data_dir.mkdir(parents=True, exist_ok=True)  # NumberSink writes there
    config = streams_config(tmp_path, redis_url)
    silos = [await silo_launcher.start(
        "--membership", redis_url, "--storage", redis_url, "--reminders", redis_url,
        "--cluster-id", CLUSTER, "--config", str(config), *FAST,
        app="tests.integration.cluster_stream_app") for _ in range(3)]
    await poll_until(lambda: statuses(redis_url, CLUSTER),
                     lambda s: list(s.values()).count(SiloStatus.ACTIVE) == 3,
                     timeout=DETECTION)
    data_dir = silo_launcher.data_dir
    producer = asyncio.create_task(publish(redis_url, range(PER_STREAM)))
    try:
        await poll_until(lambda: asyncio.sleep(0, received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= 2000, timeout=60)
        assert not producer.done()
        await silos[1].kill()
        await poll_until(lambda: statuses(redis_url, CLUSTER),
                         lambda s: SiloStatus.DEAD in s.values(), timeout=DETECTION)
        # every queue owned again by the survivors within one balancing period (the lease
        # of a silo declared dead is taken at once, without waiting for it to expire)
        await poll_until(lambda: leases(redis_url), balanced_over([silos[0], silos[2]]),
                         timeout=BALANCING_PERIOD, interval=0.05)
        await producer
        got = await poll_until(
            lambda: asyncio.sleep(0, received(data_dir)),
            lambda g: all(len(set(g[k])) >= PER_STREAM for k in STREAM_KEYS),
            timeout=120, interval=0.5)
        for key in STREAM_KEYS:
            firsts = list(dict.fromkeys(got[key]))
            assert firsts == list(range(PER_STREAM)), f"stream {key} out of order or short"
        # queues and leases share the server: every acknowledgement checks the lease
        assert all("stream_queue_acks_fenced" in s.log_text() for s in silos)
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)


async def test_streams_on_redis_hand_off_on_a_graceful_stop_without_duplicates(
    redis_url: str, silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    """Three silos on Redis; one stops gracefully (SIGTERM) while numbered events flow: its
    queues move to the others, and every number arrives exactly once on every stream."""
    silo_launcher.data_dir.mkdir(parents=True, exist_ok=True)
    config = streams_config(tmp_path, redis_url)
    silos = [await silo_launcher.start(
        "--membership", redis_url, "--storage", redis_url, "--reminders", redis_url,
        "--cluster-id", CLUSTER, "--config", str(config), *FAST,
        app="tests.integration.cluster_stream_app") for _ in range(3)]
    await poll_until(lambda: leases(redis_url), balanced_over(silos), timeout=DETECTION,
                     interval=0.05)
    data_dir = silo_launcher.data_dir
    producer = asyncio.create_task(publish(redis_url, range(PER_STREAM // 2)))
    try:
        await poll_until(lambda: asyncio.sleep(0, received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= 1000, timeout=60)
        assert not producer.done()
        assert await silos[1].terminate() == 0
        await poll_until(lambda: leases(redis_url), balanced_over([silos[0], silos[2]]),
                         timeout=DETECTION, interval=0.05)
        await producer
        got = await poll_until(
            lambda: asyncio.sleep(0, received(data_dir)),
            lambda g: all(len(g[k]) >= PER_STREAM // 2 for k in STREAM_KEYS),
            timeout=120, interval=0.5)
        for key in STREAM_KEYS:
            assert got[key] == list(range(PER_STREAM // 2)), (
                f"stream {key}: out of order, short or duplicated after a planned hand-off")
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
