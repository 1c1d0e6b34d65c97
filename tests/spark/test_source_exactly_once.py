"""Exactly once end to end: a streaming query from a live orleanspy stream (Redis queues
consumed by two silo processes) into Parquet, its driver a process of its own; kill -9 of
the driver and of a silo mid-run, the driver restarted on its checkpoint, and every
published event is in the output exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from orleanspy.cluster.membership import SiloStatus
from orleanspy.streams.adapters import RedisAdapterFactory
from tests.integration.backends import (
    FAST,
    STREAM_KEYS,
    enqueue_numbers,
    statuses,
    streams_config,
)
from tests.integration.silo_process import REPO_ROOT, SiloLauncher, child_env, poll_until
from tests.spark.conftest import have_java
from tests.spark.parquet_log import committed_rows

pytestmark = pytest.mark.integration

CLUSTER = "spark-source-itest"
PER_STREAM = 400  # 6,400 events on 16 streams, published over about 20 s
READER = "exactly-once"
DRIVER_START = 120.0  # a JVM, a SparkSession and the query's first trigger, on a busy host


class Driver:
    """``tests.spark.pipeline_driver`` in a process group of its own (Python and its JVM)."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc, self.log = proc, log

    @classmethod
    async def start(cls, url: str, out: Path, checkpoint: Path, log: Path) -> Driver:
        with log.open("ab") as sink:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "tests.spark.pipeline_driver", url, "s", "8", str(out),
                str(checkpoint), READER, cwd=REPO_ROOT, env=child_env(), stdout=sink,
                stderr=sink, start_new_session=True)
        return cls(proc, log)

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    async def kill(self) -> None:
        self.signal(signal.SIGKILL)
        await self.proc.wait()

    async def stop(self) -> None:
        """SIGTERM to the Python process (it stops the query and the session), then
        SIGKILL to whatever of the group is left."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(30):
                await self.proc.wait()
        except TimeoutError:
            await self.kill()
        self.signal(signal.SIGKILL)  # the JVM, should it outlive its Python


async def hold_of(url: str) -> bytes | None:
    """The reader's hold on queue s-0 (set by the driver's first offsets)."""
    adapter = RedisAdapterFactory(url).create_adapter("s")
    await adapter.open()
    try:
        client = adapter.client
        return await client.run(client.redis.hget(client.key("hold", "s-0"), READER))  # type: ignore[no-any-return]
    finally:
        await adapter.close()


async def publish(url: str) -> None:
    adapter = RedisAdapterFactory(url).create_adapter("s")
    await adapter.open()
    try:
        await enqueue_numbers(adapter, range(PER_STREAM), pause_every=4, pause=0.2)
    finally:
        await adapter.close()


async def test_kill_9_of_driver_and_silo_leaves_every_event_exactly_once(
    redis_url: str, silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    if not have_java():
        pytest.skip("no Java: install a JDK 17 to run the Spark tests")
    silo_launcher.data_dir.mkdir(parents=True, exist_ok=True)
    config = streams_config(tmp_path, redis_url)
    silos = [await silo_launcher.start(
        "--membership", redis_url, "--storage", redis_url, "--reminders", redis_url,
        "--cluster-id", CLUSTER, "--config", str(config), *FAST,
        app="tests.integration.cluster_stream_app") for _ in range(2)]
    await poll_until(lambda: statuses(redis_url, CLUSTER),
                     lambda s: list(s.values()).count(SiloStatus.ACTIVE) == 2, timeout=30)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    driver = await Driver.start(redis_url, out, checkpoint, tmp_path / "driver.log")
    producer: asyncio.Task[None] | None = None
    total = PER_STREAM * len(STREAM_KEYS)
    try:
        # the reader holds the queues before anything is published: the silos acknowledge
        # (and, without the hold, delete) events as they come
        await poll_until(lambda: hold_of(redis_url), lambda h: h is not None,
                         timeout=DRIVER_START, interval=0.5)
        producer = asyncio.create_task(publish(redis_url))
        await poll_until(lambda: asyncio.to_thread(committed_rows, out),
                         lambda rows: len(rows) >= 500, timeout=DRIVER_START, interval=0.5)
        assert not producer.done(), "the publisher finished before the kills: raise PER_STREAM"
        await driver.kill()
        assert await silos[1].kill() == -9
        driver = await Driver.start(redis_url, out, checkpoint, tmp_path / "driver.log")
        await producer
        await poll_until(lambda: asyncio.to_thread(committed_rows, out),
                         lambda rows: len(rows) >= total, timeout=DRIVER_START + 60,
                         interval=0.5)
        await driver.stop()
        rows = committed_rows(out)
        got = Counter((int(str(r["key"])), int(str(r["event"]))) for r in rows)
        twice = {k: n for k, n in got.items() if n > 1}
        assert not twice, f"{len(twice)} events more than once, e.g. {list(twice.items())[:5]}"
        assert set(got) == {(k, n) for k in STREAM_KEYS for n in range(PER_STREAM)}
        # the silos consumed (acknowledged) the events too: the hold kept them for Spark
        assert (silo_launcher.data_dir / "received.txt").stat().st_size > 0
    finally:
        if producer is not None:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
        await driver.stop()
