"""kill -9 of a silo while a slow subscription is spilled (served from the SQLite queue).

A spilled subscription has left the agent's cache; the containers it has not delivered yet
were purged from the cache but must stay unacknowledged in the queue. After a kill -9 and a
restart every event the slow consumer had not processed is delivered again (none lost, in
order per stream); the only duplicates are of events that were still unacknowledged.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from orleanspy.messaging.codec import Codec
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

from .silo_process import SiloLauncher, SiloProcess, poll_until
from .spill_app import BLOCK_AT, GATE

pytestmark = pytest.mark.integration

N = 200  # events per stream
CACHE = 50  # the agent's cache bound: far below the slow stream's backlog


def read_log(data_dir: Path, name: str) -> list[tuple[int, int]]:
    """(item, sequence) per delivery recorded by the app, in delivery order."""
    path = data_dir / name
    out: list[tuple[int, int]] = []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line cut by the kill is not a delivery
                out.append((int(parts[1]), int(parts[2])))
    return out


def pending_rows(db: Path) -> dict[str, list[tuple[int, int]]]:
    """Unacknowledged containers per namespace: (item, sequence), in sequence order."""
    codec = Codec()
    conn = sqlite3.connect(str(db))
    try:
        rows = conn.execute(
            "SELECT seq, namespace, events FROM stream_queue ORDER BY seq"
        ).fetchall()
    finally:
        conn.close()
    out: dict[str, list[tuple[int, int]]] = {"slow": [], "fast": [], "idle": []}
    for seq, namespace, events in rows:
        (item,) = codec.unpackb(events)
        out[namespace].append((item, seq))
    return out


async def publish(db: Path, namespaces: tuple[str, ...], count: int) -> None:
    """Another process's producer: the streams interleaved on the only queue."""
    adapter = SqliteAdapterFactory(str(db)).create_adapter("s")
    mapper = HashRingQueueMapper(1, "s")
    await adapter.open()
    try:
        for n in range(count):
            for namespace in namespaces:
                sid = StreamId(namespace, 0)
                await adapter.enqueue(mapper.queue_for(sid), sid, [n])
    finally:
        await adapter.close()


async def agents(silo: SiloProcess) -> list[dict[str, Any]]:
    async with silo.client() as client:
        result: list[dict[str, Any]] = await client.get_grain("SpillProbe", 0).agents("s")
        return result


async def test_kill_9_while_a_subscription_is_spilled_redelivers_its_backlog(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    data_dir = silo_launcher.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    db = data_dir / "streams.db"
    config = tmp_path / "streams.toml"
    config.write_text(
        "[streams.s]\n"
        'adapter = "sqlite:streams.db"\n'
        "total_queues = 1\n"
        f"cache_size = {CACHE}\n"
        "pull_period = 0.02\n"
        "max_delivery_time = 600\n"  # the slow one's refused event is retried, never skipped
        "delivery_backoff = 0.02\n"
        "max_delivery_backoff = 0.1\n"
    )
    args = ("--app", "tests.integration.spill_app", "--config", str(config))
    await publish(db, ("idle",), 1)
    silo = await silo_launcher.start(*args)
    # A caught-up subscription waits for newer events: the laggard will be spilled as soon
    # as the cache fills (the agent does not spill when nobody would gain from it).
    await poll_until(_async(lambda: read_log(data_dir, "idle.txt")), bool, timeout=30)
    await publish(db, ("slow", "fast"), N)

    # The fast consumer gets everything while the slow one is stuck on BLOCK_AT, spilled.
    await poll_until(lambda: _logs(data_dir),
                     lambda logs: len(logs[0]) >= N and len(logs[1]) >= BLOCK_AT, timeout=60)
    stats = await poll_until(lambda: agents(silo), lambda a: a[0]["spilled"] == 1, timeout=30)
    assert stats[0]["read"] == 2 * N + 1 and stats[0]["cache_max"] == CACHE
    # The fast stream's containers are acknowledged; the slow stream's backlog stays.
    await poll_until(_async(lambda: pending_rows(db)), lambda p: not p["fast"], timeout=30)

    await silo.kill()  # kill -9 while spilled: the backlog only in the queue, acks pending
    before = read_log(data_dir, "slow.txt")
    fast_before = read_log(data_dir, "fast.txt")
    pending = pending_rows(db)  # what the queue still held at the kill
    assert [item for item, _ in before] == list(range(BLOCK_AT))  # in order, once
    assert [item for item, _ in fast_before] == list(range(N))
    unacked = {item for item, _ in pending["slow"]}
    assert set(range(BLOCK_AT, N)) <= unacked, "a spilled backlog event was acknowledged"
    assert pending["fast"] == [] and pending["idle"] == []

    (data_dir / GATE).touch()  # the slow consumer recovers
    await silo_launcher.start(*args)
    await poll_until(lambda: _logs(data_dir),
                     lambda logs: {i for i, _ in logs[1]} >= set(range(N)), timeout=60)
    after = read_log(data_dir, "slow.txt")[len(before):]
    fast_after = read_log(data_dir, "fast.txt")[len(fast_before):]
    # None lost; after the restart exactly what the queue still held, once, in order.
    assert {item for item, _ in before} | {item for item, _ in after} == set(range(N))
    assert after == pending["slow"]
    assert fast_after == []
    duplicates = {item for item, _ in before} & {item for item, _ in after}
    assert duplicates <= unacked  # only events that were never acknowledged come twice
    await poll_until(_async(lambda: pending_rows(db)),
                     lambda p: not any(p.values()), timeout=30)


async def _logs(data_dir: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    return read_log(data_dir, "fast.txt"), read_log(data_dir, "slow.txt")


def _async(fn: Any) -> Any:
    async def probe() -> Any:
        return fn()

    return probe
