"""Streams on the SQLite adapter survive kill -9: unacknowledged events come again."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration

STREAMS = 8
PER_STREAM = 150


def read_received(data_dir: Path) -> dict[int, list[int]]:
    got: dict[int, list[int]] = defaultdict(list)
    path = data_dir / "received.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                got[int(parts[0])].append(int(parts[1]))
    return got


async def publish(data_dir: Path, numbers: range) -> None:
    """Another process's producer: enqueue straight into the durable queue file."""
    adapter = SqliteAdapterFactory(str(data_dir / "streams.db")).create_adapter("s")
    mapper = HashRingQueueMapper(8, "s")
    await adapter.open()
    try:
        for n in numbers:
            for key in range(STREAMS):
                sid = StreamId("numbers", key)
                await adapter.enqueue(mapper.queue_for(sid), sid, [n])
    finally:
        await adapter.close()


async def test_stream_sqlite_kill_9_and_restart_loses_nothing(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    data_dir = silo_launcher.data_dir
    config = tmp_path / "streams.toml"
    config.write_text(
        '[streams.s]\nadapter = "sqlite:streams.db"\ntotal_queues = 8\npull_period = 0.02\n'
    )
    args = ("--app", "tests.integration.stream_app", "--config", str(config))
    await publish(data_dir, range(PER_STREAM // 2))
    silo = await silo_launcher.start(*args)

    async def received() -> dict[int, list[int]]:
        return read_received(data_dir)

    await poll_until(received, lambda g: sum(map(len, g.values())) >= 100, timeout=20)
    await silo.kill()  # kill -9 mid-stream: deliveries in flight, acks pending
    await publish(data_dir, range(PER_STREAM // 2, PER_STREAM))
    await silo_launcher.start(*args)
    got = await poll_until(
        received,
        lambda g: all(set(g[k]) >= set(range(PER_STREAM)) for k in range(STREAMS)),
        timeout=30,
    )
    for key in range(STREAMS):
        first_seen: list[int] = []
        for n in got[key]:
            if n not in first_seen:
                first_seen.append(n)
        assert first_seen == list(range(PER_STREAM)), f"stream {key} out of order"
    duplicates = sum(len(v) for v in got.values()) - STREAMS * PER_STREAM
    assert duplicates >= 0
