"""Effectively-once consumers under kill -9: a silo is killed three times while numbered
events flow; the consumer's stored state holds every number exactly once, in order (0
duplicates, 0 lost), with grain state and queues on SQLite, then on Redis."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from orleanspy.grains.state import PersistentState
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import Codec
from orleanspy.storage.base import GrainStorage
from orleanspy.storage.redis import RedisGrainStorage
from orleanspy.storage.sqlite import SqliteGrainStorage
from orleanspy.streams.adapters import RedisAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

from .effectively_once_app import Applied
from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration

STREAMS = 6
KILLS = 3
PROGRESS = 60  # events the consumers apply after each start before the kill
CONFIG = '[streams.s]\nadapter = "{adapter}"\ntotal_queues = 4\npull_period = 0.02\n'


async def applied(storage: GrainStorage) -> dict[int, list[int]]:
    """The numbers each consumer's stored state holds."""
    got = {}
    for key in range(STREAMS):
        state = PersistentState(Applied, "state", storage, GrainId("ExactSink", key), Codec(),
                                stream_tokens=True)
        await state.read()
        value: Any = state.value
        got[key] = list(value.numbers if isinstance(value, Applied) else value["numbers"])
    return got


async def produce(factory: QueueAdapterFactory, stop: asyncio.Event) -> int:
    """Number n on every stream, then n + 1, ... until ``stop``: how many rounds."""
    adapter = factory.create_adapter("s")
    mapper = HashRingQueueMapper(4, "s")
    await adapter.open()
    n = 0
    try:
        while not stop.is_set():
            for key in range(STREAMS):
                sid = StreamId("numbers", key)
                await adapter.enqueue(mapper.queue_for(sid), sid, [n])
            n += 1
            await asyncio.sleep(0.01)
    finally:
        await adapter.close()
    return n


def dropped(launcher: SiloLauncher) -> int:
    """Events the silos' effectively-once consumers dropped as handled already."""
    total = 0
    for silo in launcher.processes:
        for line in silo.log_text().splitlines():
            if '"stream_redelivery_dropped"' in line:
                total += json.loads(line)["events"]
    return total


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_an_effectively_once_consumer_state_sees_every_event_once_over_3_kills(
    backend: str, silo_launcher: SiloLauncher, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data_dir = silo_launcher.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    storage: GrainStorage
    factory: QueueAdapterFactory
    if backend == "sqlite":
        storage_url, adapter = "sqlite:state.db", "sqlite:streams.db"
        storage = SqliteGrainStorage(str(data_dir / "state.db"))
        factory = SqliteAdapterFactory(str(data_dir / "streams.db"))
    else:
        storage_url = adapter = request.getfixturevalue("redis_url")
        storage = RedisGrainStorage(storage_url)
        factory = RedisAdapterFactory(storage_url)
    config = tmp_path / "streams.toml"
    config.write_text(CONFIG.format(adapter=adapter))
    args = ("--storage", storage_url, "--config", str(config))
    await storage.open()
    stop = asyncio.Event()
    producer = asyncio.create_task(produce(factory, stop))
    try:
        for _ in range(KILLS):
            silo = await silo_launcher.start(*args, app="tests.integration.effectively_once_app")
            before = sum(map(len, (await applied(storage)).values()))
            await poll_until(lambda: applied(storage),
                             lambda g, b=before: sum(map(len, g.values())) >= b + PROGRESS,
                             timeout=20)
            assert not producer.done()
            assert await silo.kill() == -9  # mid-load: writes done, acknowledgements pending
        await silo_launcher.start(*args, app="tests.integration.effectively_once_app")
        stop.set()
        rounds = await producer
        got = await poll_until(lambda: applied(storage),
                               lambda g: all(len(v) >= rounds for v in g.values()), timeout=20)
        for key in range(STREAMS):
            duplicates = len(got[key]) - len(set(got[key]))
            assert duplicates == 0, f"stream {key}: {duplicates} duplicates in the state"
            assert got[key] == list(range(rounds)), f"stream {key}: lost or out of order"
        # Whether a kill leaves an event applied but not yet acknowledged depends on timing;
        # when one does, its consumer drops the redelivery before its handler (logged, counted
        # here), and the state above holds no duplicate either way. The drop itself is proven
        # deterministically by tests/unit/streams/test_effectively_once.py.
        assert dropped(silo_launcher) >= 0
    finally:
        stop.set()
        await asyncio.gather(producer, return_exceptions=True)
        await storage.close()
