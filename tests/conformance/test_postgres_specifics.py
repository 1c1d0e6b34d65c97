"""What the PostgreSQL back ends promise beyond the conformance suites: schema versions,
checksums, leases with epochs and fenced acknowledgements, LISTEN/NOTIFY wake-ups, processes
racing on the membership table, and recovery from connections the server drops
(``pg_terminate_backend`` of this test's own connections only).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from orleanspy._util.postgres import PostgresClient, split_schema
from orleanspy.cluster.membership import SiloStatus
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.errors import (
    InconsistentStateError,
    LeaseLostError,
    StorageCorruptionError,
    StorageError,
)
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.storage.postgres import PostgresGrainStorage
from orleanspy.streams.adapters import postgres as postgres_adapter
from orleanspy.streams.adapters import postgres_writer
from orleanspy.streams.adapters.postgres import PostgresAdapterFactory, PostgresQueueAdapter
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.postgres_leases import PostgresQueueLeaseStore
from orleanspy.testing.membership_conformance import sample_entry

REPO_ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0
GRAIN = GrainId("Counter", "pg")
Q0 = QueueId("p", 0)
STREAM = StreamId("s", 1)


async def _sql(url: str, sql: str, *args: Any) -> Any:
    dsn, schema = split_schema(url)
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


# -- schema versions -----------------------------------------------------------------------


async def test_a_schema_newer_than_the_code_is_refused(postgres_url: str) -> None:
    storage = PostgresGrainStorage(postgres_url)
    await storage.open()
    await storage.close()
    await _sql(postgres_url, "UPDATE schema_versions SET version = 99 WHERE component = $1",
               "storage")

    newer = PostgresGrainStorage(postgres_url)
    with pytest.raises(StorageError, match=r"version 99; this orleanspy knows versions up to 1"):
        await newer.open()
    await newer.close()


async def test_migrations_run_once_when_many_clients_open_at_once(postgres_url: str) -> None:
    steps = ("CREATE TABLE counted (n int); INSERT INTO counted VALUES (1)",
             "INSERT INTO counted VALUES (2)")
    clients = [PostgresClient(postgres_url, "counting", steps) for _ in range(6)]
    try:
        async with asyncio.timeout(WAIT):
            await asyncio.gather(*(client.open() for client in clients))
    finally:
        for client in clients:
            await client.close()

    assert [r[0] for r in await _sql(postgres_url, "SELECT n FROM counted ORDER BY n")] == [1, 2]
    rows = await _sql(postgres_url, "SELECT version FROM schema_versions WHERE component = $1",
                      "counting")
    assert rows[0][0] == 2


# -- grain storage -------------------------------------------------------------------------


async def test_the_client_reuses_bounds_and_replaces_its_connections(postgres_url: str) -> None:
    """Calls in turn share one connection; no more than ``max_size`` are open at once (the
    others wait); a call cancelled in the middle of its statement closes its connection, and
    the calls after it run on others."""
    client = PostgresClient(postgres_url, "pool", [], max_size=2)
    pid = "SELECT pg_backend_pid()"
    await client.open()
    try:
        assert len({await client.run("pid", lambda c: c.fetchval(pid)) for _ in range(5)}) == 1
        slow = await asyncio.gather(*(client.run("pid", lambda c: c.fetchval(
            f"{pid} FROM pg_sleep(0.2)")) for _ in range(5)))
        assert len(set(slow)) == 2
        stuck = asyncio.create_task(client.run("sleep", lambda c: c.execute("SELECT pg_sleep(5)")))
        await asyncio.sleep(0.1)  # let it send its statement
        stuck.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stuck
        after = await asyncio.gather(*(client.run("pid", lambda c: c.fetchval(pid))
                                       for _ in range(4)))
        assert len(after) == 4 and len(set(after)) <= 2
    finally:
        await client.close()


async def test_a_value_changed_outside_orleanspy_fails_its_checksum(postgres_url: str) -> None:
    storage = PostgresGrainStorage(postgres_url)
    try:
        etag = await storage.write(GRAIN, "state", b"v1", None)
        await _sql(postgres_url, "UPDATE grain_state SET data = $1", b"tampered")

        with pytest.raises(StorageCorruptionError, match="checksum"):
            await storage.read(GRAIN, "state")
        with pytest.raises(InconsistentStateError):
            await storage.write(GRAIN, "state", b"v2", etag + "0")
    finally:
        await storage.close()


# -- leases --------------------------------------------------------------------------------


@pytest.fixture
async def leases(postgres_url: str) -> AsyncIterator[PostgresQueueLeaseStore]:
    store = PostgresQueueLeaseStore(postgres_url, "unit")
    try:
        yield store
    finally:
        await store.close()


async def test_lease_is_exclusive_until_released_expired_or_its_owner_is_dead(
    leases: PostgresQueueLeaseStore,
) -> None:
    assert await leases.acquire("q-0", "a", 30)
    assert not await leases.acquire("q-0", "b", 30)
    assert await leases.acquire("q-0", "a", 30)
    assert not await leases.acquire("q-0", "b", 30, dead={"c"})
    assert await leases.acquire("q-0", "b", 30, dead={"a"})
    assert (await leases.read_all())["q-0"].owner == "b"
    await leases.release("a", ["q-0"])
    assert (await leases.read_all())["q-0"].owner == "b"
    await leases.release("b", ["q-0"])
    assert await leases.read_all() == {}
    assert await leases.acquire("q-0", "c", 30)


async def test_lease_expires_and_a_renewal_reports_what_the_owner_lost(
    leases: PostgresQueueLeaseStore,
) -> None:
    assert await leases.acquire("q-1", "a", -1)
    assert await leases.acquire("q-2", "a", 30)
    assert await leases.acquire("q-1", "b", 30)
    assert await leases.renew("a", ["q-1", "q-2"], 30) == {"q-2"}


async def test_the_epoch_grows_at_each_change_of_owner_and_survives_a_release(
    leases: PostgresQueueLeaseStore,
) -> None:
    assert await leases.epoch("q-0") == 0
    assert await leases.acquire("q-0", "a", 30)
    assert await leases.acquire("q-0", "a", 30)  # a renewal: same holder, same epoch
    assert await leases.epoch("q-0") == 1
    assert await leases.acquire("q-0", "b", 30, dead={"a"})
    await leases.release("b", ["q-0"])
    assert await leases.acquire("q-0", "a", 30)  # a again, after b: a new holding
    assert await leases.epoch("q-0") == 3


async def test_an_acknowledgement_after_the_lease_moved_is_refused_and_deletes_nothing(
    postgres_url: str, leases: PostgresQueueLeaseStore,
) -> None:
    adapter = PostgresAdapterFactory(postgres_url).create_adapter("p")
    await adapter.open()
    try:
        assert adapter.fence_with(leases.fence("silo-a"))
        assert await leases.acquire(str(Q0), "silo-a", 30)
        await adapter.enqueue(Q0, STREAM, ["e1"])
        await adapter.enqueue(Q0, STREAM, ["e2"])
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        first, second = await receiver.get_messages(10)
        await receiver.messages_delivered([first])  # still a's: deleted
        assert await adapter.pending_count(Q0) == 1

        assert await leases.acquire(str(Q0), "silo-b", 30, dead={"silo-a"})
        with pytest.raises(LeaseLostError, match="silo-a"):
            await receiver.messages_delivered([second])
        assert await adapter.pending_count(Q0) == 1  # left for b to deliver
        await receiver.shutdown()
    finally:
        await adapter.close()


# -- LISTEN/NOTIFY -------------------------------------------------------------------------


async def test_a_reader_is_woken_by_another_adapters_enqueue_and_idle_reads_query_nothing(
    postgres_url: str,
) -> None:
    writer = PostgresAdapterFactory(postgres_url).create_adapter("p")
    reader = PostgresAdapterFactory(postgres_url).create_adapter("p")
    await writer.open()
    await reader.open()
    try:
        receiver = reader.create_receiver(Q0)
        await receiver.initialize()
        assert await receiver.get_messages(10) == []  # drained
        queries = 0
        run = reader.client.run

        async def counting(*args: Any, **kwargs: Any) -> Any:
            nonlocal queries
            queries += 1
            return await run(*args, **kwargs)

        reader.client.run = counting  # type: ignore[method-assign]
        for _ in range(5):
            assert await receiver.get_messages(10) == []
        assert queries == 0  # no notification: no query

        woken = asyncio.Event()
        receiver.on_arrival = woken.set
        await writer.enqueue(Q0, STREAM, ["hello"])
        async with asyncio.timeout(WAIT):
            await woken.wait()
        [container] = await receiver.get_messages(10)
        assert container.events == ("hello",)
        assert queries == 1
    finally:
        await writer.close()
        await reader.close()


async def test_notifications_right_after_a_read_wake_the_reader_once_the_read_gap_passed(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Commits within ``READ_GAP`` of a read wake the reader when the gap has passed (one
    read takes them all), not at each commit; nothing is left unread."""
    monkeypatch.setattr(postgres_adapter, "READ_GAP", 1.0)
    loop = asyncio.get_running_loop()
    adapter = PostgresAdapterFactory(postgres_url).create_adapter("p")
    await adapter.open()
    try:
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        wakes: list[float] = []
        woken = asyncio.Event()
        receiver.wake_on_arrival(lambda: (wakes.append(loop.time()), woken.set()))
        before = loop.time()
        assert await receiver.get_messages(10) == []  # a query: the gap starts
        for n in range(3):
            await adapter.enqueue(Q0, STREAM, [n])  # each commit notifies the reader
        assert wakes == []
        async with asyncio.timeout(WAIT):
            await woken.wait()
        assert wakes[0] >= before + 1.0
        events = [e for c in await receiver.get_messages(10) for e in c.events]
        assert events == [0, 1, 2]
        await receiver.shutdown()
    finally:
        await adapter.close()


