"""A cluster whose membership, grain state, reminders, queue leases and stream queues are all
in PostgreSQL: three silo processes find each other through the PostgreSQL membership table,
and a kill -9 of one of them loses no grain state and no stream event."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient
from orleanspy.cluster.membership import SiloStatus
from orleanspy.options import ClientOptions
from orleanspy.streams.adapters import PostgresAdapterFactory
from orleanspy.streams.leases import Lease
from orleanspy.streams.postgres_leases import PostgresQueueLeaseStore

from .backends import FAST, STREAM_KEYS, enqueue_numbers, statuses, streams_config
from .silo_process import SiloLauncher, poll_until
from .test_cluster_streams import balanced_over
from .test_cluster_streams import read_received as received

pytestmark = pytest.mark.integration

CLUSTER = "postgres-itest"
DETECTION = 15.0
BALANCING_PERIOD = 0.2 + 0.1 + 1.0  # balance_settle_time + lease_retry_period, with room
PER_STREAM = 500  # 8,000 numbered events in all


async def leases(url: str) -> dict[str, Lease]:
    store = PostgresQueueLeaseStore(url, CLUSTER)
    try:
        return await store.read_all()
    finally:
        await store.close()


async def publish(url: str, numbers: range) -> None:
    """Number n on every stream, then n + 1, ..., straight into the PostgreSQL queues."""
    adapter = PostgresAdapterFactory(url).create_adapter("s")
    await adapter.open()
    try:
        await enqueue_numbers(adapter, numbers)
    finally:
        await adapter.close()


async def test_a_cluster_on_postgres_survives_kill_9_with_state_and_streams(
    postgres_url: str, silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    """Three silos on PostgreSQL; a grain's state and 8,000 numbered events in flight while
    a silo is killed: the state is kept, every number arrives on every stream, first
    arrivals in order (at least once), and acknowledgements are fenced by the leases."""
    silo_launcher.data_dir.mkdir(parents=True, exist_ok=True)  # NumberSink writes there
    config = streams_config(tmp_path, postgres_url)
    silos = [await silo_launcher.start(
        "--membership", postgres_url, "--storage", postgres_url, "--reminders", postgres_url,
        "--cluster-id", CLUSTER, "--config", str(config), "--app", "tests.integration.app",
        *FAST, app="tests.integration.cluster_stream_app") for _ in range(3)]
    await poll_until(lambda: statuses(postgres_url, CLUSTER),
                     lambda s: list(s.values()).count(SiloStatus.ACTIVE) == 3,
                     timeout=DETECTION)
    client = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, gateways=(silos[0].gateway,), membership=postgres_url,
        gateway_refresh_period=0.5, reconnect_delay=0.2, reconnect_delay_max=1.0))
    data_dir = silo_launcher.data_dir
    producer = asyncio.create_task(publish(postgres_url, range(PER_STREAM)))
    try:
        await client.connect()
        counter: Any = client.get_grain("Counter", "on-postgres")
        assert await counter.add(3) == 3
        await poll_until(lambda: asyncio.sleep(0, received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= 1000, timeout=60)
        assert not producer.done()
        victim = silos[1]
        await victim.kill()
        await poll_until(lambda: statuses(postgres_url, CLUSTER),
                         lambda s: SiloStatus.DEAD in s.values(), timeout=DETECTION)
        await poll_until(lambda: leases(postgres_url), balanced_over([silos[0], silos[2]]),
                         timeout=BALANCING_PERIOD + DETECTION, interval=0.05)
        await producer
        got = await poll_until(
            lambda: asyncio.sleep(0, received(data_dir)),
            lambda g: all(len(set(g[k])) >= PER_STREAM for k in STREAM_KEYS),
            timeout=120, interval=0.5)
        for key in STREAM_KEYS:
            firsts = list(dict.fromkeys(got[key]))
            assert firsts == list(range(PER_STREAM)), f"stream {key} out of order or short"
        assert all("stream_queue_acks_fenced" in s.log_text() for s in silos)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DETECTION
        while True:  # calls in flight to the dead silo fail until the directory moves on
            try:
                value = await client.get_grain("Counter", "on-postgres").get()
                break
            except Exception:
                if loop.time() > deadline:
                    raise
                await asyncio.sleep(0.2)
        assert value == 3
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        await client.close()
