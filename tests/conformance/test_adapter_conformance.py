"""Queue adapters against the conformance suite, plus memory, SQLite and generator specifics."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest

from orleanspy.errors import ConfigurationError, StreamError
from orleanspy.streams.adapters import memory as memory_adapter
from orleanspy.streams.adapters.base import BatchContainer, QueueAdapterFactory, QueueFullError
from orleanspy.streams.adapters.generator import GeneratorAdapterFactory, GeneratorOptions
from orleanspy.streams.adapters.memory import MemoryAdapterFactory, MemoryQueueAdapter
from orleanspy.streams.adapters.redis import RedisAdapterFactory
from orleanspy.streams.adapters.sqlite import SqliteAdapterFactory, SqliteQueueAdapter
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing.stream_conformance import QueueAdapterConformance

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT = 10.0
Q0 = QueueId("p", 0)


class TestMemoryAdapterConformance(QueueAdapterConformance):
    at_least_once = True  # within the process: not durable

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return MemoryAdapterFactory()


class TestSmallMemoryAdapterConformance(QueueAdapterConformance):
    """No compaction slack: the suite's acknowledgements drop entries (and move indexes)."""

    at_least_once = True

    @pytest.fixture(autouse=True)
    def _no_compaction_slack(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(memory_adapter, "_COMPACT_SLACK", 0)
        monkeypatch.setattr(memory_adapter, "_PREFIX_MIN", 1)

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return MemoryAdapterFactory(capacity_per_queue=1000)


class TestSqliteAdapterConformance(QueueAdapterConformance):
    at_least_once = True
    durable = True

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return SqliteAdapterFactory(str(tmp_path / "queues.db"))


class TestRedisAdapterConformance(QueueAdapterConformance):
    at_least_once = True
    durable = True

    @pytest.fixture(autouse=True)
    def _redis(self, redis_url: str) -> None:
        self.url = redis_url  # Redis reachable (else skipped, or failed under CI)

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return RedisAdapterFactory(self.url)


class TestSqliteInMemoryAdapterConformance(QueueAdapterConformance):
    at_least_once = True  # for receivers of the same adapter (its one connection)

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return SqliteAdapterFactory(":memory:")


# -- memory ------------------------------------------------------------------------------


async def _open_memory(**options: Any) -> MemoryQueueAdapter:
    adapter = MemoryAdapterFactory(**options).create_adapter("p")
    await adapter.open()
    return adapter


async def test_memory_full_queue_enqueue_waits_until_an_acknowledgement_frees_room() -> None:
    adapter = await _open_memory(capacity_per_queue=2)
    stream = StreamId("s", 1)
    await adapter.enqueue(Q0, stream, ["a"])
    await adapter.enqueue(Q0, stream, ["b"])
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()

    producer = asyncio.create_task(adapter.enqueue(Q0, stream, ["c"]))
    await asyncio.sleep(0)  # one loop iteration: the producer runs until it waits for room
    assert not producer.done()
    first, _ = await receiver.get_messages(10)
    await asyncio.sleep(0)
    assert not producer.done()  # reading frees no room: the containers are still kept
    assert adapter.queue_length(Q0) == 2

    await receiver.messages_delivered([first])
    async with asyncio.timeout(WAIT):
        await producer

    assert adapter.queue_length(Q0) == 2
    assert [c.events for c in await receiver.get_messages(10)] == [("c",)]
    assert [c.events for c in await receiver.read_from(SequenceToken(0), 10)] == [("b",), ("c",)]


@pytest.mark.parametrize("enqueue_timeout", [0.0, 0.05])
async def test_memory_full_queue_enqueue_raises_queue_full_after_timeout(
    enqueue_timeout: float,
) -> None:
    adapter = await _open_memory(capacity_per_queue=1, enqueue_timeout=enqueue_timeout)
    await adapter.enqueue(Q0, StreamId("s", 1), ["a"])

    async with asyncio.timeout(WAIT):
        with pytest.raises(QueueFullError) as info:
            await adapter.enqueue(Q0, StreamId("s", 1), ["b"])

    assert isinstance(info.value, StreamError)
    assert info.value.queue == "p-0"
    assert info.value.capacity == 1
    assert adapter.queue_length(Q0) == 1


async def test_memory_capacity_counts_read_but_unacknowledged_containers() -> None:
    adapter = await _open_memory(capacity_per_queue=3, enqueue_timeout=0.0)
    stream = StreamId("s", 1)
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()
    for n in range(3):
        await adapter.enqueue(Q0, stream, [n])
    batch = await receiver.get_messages(10)

    with pytest.raises(QueueFullError):
        await adapter.enqueue(Q0, stream, ["read, not acknowledged"])
    await receiver.messages_delivered([BatchContainer(batch[1].stream_id, batch[1].token, (), 0)])
    await adapter.enqueue(Q0, stream, [3])
    with pytest.raises(QueueFullError):
        await adapter.enqueue(Q0, stream, ["full again"])
    await receiver.messages_delivered(batch)
    for n in range(4, 6):
        await adapter.enqueue(Q0, stream, [n])

    assert [c.events[0] for c in await receiver.get_messages(10)] == [3, 4, 5]
    assert adapter.queue_length(Q0) == 3


async def test_memory_cancelled_waiting_producer_passes_room_to_the_next() -> None:
    adapter = await _open_memory(capacity_per_queue=1)
    stream = StreamId("s", 1)
    await adapter.enqueue(Q0, stream, ["a"])
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()
    first = asyncio.create_task(adapter.enqueue(Q0, stream, ["b"]))
    second = asyncio.create_task(adapter.enqueue(Q0, stream, ["c"]))
    await asyncio.sleep(0)  # one loop iteration: both producers wait for room

    await receiver.messages_delivered(await receiver.get_messages(1))  # wakes the first...
    first.cancel()  # ...which is cancelled before it runs
    async with asyncio.timeout(WAIT):
        await second
    with pytest.raises(asyncio.CancelledError):
        await first

    assert [c.events for c in await receiver.get_messages(10)] == [("c",)]


async def test_memory_enqueue_creates_no_task() -> None:
    adapter = await _open_memory()
    loop = asyncio.get_running_loop()
    created: list[Any] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        for n in range(100):
            await adapter.enqueue(QueueId("p", n % 4), StreamId("s", n), [n])
    finally:
        loop.set_task_factory(None)

    assert created == []


async def test_memory_adapters_of_one_factory_share_queues_per_provider_name() -> None:
    factory = MemoryAdapterFactory()
    producer, consumer, other = (factory.create_adapter(n) for n in ("p", "p", "other"))
    for adapter in (producer, consumer, other):
        await adapter.open()
    await producer.enqueue(Q0, StreamId("s", 1), ["shared"])

    receiver = consumer.create_receiver(Q0)
    await receiver.initialize()
    other_receiver = other.create_receiver(Q0)
    await other_receiver.initialize()

    assert await other_receiver.get_messages(10) == []
    assert [c.events for c in await receiver.get_messages(10)] == [("shared",)]


async def test_memory_queue_length_counts_unacknowledged_containers() -> None:
    adapter = await _open_memory()
    assert adapter.queue_length(Q0) == 0
    for n in range(3):
        await adapter.enqueue(Q0, StreamId("s", 1), [n])
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()

    batch = await receiver.get_messages(2)
    assert adapter.queue_length(Q0) == 3
    await receiver.messages_delivered(batch[1:])

    assert adapter.queue_length(Q0) == 2
    assert adapter.queue_length(QueueId("p", 1)) == 0


async def test_memory_and_sqlite_are_rewindable_and_the_generator_is_not(
    tmp_path: Path,
) -> None:
    """The suite's rewind clauses must not be skipped for the adapters that can rewind."""
    memory = await _open_memory()
    sqlite = await _open_sqlite(tmp_path / "q.db")
    generator = GeneratorAdapterFactory().create_adapter("p")
    await generator.open()
    try:
        assert memory.is_rewindable is True
        assert sqlite.is_rewindable is True
        assert generator.is_rewindable is False
        receiver = generator.create_receiver(Q0)
        await receiver.initialize()
        with pytest.raises(NotImplementedError, match="not rewindable"):
            await receiver.read_from(SequenceToken(0), 10)
        await receiver.shutdown()
    finally:
        await sqlite.close()


async def test_memory_restarted_agent_gets_unacknowledged_containers_again() -> None:
    """A provider rebuilt in the same process (same factory) starts at the oldest kept one."""
    factory = MemoryAdapterFactory()
    stream = StreamId("s", 1)
    first = factory.create_adapter("p")
    await first.open()
    for n in range(5):
        await first.enqueue(Q0, stream, [n])
    receiver = first.create_receiver(Q0)
    await receiver.initialize()
    batch = await receiver.get_messages(10)
    await receiver.messages_delivered(batch[:2])
    await receiver.shutdown()
    await first.close()

    second = factory.create_adapter("p")
    await second.open()
    receiver = second.create_receiver(Q0)
    await receiver.initialize()

    assert await receiver.get_messages(10) == batch[2:]
    await receiver.messages_delivered(batch)
    assert second.queue_length(Q0) == 0


async def _read_all(receiver: Any, max_count: int) -> list[BatchContainer]:
    batch: list[BatchContainer] = []
    while chunk := await receiver.get_messages(max_count):
        batch.extend(chunk)
    return batch


async def test_memory_out_of_order_acknowledgements_across_compactions() -> None:
    adapter = await _open_memory()
    stream = StreamId("s", 1)
    for n in range(5000):
        await adapter.enqueue(Q0, stream, [n])
    slow, fast = adapter.create_receiver(Q0), adapter.create_receiver(Q0)
    await slow.initialize()
    await fast.initialize()
    slow_first = await slow.get_messages(2500)
    everything = await _read_all(fast, 300)
    assert slow_first == everything[:2500]

    # Every odd container and the first 2000: far more acknowledged than kept.
    await fast.messages_delivered(everything[1::2])
    await fast.messages_delivered(everything[1999::-1])
    kept = [c for c in everything[2000:] if c.events[0] % 2 == 0]
    assert adapter.queue_length(Q0) == len(kept) == 1500

    assert await _read_all(slow, 7) == [c for c in kept if c.events[0] >= 2500]
    assert await fast.read_from(SequenceToken(0), 10_000) == kept
    assert await fast.read_from(everything[2001].token, 2) == kept[1:3]
    late = adapter.create_receiver(Q0)
    await late.initialize()
    assert await _read_all(late, 100) == kept

    await late.messages_delivered(kept[:-1])
    for n in range(5000, 5100):
        await adapter.enqueue(Q0, stream, [n])
    tail = await _read_all(slow, 64)
    assert [c.events[0] for c in tail] == list(range(5000, 5100))
    assert tail[0].token > kept[-1].token
    assert await slow.read_from(SequenceToken(0), 10) == [kept[-1], *tail[:9]]
    await slow.messages_delivered([*tail, kept[-1]])
    assert adapter.queue_length(Q0) == 0
    assert await slow.read_from(SequenceToken(0), 10) == []


async def test_memory_reads_and_acknowledgements_create_no_task() -> None:
    adapter = await _open_memory()
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()
    loop = asyncio.get_running_loop()
    created: list[Any] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)
    try:
        for n in range(100):
            await adapter.enqueue(Q0, StreamId("s", n % 3), [n])
            batch = await receiver.get_messages(10)
            await receiver.read_from(batch[0].token, 10, StreamId("s", 1))
            await receiver.messages_delivered(batch)
    finally:
        loop.set_task_factory(None)

    assert created == []


