"""What the integration tests of the shared back ends (Redis, PostgreSQL, NATS JetStream) have
in common: a ``nats-server`` of the test's own, the membership statuses of a cluster on any
membership URL, numbered events enqueued straight into a provider's queues, the deliveries
the silos wrote to the shared data dir, and ``pg_terminate_backend`` of the connections of a
test's own PostgreSQL schema."""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from orleanspy.cluster.membership import SiloStatus
from orleanspy.hosting.builder import open_membership_table
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

from .silo_process import free_port, poll_until

__all__ = [
    "FAST",
    "STREAM_KEYS",
    "NatsServer",
    "enqueue_numbers",
    "read_deliveries",
    "statuses",
    "streams_config",
    "terminate_backends",
    "until_received",
]

#: Membership periods short enough that a kill -9 is detected within seconds.
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5", "--table-refresh-period", "0.5")
STREAM_KEYS = list(range(16))
QUEUES = 8
_CONFIG = ('[streams.s]\nadapter = "{url}"\ntotal_queues = 8\npull_period = 0.02\n'
           'balance_settle_time = 0.2\nlease_duration = {lease}\nlease_retry_period = 0.1\n')


def streams_config(folder: Path, adapter_url: str, lease: float = 3.0) -> Path:
    """A silo config file declaring stream provider ``s`` (8 queues) on ``adapter_url``."""
    path = folder / "streams.toml"
    path.write_text(_CONFIG.format(url=adapter_url, lease=lease), encoding="utf-8")
    return path


async def statuses(url: str, cluster: str) -> dict[str, SiloStatus]:
    """What the membership table of ``url`` says of each silo of ``cluster``."""
    with tempfile.TemporaryDirectory() as folder:  # for a relative SQLite path only
        table = open_membership_table(url, cluster, folder)
        try:
            data = await table.read_all()
        finally:
            await table.close()
    return {f"{e.silo.host}:{e.silo.port}": e.status for e in data.entries()}


async def enqueue_numbers(
    adapter: Any, numbers: range, *, keys: list[int] = STREAM_KEYS, pause_every: int = 25,
    pause: float = 0.02,
    acknowledged: dict[int, list[int]] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Number n on every stream ``numbers/KEY`` of provider ``s``, then n + 1, ..., straight
    into the (open) ``adapter``'s queues; a pause of ``pause`` s every ``pause_every`` numbers
    spreads the load over a fault. With ``acknowledged``, an enqueue that fails is not retried (the
    event may or may not be in the queue) and the numbers whose enqueue returned are kept per
    key; without it, a failure raises."""
    mapper = HashRingQueueMapper(QUEUES, "s")

    async def one(key: int, n: int) -> None:
        sid = StreamId("numbers", key)
        if acknowledged is None:
            await adapter.enqueue(mapper.queue_for(sid), sid, [n])
            return
        try:
            await adapter.enqueue(mapper.queue_for(sid), sid, [n])
        except Exception:
            return
        acknowledged[key].append(n)

    for n in numbers:
        if stop():
            return
        await asyncio.gather(*(one(key, n) for key in keys))
        if n % pause_every == 0:
            await asyncio.sleep(pause)


def read_deliveries(data_dir: Path, name: str = "received.txt") -> dict[int, list[tuple[int, int]]]:
    """``KEY NUMBER PID`` lines the sinks appended: per key, (number, pid) in arrival order."""
    got: dict[int, list[tuple[int, int]]] = defaultdict(list)
    path = data_dir / name
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) == 3:
                got[int(parts[0])].append((int(parts[1]), int(parts[2])))
    return got


async def until_received(data_dir: Path, done: Callable[[dict[int, list[int]]], bool],
                         timeout: float) -> dict[int, list[tuple[int, int]]]:
    """Poll the deliveries until ``done`` holds of their numbers per key."""
    async def probe() -> dict[int, list[tuple[int, int]]]:
        return read_deliveries(data_dir)

    return await poll_until(
        probe, lambda got: done({k: [n for n, _ in v] for k, v in got.items()}),
        timeout=timeout, interval=0.2)


class NatsServer:
    """A ``nats-server -js`` of the test's own: its own port and store directory, so a test
    may kill and restart it (never the machine's shared server)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, prefix: str = "itest") -> str:
        return f"nats://127.0.0.1:{self.port}?prefix={prefix}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["nats-server", "-js", "-sd", str(self.folder), "-p", str(self.port),
             "-a", "127.0.0.1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def wait_up(self, timeout: float = 10.0) -> None:
        """Until JetStream answers (the server takes a moment to listen and recover)."""
        import nats

        async with asyncio.timeout(timeout):
            while True:
                try:
                    nc = await nats.connect(f"nats://127.0.0.1:{self.port}",
                                            allow_reconnect=False, connect_timeout=1)
                except Exception:
                    await asyncio.sleep(0.05)
                    continue
                try:
                    await nc.jetstream().account_info()
                    return
                except Exception:
                    await asyncio.sleep(0.05)
                finally:
                    await nc.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs (what JetStream wrote is in its files)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    async def restart(self, outage: float) -> None:
        """Kill, stay down ``outage`` seconds, start again on the same port and store."""
        self.kill()
        await asyncio.sleep(outage)  # the outage itself: nothing to wait for but time
        self.start()
        await self.wait_up()


async def terminate_backends(postgres_url: str, stop: asyncio.Event, every: float = 0.3,
                             on_round: Callable[[], Awaitable[None]] | None = None) -> int:
    """``pg_terminate_backend`` of every connection the runtime opened for the schema of
    ``postgres_url`` (application name ``orleanspy:SCHEMA``: this test's only, never other
    sessions of the shared server) every ``every`` seconds until ``stop``; how many it
    terminated."""
    import contextlib

    import asyncpg

    from orleanspy._util.postgres import split_schema

    dsn, schema = split_schema(postgres_url)
    conn = await asyncpg.connect(dsn)
    killed = 0
    try:
        while not stop.is_set():
            killed += len(await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = $1 AND pid <> pg_backend_pid()",
                f"orleanspy:{schema}"))
            if on_round is not None:
                await on_round()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
    finally:
        await conn.close()
    return killed