async def test_a_receiver_queries_after_check_every_without_a_notification(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A row committed with no notification (as if the listening connection had been lost
    unnoticed) is read once ``CHECK_EVERY`` has passed since the last query."""
    adapter = PostgresAdapterFactory(postgres_url).create_adapter("p")
    await adapter.open()
    try:
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        assert await receiver.get_messages(10) == []
        await _sql(postgres_url, "INSERT INTO stream_queue (queue, namespace, key, events, size) "
                   "VALUES ($1, 's', $2, $3, 1)", str(Q0), b"\x01", b"\x91\x07")
        assert await receiver.get_messages(10) == []  # not told, not yet due
        monkeypatch.setattr(postgres_adapter, "CHECK_EVERY", 0.0)
        [container] = await receiver.get_messages(10)
        assert container.events == (7,)
        await receiver.shutdown()
    finally:
        await adapter.close()


@pytest.mark.parametrize("streams", [1, 4])
async def test_writers_of_several_processes_commit_each_queues_rows_in_seq_order(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, streams: int,
) -> None:
    """Three adapters (as three processes) flush rows at once while a fourth reads them
    (with one stream per adapter, a flush is one row; with four on two queues, rows of both
    queues): the writers take the queues' locks in one order (none waits for another
    forever), and a reader that saw ``seq`` n never finds an older row later, so reading past
    the last row seen misses nothing."""
    monkeypatch.setattr(postgres_adapter, "CHECK_EVERY", 0.0)  # the reader queries each time
    queues = (Q0,) if streams == 1 else (Q0, QueueId("p", 1))
    writers = [PostgresAdapterFactory(postgres_url).create_adapter("p") for _ in range(3)]
    reader = PostgresAdapterFactory(postgres_url).create_adapter("p")
    for adapter in (*writers, reader):
        await adapter.open()
    done = asyncio.Event()
    got: dict[QueueId, list[Any]] = {q: [] for q in queues}
    rounds = 320 // streams

    async def produce(w: int, p: int) -> None:
        stream = StreamId("s", f"{w}-{p}")
        for n in range(rounds):
            await asyncio.gather(*(writers[w].enqueue(q, stream, [(w, p, n)]) for q in queues))

    async def read(queue: QueueId) -> None:
        receiver = reader.create_receiver(queue)
        await receiver.initialize()
        try:
            while True:
                finished = done.is_set()
                batch = await receiver.get_messages(100)
                got[queue] += [e for c in batch for e in c.events]
                if finished and not batch:
                    return
                await asyncio.sleep(0.001)
        finally:
            await receiver.shutdown()

    try:
        readers = [asyncio.create_task(read(q)) for q in queues]
        async with asyncio.timeout(WAIT):
            await asyncio.gather(*(produce(w, p) for w in range(3) for p in range(streams)))
            done.set()
            await asyncio.gather(*readers)
    finally:
        for adapter in (*writers, reader):
            await adapter.close()
    expected = sorted((w, p, n) for w in range(3) for p in range(streams) for n in range(rounds))
    for queue in queues:
        assert sorted(tuple(e) for e in got[queue]) == expected


async def test_commits_within_the_notify_gap_are_covered_by_one_notification_after_them(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process is notified of a queue's first commit at once, and of the commits
    within ``NOTIFY_GAP`` after it by one notification once the gap has passed: its reader,
    which read after the first, is woken again and finds every row."""
    monkeypatch.setattr(postgres_writer, "NOTIFY_GAP", 0.5)
    loop = asyncio.get_running_loop()
    writer = PostgresAdapterFactory(postgres_url).create_adapter("p")
    reader = PostgresAdapterFactory(postgres_url).create_adapter("p")
    await writer.open()
    await reader.open()
    try:
        receiver = reader.create_receiver(Q0)
        await receiver.initialize()
        assert await receiver.get_messages(10) == []
        wakes: list[float] = []
        woken = asyncio.Event()
        receiver.wake_on_arrival(lambda: (wakes.append(loop.time()), woken.set()))
        before = loop.time()
        await writer.enqueue(Q0, STREAM, [0])
        async with asyncio.timeout(WAIT):
            await woken.wait()
        woken.clear()
        assert [e for c in await receiver.get_messages(10) for e in c.events] == [0]
        for n in (1, 2):
            await writer.enqueue(Q0, STREAM, [n])
        async with asyncio.timeout(WAIT):
            await woken.wait()
        assert len(wakes) == 2 and wakes[1] >= before + 0.5
        assert [e for c in await receiver.get_messages(10) for e in c.events] == [1, 2]
        await receiver.shutdown()
    finally:
        await writer.close()
        await reader.close()