@pytest.mark.parametrize(
    "options",
    [
        {"capacity_per_queue": 0},
        {"capacity_per_queue": True},
        {"capacity_per_queue": 1.5},
        {"enqueue_timeout": -1.0},
        {"enqueue_timeout": float("nan")},
    ],
)
def test_memory_factory_rejects_bad_options(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="MemoryAdapterFactory"):
        MemoryAdapterFactory(**options)


# -- SQLite ------------------------------------------------------------------------------


async def _open_sqlite(path: Path, name: str = "p") -> SqliteQueueAdapter:
    adapter = SqliteAdapterFactory(str(path)).create_adapter(name)
    await adapter.open()
    return adapter


async def test_sqlite_concurrent_enqueues_share_one_commit(tmp_path: Path) -> None:
    adapter = await _open_sqlite(tmp_path / "q.db")
    try:
        await asyncio.gather(*(adapter.enqueue(Q0, StreamId("s", n), [n]) for n in range(100)))

        stats = adapter.statistics()
        assert stats.containers_committed == 100
        assert stats.commits <= 2
        assert await adapter.pending_count(Q0) == 100
    finally:
        await adapter.close()


async def test_sqlite_acknowledgements_and_enqueues_share_commits(tmp_path: Path) -> None:
    adapter = await _open_sqlite(tmp_path / "q.db")
    try:
        queues = [QueueId("p", i) for i in range(4)]
        for n in range(40):
            await adapter.enqueue(queues[n % 4], StreamId("s", n % 4), [n])
        receivers = [adapter.create_receiver(q) for q in queues]
        batches = []
        for receiver in receivers:
            await receiver.initialize()
            batches.append(await receiver.get_messages(100))
        before = adapter.statistics()

        await asyncio.gather(
            *(r.messages_delivered(b) for r, b in zip(receivers, batches, strict=True)),
            *(adapter.enqueue(queues[n % 4], StreamId("s", n % 4), [n]) for n in range(40, 60)),
        )

        after = adapter.statistics()
        assert after.containers_deleted - before.containers_deleted == 40
        assert after.containers_committed - before.containers_committed == 20
        assert after.commits - before.commits <= 2
        assert [await adapter.pending_count(q) for q in queues] == [5, 5, 5, 5]
        for receiver in receivers:
            await receiver.shutdown()
    finally:
        await adapter.close()


