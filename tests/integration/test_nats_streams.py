"""Silo processes on the NATS JetStream queue adapter (membership and leases in SQLite).

A queue moving on a graceful stop delivers every event exactly once; a NATS server (started
by the test on its own port and store, never the machine's shared one) killed and started
again under a stream load loses nothing acknowledged, and the silos recover without a
restart of their own.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest

from orleanspy.streams.adapters.nats import NatsAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

from .backends import FAST, NatsServer, streams_config
from .silo_process import SiloLauncher, SiloProcess, poll_until
from .test_cluster_streams import KEYS, balanced_over, leases
from .test_cluster_streams import read_received as received

pytestmark = pytest.mark.integration

CLUSTER = "streams"  # the cluster id test_cluster_streams.leases reads


async def start_silos(launcher: SiloLauncher, url: str, tmp_path: Path, count: int,
                      lease: float) -> list[SiloProcess]:
    launcher.data_dir.mkdir(parents=True, exist_ok=True)  # NumberSink writes there
    config = streams_config(tmp_path, url, lease)
    return [await launcher.start(
        "--membership", "sqlite:membership.db", "--cluster-id", CLUSTER, "--storage", "memory",
        "--reminders", "memory", "--config", str(config), *FAST,
        app="tests.integration.cluster_stream_app") for _ in range(count)]


async def test_streams_on_nats_hand_off_on_a_graceful_stop_without_duplicates(
    nats_url: str, silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    """Three silos, queues in JetStream; one stops gracefully (SIGTERM) while numbered events
    flow: its queues move to the others, and every number arrives exactly once, in order."""
    silos = await start_silos(silo_launcher, nats_url, tmp_path, 3, lease=3.0)
    data_dir = silo_launcher.data_dir
    await poll_until(lambda: leases(data_dir), balanced_over(silos), timeout=15, interval=0.05)
    per_stream = 300
    adapter = NatsAdapterFactory(nats_url).create_adapter("s")
    await adapter.open()
    mapper = HashRingQueueMapper(8, "s")

    async def produce() -> None:
        for n in range(per_stream):
            await asyncio.gather(*(
                adapter.enqueue(mapper.queue_for(StreamId("numbers", k)),
                                StreamId("numbers", k), [n]) for k in KEYS))
            if n % 25 == 0:
                await asyncio.sleep(0.02)  # spread the load over the stop

    producer = asyncio.create_task(produce())
    try:
        await poll_until(lambda: asyncio.sleep(0, received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= 500, timeout=60)
        assert not producer.done()
        assert await silos[1].terminate() == 0
        await poll_until(lambda: leases(data_dir), balanced_over([silos[0], silos[2]]),
                         timeout=15, interval=0.05)
        await producer
        got = await poll_until(
            lambda: asyncio.sleep(0, received(data_dir)),
            lambda g: all(len(g[k]) >= per_stream for k in KEYS), timeout=120, interval=0.5)
        for key in KEYS:
            assert got[key] == list(range(per_stream)), (
                f"stream {key}: out of order, short or duplicated after a planned hand-off")
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        await adapter.close()


async def test_silos_ride_out_a_nats_server_restart(
    nats_server: NatsServer, silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    """Two silos on a NATS server of the test's own, killed (SIGKILL) for 3 s while events
    flow and started again on the same store: every event whose enqueue returned is
    delivered, first arrivals in order, with no duplicate (no receiver restarted: the
    at-least-once window stayed empty), and the silos deliver what follows without a
    restart."""
    url = nats_server.url()
    silos = await start_silos(silo_launcher, url, tmp_path, 2, lease=30.0)
    data_dir = silo_launcher.data_dir
    adapter = NatsAdapterFactory(url, enqueue_timeout=1.0).create_adapter("s")
    mapper = HashRingQueueMapper(8, "s")
    await adapter.open()
    acknowledged: dict[int, list[int]] = defaultdict(list)
    stop = asyncio.Event()

    async def produce() -> None:
        n = 0
        while not stop.is_set():
            for key in KEYS:
                sid = StreamId("numbers", key)
                try:
                    await adapter.enqueue(mapper.queue_for(sid), sid, [n])
                    acknowledged[key].append(n)
                except Exception:
                    pass  # not acknowledged: it may or may not be in the queue
            n += 1
            await asyncio.sleep(0.01)

    producer = asyncio.create_task(produce())
    try:
        await poll_until(lambda: asyncio.sleep(0, received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= 300, timeout=30)
        await nats_server.restart(outage=3.0)
        await asyncio.sleep(2.0)  # production goes on after the restart
        stop.set()
        await producer
        got = await poll_until(
            lambda: asyncio.sleep(0, received(data_dir)),
            lambda g: all(set(acknowledged[k]) <= set(g[k]) for k in KEYS),
            timeout=60, interval=0.5)
        for key in KEYS:
            mine = set(acknowledged[key])
            firsts = [n for n in dict.fromkeys(got[key]) if n in mine]
            assert firsts == acknowledged[key], f"stream {key} out of order"
            assert len(got[key]) == len(set(got[key])), f"stream {key}: duplicates"
        assert all(s.proc.returncode is None for s in silos)  # nobody crashed
        # each silo saw the server go and come back, on the connection it started with
        assert all("nats_disconnected" in s.log_text() for s in silos)
        assert all("nats_reconnected" in s.log_text() for s in silos)

        async def pending() -> int:
            return sum([await adapter.pending_count(q) for q in mapper.all_queues()])

        await poll_until(pending, lambda count: count == 0, timeout=15, interval=0.2)
    finally:
        stop.set()
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        await adapter.close()