async def test_closing_sends_the_notifications_owed_at_once(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgres_writer, "NOTIFY_GAP", 3600.0)
    writer = PostgresAdapterFactory(postgres_url).create_adapter("p")
    reader = PostgresAdapterFactory(postgres_url).create_adapter("p")
    await writer.open()
    await reader.open()
    try:
        receiver = reader.create_receiver(Q0)
        await receiver.initialize()
        woken = asyncio.Event()
        receiver.wake_on_arrival(woken.set)
        await writer.enqueue(Q0, STREAM, [0])  # notified at once
        async with asyncio.timeout(WAIT):
            await woken.wait()
        woken.clear()
        assert len(await receiver.get_messages(10)) == 1
        await writer.enqueue(Q0, STREAM, [1])  # owed
        await writer.close()
        async with asyncio.timeout(WAIT):
            await woken.wait()
        [container] = await receiver.get_messages(10)
        assert container.events == (1,)
        await receiver.shutdown()
    finally:
        await writer.close()
        await reader.close()


# -- membership across processes -----------------------------------------------------------

_RACER = """
import asyncio, dataclasses, json, sys
from orleanspy.cluster.membership import SuspectVote
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.ids import SiloAddress

async def main(url, n, rounds):
    table = PostgresMembershipTable(url, cluster_id="race")
    target = SiloAddress("127.0.0.1", 11111, 1)
    me = SiloAddress("127.0.0.1", 20000 + n, 1)
    wins = []
    try:
        for i in range(rounds):
            data = await table.read_all()
            entry, etag = data.get(target)
            entry = dataclasses.replace(entry, suspect_votes=(SuspectVote(me, float(i)),))
            if await table.update_row(entry, etag, data.version):
                wins.append(data.version.version)
    finally:
        await table.close()
    print(json.dumps(wins), flush=True)

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


@pytest.mark.slow
async def test_membership_processes_win_exactly_once_per_version(postgres_url: str) -> None:
    """Four processes race 40 votes each on one row: each version is won exactly once."""
    silo = SiloAddress("127.0.0.1", 11111, 1)
    table = PostgresMembershipTable(postgres_url, cluster_id="race")
    await table.open()
    assert await table.insert_row(sample_entry(silo), (await table.read_all()).version)
    start = (await table.read_all()).version.version
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path])}

    async def racer(n: int) -> list[int]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _RACER, postgres_url, str(n), "40",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        wins: list[int] = json.loads(out)
        return wins

    try:
        async with asyncio.timeout(60):
            results = await asyncio.gather(*(racer(n) for n in range(4)))
        end = (await table.read_all()).version.version
        row = (await table.read_row(silo)).get(silo)
    finally:
        await table.close()

    wins = sorted(v for result in results for v in result)
    assert wins == list(range(start, end)), "exactly one winner per version, no gaps"
    assert end - start >= 40
    assert row is not None
    assert row[0].status is SiloStatus.ACTIVE
    assert len(row[0].suspect_votes) == 1


# -- dropped connections -------------------------------------------------------------------


async def _terminator(url: str, stop: asyncio.Event) -> int:
    """Terminate this test's connections (by application name) every 300 ms until
    ``stop``."""
    dsn, schema = split_schema(url)
    conn = await asyncpg.connect(dsn)
    killed = 0
    try:
        while not stop.is_set():
            killed += len(await conn.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = $1 AND pid <> pg_backend_pid()",
                f"orleanspy:{schema}"))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.3)
    finally:
        await conn.close()
    return killed


@pytest.mark.slow
async def test_dropped_connections_lose_nothing_acknowledged(postgres_url: str) -> None:
    """Grain-state writes and a stream's enqueues, reads and acknowledgements run while the
    server drops their connections: every acknowledged write and event is there afterwards;
    an event is delivered twice only if its enqueue failed and was sent again (the
    at-least-once window); the same instances keep working, none reopened."""
    storage = PostgresGrainStorage(postgres_url)
    adapter: PostgresQueueAdapter = PostgresAdapterFactory(postgres_url).create_adapter("p")
    await storage.open()
    await adapter.open()
    receiver = adapter.create_receiver(Q0)
    await receiver.initialize()
    stop = asyncio.Event()
    counts: dict[int, int] = {}
    resent: set[int] = set()
    received: list[int] = []
    produced = asyncio.Event()

    async def count(grain: int) -> None:
        grain_id = GrainId("Counter", grain)
        etag, value, known = None, 0, True
        while not stop.is_set():
            try:
                if not known:  # a write failed: what is there now?
                    stored = await storage.read(grain_id, "state")
                    etag, value = (None, 0) if stored is None else (stored.etag,
                                                                    int(stored.data))
                    known = True
                etag = await storage.write(grain_id, "state", b"%d" % (value + 1), etag)
                value += 1
            except StorageError:
                known = False
        if not known:
            stored = await storage.read(grain_id, "state")
            value = 0 if stored is None else int(stored.data)
        counts[grain] = value

    async def produce() -> None:
        for n in range(600):
            while True:
                try:
                    await adapter.enqueue(Q0, STREAM, [n])
                    break
                except StorageError:
                    resent.add(n)
        produced.set()

    arrived = asyncio.Event()
    receiver.on_arrival = arrived.set

    async def consume() -> None:
        unacknowledged: list[Any] = []  # a failed acknowledgement is sent again
        while not (produced.is_set() and len(set(received)) == 600 and not unacknowledged):
            batch = []
            try:
                batch = await receiver.get_messages(50)
                for container in batch:
                    received.extend(container.events)
                unacknowledged += batch
                await receiver.messages_delivered(unacknowledged)
                unacknowledged = []
            except StorageError:
                continue  # read or acknowledge again at once
            if not batch:  # drained: wait for a notification (or a period, as an agent)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(arrived.wait(), 0.1)
                arrived.clear()

    killer = asyncio.create_task(_terminator(postgres_url, stop))
    counters = [asyncio.create_task(count(g)) for g in range(4)]
    try:
        async with asyncio.timeout(90):
            await asyncio.gather(produce(), consume())
            stop.set()
            await asyncio.gather(*counters)
            killed = await killer
    finally:
        stop.set()
        for task in (*counters, killer):
            task.cancel()
    try:
        assert killed > 0
        for grain, value in counts.items():
            stored = await storage.read(GrainId("Counter", grain), "state")
            assert stored is not None and int(stored.data) == value
        assert sorted(set(received)) == list(range(600))
        duplicated = {n for n in received if received.count(n) > 1}
        assert duplicated <= resent
        per_stream_order = [n for i, n in enumerate(received) if n not in received[:i]]
        assert per_stream_order == sorted(per_stream_order)
        assert await adapter.pending_count(Q0) == 0
    finally:
        await receiver.shutdown()
        await adapter.close()
        await storage.close()