async def test_sqlite_pending_count_drops_only_on_acknowledgement(tmp_path: Path) -> None:
    adapter = await _open_sqlite(tmp_path / "q.db")
    try:
        for n in range(5):
            await adapter.enqueue(Q0, StreamId("s", 1), [n])
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()

        batch = await receiver.get_messages(10)
        assert await adapter.pending_count(Q0) == 5
        await receiver.messages_delivered(batch[:2])

        assert await adapter.pending_count(Q0) == 3
        assert await adapter.pending_count(QueueId("p", 1)) == 0
        await receiver.shutdown()
    finally:
        await adapter.close()


async def test_sqlite_close_commits_pending_enqueues(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    adapter = await _open_sqlite(path)
    producers = [asyncio.create_task(adapter.enqueue(Q0, StreamId("s", 1), [n])) for n in range(50)]
    closing = asyncio.create_task(adapter.close())  # starts after every producer's first step
    async with asyncio.timeout(WAIT):
        await asyncio.gather(*producers, closing)

    reopened = await _open_sqlite(path)
    try:
        assert await reopened.pending_count(Q0) == 50
    finally:
        await reopened.close()


async def test_sqlite_table_has_documented_schema(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    adapter = await _open_sqlite(path)
    await adapter.close()

    conn = sqlite3.connect(path)
    try:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(stream_queue)")]
        indexes = [row[1] for row in conn.execute("PRAGMA index_list(stream_queue)")]
        indexed = {
            name: [row[2] for row in conn.execute(f"PRAGMA index_info({name})")] for name in indexes
        }
    finally:
        conn.close()
    assert columns == ["seq", "queue", "namespace", "key", "events", "size", "at"]
    assert ["queue", "seq"] in indexed.values()


async def test_sqlite_queue_file_without_write_times_opens_and_reads(tmp_path: Path) -> None:
    """A queue file whose table has no ``at`` column gains it; its old rows read 0.0."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE stream_queue (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                 " queue TEXT NOT NULL, namespace TEXT NOT NULL, key BLOB NOT NULL,"
                 " events BLOB NOT NULL, size INTEGER NOT NULL)")
    conn.execute("INSERT INTO stream_queue (queue, namespace, key, events, size) VALUES"
                 " (?, 'ns', ?, ?, 1)", (str(Q0), msgpack.packb("k"), msgpack.packb([7])))
    conn.commit()
    conn.close()
    adapter = await _open_sqlite(path)
    try:
        await adapter.enqueue(Q0, StreamId("ns", "k"), [8])
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        old, new = await receiver.get_messages(10)
        await receiver.shutdown()
    finally:
        await adapter.close()
    assert (old.events, old.enqueued_at) == ((7,), 0.0)
    assert new.events == (8,) and abs(new.enqueued_at - time.time()) < 60


def test_sqlite_factory_rejects_empty_path() -> None:
    with pytest.raises(ConfigurationError, match=r"SqliteAdapterFactory\.path"):
        SqliteAdapterFactory("")


_KILLED_PRODUCER = """
import asyncio, json, os, signal, sys
from orleanspy.streams.adapters.sqlite import SqliteAdapterFactory
from orleanspy.streams.ids import QueueId, StreamId

async def main():
    adapter = SqliteAdapterFactory(sys.argv[1]).create_adapter("killed")
    await adapter.open()
    q0, q1 = QueueId("killed", 0), QueueId("killed", 1)
    await asyncio.gather(
        *(adapter.enqueue(q0, StreamId("s", n % 3), [n, ("t", n)]) for n in range(30))
    )
    await adapter.enqueue(q1, StreamId("s", "unread"), ["never read"])
    receiver = adapter.create_receiver(q0)
    await receiver.initialize()
    batch = await receiver.get_messages(1000)
    await receiver.messages_delivered(batch[::3])
    kept = [[c.token.sequence, c.events[0]] for i, c in enumerate(batch) if i % 3]
    print(json.dumps(kept), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
async def test_sqlite_unacknowledged_containers_survive_kill_9(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _KILLED_PRODUCER,
        path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err.decode()
    kept = json.loads(out)
    assert len(kept) == 20

    adapter = await _open_sqlite(Path(path), "killed")
    try:
        receiver = adapter.create_receiver(QueueId("killed", 0))
        await receiver.initialize()
        batch = await receiver.get_messages(1000)
        unread = adapter.create_receiver(QueueId("killed", 1))
        await unread.initialize()
        (never_read,) = await unread.get_messages(10)
    finally:
        await adapter.close()

    assert [[c.token.sequence, c.events[0]] for c in batch] == kept
    assert [c.events for c in batch] == [(n, ("t", n)) for _, n in kept]
    assert [c.stream_id for c in batch] == [StreamId("s", n % 3) for _, n in kept]
    assert never_read.events == ("never read",)
    assert never_read.token > batch[-1].token


# -- generator ---------------------------------------------------------------------------


async def _generated(options: GeneratorOptions, queue: QueueId, max_count: int = 1000) -> list[Any]:
    adapter = GeneratorAdapterFactory(options).create_adapter(queue.provider)
    await adapter.open()
    receiver = adapter.create_receiver(queue)
    await receiver.initialize()
    batch = []
    async with asyncio.timeout(WAIT):
        while chunk := await receiver.get_messages(max_count):
            assert len(chunk) <= max_count
            batch.extend(chunk)
    assert await receiver.get_messages(10) == []
    await receiver.shutdown()
    await adapter.close()
    return batch


@pytest.mark.parametrize("index", [0, 5])
async def test_generator_produces_every_stream_of_its_queue_round_robin(index: int) -> None:
    options = GeneratorOptions(namespace="gen", streams_per_queue=3, events_per_stream=4)

    batch = await _generated(options, QueueId("p", index), max_count=5)

    streams = [StreamId("gen", f"{index}-{i}") for i in range(3)]
    assert len(batch) == 12
    assert [c.stream_id for c in batch] == streams * 4
    assert [c.token for c in batch] == [SequenceToken(k) for k in range(1, 13)]
    for stream in streams:
        events = [c.events for c in batch if c.stream_id == stream]
        assert events == [({"n": n, "stream": str(stream)},) for n in range(4)]
    assert all(c.size > 0 for c in batch)


async def test_generator_default_options_make_one_stream_of_100_events() -> None:
    batch = await _generated(GeneratorOptions(), QueueId("p", 2))

    assert len(batch) == 100
    assert {c.stream_id for c in batch} == {StreamId("generated", "2-0")}


async def test_generator_is_deterministic_across_receivers() -> None:
    options = GeneratorOptions(streams_per_queue=2, events_per_stream=5)

    first = await _generated(options, QueueId("p", 1), max_count=3)
    second = await _generated(options, QueueId("p", 1), max_count=7)

    assert first == second


async def test_generator_uses_custom_keys_and_payload() -> None:
    key = uuid.UUID(int=7)
    options = GeneratorOptions(
        streams_per_queue=2,
        events_per_stream=2,
        keys=lambda queue, i: key if i == 0 else queue.index * 100 + i,
        payload=lambda stream, n: (str(stream), n),
    )

    batch = await _generated(options, QueueId("p", 3))

    assert [c.stream_id.key for c in batch] == [key, 301, key, 301]
    assert [c.events for c in batch] == [
        ((f"generated/{key}", 0),),
        (("generated/301", 0),),
        ((f"generated/{key}", 1),),
        (("generated/301", 1),),
    ]


async def test_generator_enqueue_raises_read_only_stream_error() -> None:
    adapter = GeneratorAdapterFactory().create_adapter("p")
    await adapter.open()

    with pytest.raises(StreamError, match="read-only"):
        await adapter.enqueue(Q0, StreamId("s", 1), ["x"])
    assert adapter.is_rewindable is False


async def test_generator_duplicate_keys_raise_value_error_at_initialize() -> None:
    adapter = GeneratorAdapterFactory(
        GeneratorOptions(streams_per_queue=2, keys=lambda queue, i: "same")
    ).create_adapter("p")
    await adapter.open()
    receiver = adapter.create_receiver(Q0)

    with pytest.raises(ValueError, match="same key twice"):
        await receiver.initialize()


async def test_generator_receiver_lifecycle_is_checked() -> None:
    adapter = GeneratorAdapterFactory().create_adapter("p")
    with pytest.raises(RuntimeError, match="before open"):
        adapter.create_receiver(Q0)
    await adapter.open()
    receiver = adapter.create_receiver(Q0)
    with pytest.raises(RuntimeError, match="before initialize"):
        await receiver.get_messages(1)
    await receiver.initialize()
    await receiver.messages_delivered(await receiver.get_messages(1))
    await receiver.shutdown()
    await receiver.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        await receiver.get_messages(1)


@pytest.mark.parametrize(
    "options",
    [
        {"namespace": ""},
        {"namespace": 3},
        {"streams_per_queue": 0},
        {"events_per_stream": 0},
        {"events_per_stream": True},
        {"payload": "not callable"},
        {"keys": 1},
    ],
)
def test_generator_options_reject_bad_values(options: dict[str, Any]) -> None:
    field = next(iter(options))
    with pytest.raises(ConfigurationError, match=rf"GeneratorOptions\.{field}"):
        GeneratorOptions(**options)
