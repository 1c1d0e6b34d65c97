"""A Redis outage under load: the silos' Redis server (started by the test on its own port,
append-only) is stopped for 5 s while events flow and started again on the same data. The
silos log, retry and recover: no silo is declared dead for it, and every event whose
enqueue was acknowledged is delivered (at least once, first arrivals in order)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from orleanspy.cluster.membership import SiloStatus
from orleanspy.streams.adapters import RedisAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

from .backends import statuses
from .silo_process import SiloLauncher, free_port, poll_until
from .test_cluster_streams import read_received as received

pytestmark = pytest.mark.integration

CLUSTER = "outage"
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5", "--table-refresh-period", "0.5")
KEYS = list(range(8))


class RedisServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?prefix=outage"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
             str(self.folder), "--appendonly", "yes", "--appendfsync", "always",
             "--save", ""], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def wait_up(self, timeout: float = 10.0) -> None:
        """Until the server answers PING (it takes a moment to listen)."""
        import redis.asyncio as aioredis

        client = aioredis.Redis(port=self.port)
        try:
            for _ in range(int(timeout / 0.05)):
                try:
                    await client.ping()
                    return
                except Exception:
                    await asyncio.sleep(0.05)
            raise AssertionError(f"redis-server on port {self.port} did not start")
        finally:
            await client.aclose()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # SIGTERM: the append-only file is complete
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    folder = tmp_path / "redis"
    folder.mkdir()
    server = RedisServer(folder)
    server.start()
    yield server
    server.stop()


async def test_silos_ride_out_a_redis_outage(redis_server: RedisServer,
                                             silo_launcher: SiloLauncher,
                                             tmp_path: Path) -> None:
    url = redis_server.url
    await redis_server.wait_up()
    silo_launcher.data_dir.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "streams.toml"
    config.write_text(f'[streams.s]\nadapter = "{url}"\ntotal_queues = 8\npull_period = 0.02\n'
                      'balance_settle_time = 0.2\nlease_duration = 30.0\n')
    silos = [await silo_launcher.start(
        "--membership", url, "--storage", url, "--reminders", url, "--cluster-id", CLUSTER,
        "--config", str(config), *FAST, app="tests.integration.cluster_stream_app")
        for _ in range(2)]
    await poll_until(lambda: statuses(url, CLUSTER),
                     lambda s: list(s.values()).count(SiloStatus.ACTIVE) == 2, timeout=15)
    adapter = RedisAdapterFactory(url).create_adapter("s")
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
                    await asyncio.wait_for(adapter.enqueue(mapper.queue_for(sid), sid, [n]), 1.0)
                    acknowledged[key].append(n)
                except Exception:
                    pass  # not acknowledged: it may or may not be in the queue
            n += 1
            await asyncio.sleep(0.01)

    producer = asyncio.create_task(produce())
    try:
        await poll_until(lambda: asyncio.sleep(0, received(silo_launcher.data_dir)),
                         lambda g: sum(map(len, g.values())) >= 200, timeout=30)
        redis_server.stop()
        await asyncio.sleep(5.0)  # the outage itself: nothing to wait for but time
        redis_server.start()
        await redis_server.wait_up()
        await asyncio.sleep(2.0)  # production goes on after the outage
        stop.set()
        await producer
        got = await poll_until(
            lambda: asyncio.sleep(0, received(silo_launcher.data_dir)),
            lambda g: all(set(acknowledged[k]) <= set(g[k]) for k in KEYS),
            timeout=60, interval=0.5)
        for key in KEYS:
            firsts = [n for n in dict.fromkeys(got[key]) if n in set(acknowledged[key])]
            assert firsts == acknowledged[key], f"stream {key} out of order"
        assert all(s is SiloStatus.ACTIVE for s in (await statuses(url, CLUSTER)).values())
        assert all(s.proc.returncode is None for s in silos)  # nobody crashed
    finally:
        stop.set()
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        await adapter.close()
