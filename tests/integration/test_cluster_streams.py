"""Stream queues balanced across a cluster of three real silo processes.

Each silo is ``orleanspy silo start --app tests.integration.cluster_stream_app`` with SQLite
membership (``membership.db``) and one stream provider ``s`` on the SQLite adapter
(``streams.db``): every silo reads the same queue file, and the lease table
(``stream_leases`` in ``membership.db``) makes sure one silo at a time pulls each of the 8
queues. The producer is the test process, enqueueing numbered events straight into the queue
file; ``NumberSink`` grains (implicit subscribers) append what they receive to one shared file.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from orleanspy.cluster.membership import SiloStatus, SqliteMembershipTable
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.leases import Lease, SqliteQueueLeaseStore
from orleanspy.streams.mapper import HashRingQueueMapper

from .silo_process import SiloLauncher, SiloProcess, poll_until, run_cli_to_end

pytestmark = pytest.mark.integration

APP = "tests.integration.cluster_stream_app"
CLUSTER = "streams"
QUEUES = 8
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5",
        "--table-refresh-period", "0.5")
DETECTION_BOUND = 5.0  # test_cluster.py checks a kill -9 is declared within this
SETTLE = 0.2
RETRY = 0.1
BALANCING_PERIOD = SETTLE + RETRY + 1.0  # one round, with room for a loaded 2-core machine
PER_STREAM = 200
CONFIG = f"""
[streams.s]
adapter = "sqlite:streams.db"
total_queues = {QUEUES}
pull_period = 0.02
balance_settle_time = {SETTLE}
lease_duration = 3.0
lease_retry_period = {RETRY}
"""


def stream_keys() -> list[int]:
    """Keys of streams spread over every queue (two streams per queue at least)."""
    mapper = HashRingQueueMapper(QUEUES, "s")
    per_queue: dict[str, list[int]] = defaultdict(list)
    key = 0
    while len(per_queue) < QUEUES or min(map(len, per_queue.values())) < 2:
        per_queue[str(mapper.queue_for(StreamId("numbers", key)))].append(key)
        key += 1
    return sorted(k for keys in per_queue.values() for k in keys[:2])


KEYS = stream_keys()


async def start_silo(launcher: SiloLauncher, config: Path) -> SiloProcess:
    return await launcher.start(
        "--membership", "sqlite:membership.db", "--cluster-id", CLUSTER, "--storage", "memory",
        "--reminders", "memory", "--config", str(config), *FAST, app=APP,
    )


async def leases(data_dir: Path) -> dict[str, Lease]:
    store = SqliteQueueLeaseStore(str(data_dir / "membership.db"), CLUSTER)
    try:
        return await store.read_all()
    finally:
        await store.close()


def owners(held: dict[str, Lease]) -> dict[str, set[str]]:
    now = time.time()
    by_owner: dict[str, set[str]] = defaultdict(set)
    for lease in held.values():
        if lease.expiry >= now:
            by_owner[lease.owner].add(lease.queue)
    return dict(by_owner)


def balanced_over(silos: list[SiloProcess]) -> Any:
    """Predicate: the live leases are held by exactly ``silos``, ⌊8/S⌋ or ⌈8/S⌉ each, all 8."""
    names = {s.silo_address for s in silos}
    low, high = QUEUES // len(names), -(-QUEUES // len(names))

    def check(held: dict[str, Lease]) -> bool:
        by_owner = owners(held)
        return (set(by_owner) == names and sum(map(len, by_owner.values())) == QUEUES
                and all(low <= len(qs) <= high for qs in by_owner.values()))

    return check


async def wait_balanced(data_dir: Path, silos: list[SiloProcess], timeout: float) -> None:
    await poll_until(lambda: leases(data_dir), balanced_over(silos), timeout=timeout,
                     interval=0.05)


async def status_queues(data_dir: Path) -> dict[str, set[str]]:
    """What ``orleanspy cluster status`` says each reachable silo owns (its running agents)."""
    import json

    code, out, err = await run_cli_to_end(
        "cluster", "status", "--membership", "sqlite:membership.db", "--data-dir",
        str(data_dir), "--cluster-id", CLUSTER, "--json",
    )
    assert code == 0, err
    return {r["silo"]: set(r["queues"]["s"]) for r in json.loads(out) if r["queues"]}


async def streams_rows(data_dir: Path) -> list[dict[str, Any]]:
    """``orleanspy streams status --json``: one row per queue, from the silo that owns it."""
    import json

    code, out, err = await run_cli_to_end(
        "streams", "status", "--membership", "sqlite:membership.db", "--data-dir",
        str(data_dir), "--cluster-id", CLUSTER, "--json",
    )
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


async def start_cluster(launcher: SiloLauncher, config: Path, n: int) -> list[SiloProcess]:
    silos = [await start_silo(launcher, config) for _ in range(n)]
    await wait_balanced(launcher.data_dir, silos, timeout=20)
    return silos


async def publish(data_dir: Path, numbers: range, pause: float = 0.01) -> None:
    """The producer: enqueue number n on every stream, then n + 1, ... into the queue file
    (``pause`` paces the load so that it spans the membership change)."""
    adapter = SqliteAdapterFactory(str(data_dir / "streams.db")).create_adapter("s")
    mapper = HashRingQueueMapper(QUEUES, "s")
    await adapter.open()
    try:
        for n in numbers:
            await asyncio.gather(*(
                adapter.enqueue(mapper.queue_for(StreamId("numbers", k)),
                                StreamId("numbers", k), [n])
                for k in KEYS
            ))
            await asyncio.sleep(pause)
    finally:
        await adapter.close()


def read_received(data_dir: Path) -> dict[int, list[int]]:
    got: dict[int, list[int]] = defaultdict(list)
    path = data_dir / "received.txt"
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                got[int(parts[0])].append(int(parts[1]))
    return got


async def wait_all_received(data_dir: Path, timeout: float) -> dict[int, list[int]]:
    async def probe() -> dict[int, list[int]]:
        return read_received(data_dir)

    return await poll_until(
        probe, lambda g: all(set(g[k]) >= set(range(PER_STREAM)) for k in KEYS),
        timeout=timeout, interval=0.2,
    )


def assert_in_order(got: dict[int, list[int]]) -> None:
    for key in KEYS:
        first_seen: list[int] = []
        seen: set[int] = set()
        for n in got[key]:
            if n not in seen:
                seen.add(n)
                first_seen.append(n)
        assert first_seen == list(range(PER_STREAM)), f"stream {key} out of order"


def write_config(folder: Path) -> Path:
    """The config file, in ``folder``: its relative SQLite paths resolve against it (give the
    silos' data dir, where the tests read the queue)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "streams.toml"
    config.write_text(CONFIG)
    return config


async def test_cluster_streams_kill_9_queues_owned_again_and_every_number_arrives(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    data_dir = silo_launcher.data_dir
    silos = await start_cluster(silo_launcher, write_config(silo_launcher.data_dir), 3)
    victim, survivors = silos[1], [silos[0], silos[2]]
    producer = asyncio.create_task(publish(data_dir, range(PER_STREAM)))
    try:
        await poll_until(lambda: asyncio.sleep(0, read_received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= len(KEYS) * 20, timeout=20)
        assert not producer.done()
        killed_at = time.monotonic()
        await victim.kill()
        table = SqliteMembershipTable(str(data_dir / "membership.db"), cluster_id=CLUSTER)
        try:
            await poll_until(table.read_all, lambda d: any(
                str(e.silo) == victim.silo_address and e.status is SiloStatus.DEAD
                for e in d.entries()), timeout=DETECTION_BOUND + 5, interval=0.05)
        finally:
            await table.close()
        declared = time.monotonic() - killed_at
        await wait_balanced(data_dir, survivors, timeout=DETECTION_BOUND + BALANCING_PERIOD)
        owned_again = time.monotonic() - killed_at
        assert owned_again <= DETECTION_BOUND + BALANCING_PERIOD, (
            f"declared dead after {declared:.1f} s, queues owned again after {owned_again:.1f} s"
        )
        assert owned_again - declared <= BALANCING_PERIOD, (declared, owned_again)
        await producer
        got = await wait_all_received(data_dir, timeout=60)
        assert_in_order(got)  # at least once (the victim's unacknowledged events come again)
        status = await status_queues(data_dir)
        assert status == owners(await leases(data_dir))
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)


async def test_cluster_streams_graceful_stop_hands_off_and_delivers_every_number_once(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    data_dir = silo_launcher.data_dir
    silos = await start_cluster(silo_launcher, write_config(silo_launcher.data_dir), 3)
    leaving, staying = silos[1], [silos[0], silos[2]]
    producer = asyncio.create_task(publish(data_dir, range(PER_STREAM)))
    try:
        await poll_until(lambda: asyncio.sleep(0, read_received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= len(KEYS) * 20, timeout=20)
        assert not producer.done()
        assert await leaving.terminate() == 0
        await wait_balanced(data_dir, staying, timeout=10)
        await producer
        got = await wait_all_received(data_dir, timeout=60)
        assert_in_order(got)
        extra = {k: len(got[k]) - PER_STREAM for k in KEYS if len(got[k]) != PER_STREAM}
        assert not extra, f"duplicates (stream: count) after a planned hand-off: {extra}"
        assert await status_queues(data_dir) == owners(await leases(data_dir))
        rows = await streams_rows(data_dir)
        by_silo: dict[str, set[str]] = {}
        for row in rows:
            assert row["provider"] == "s" and row["failures"] == 0
            assert row["cache"] <= row["cache_max"]
            by_silo.setdefault(row["silo"], set()).add(row["queue"])
        assert by_silo == owners(await leases(data_dir))
        assert len(rows) == QUEUES
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)


async def test_cluster_streams_joining_silo_takes_its_share_of_queues(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    data_dir = silo_launcher.data_dir
    config = write_config(silo_launcher.data_dir)
    first = await start_cluster(silo_launcher, config, 2)
    before = owners(await leases(data_dir))
    assert sorted(map(len, before.values())) == [4, 4]
    assert await status_queues(data_dir) == before
    producer = asyncio.create_task(publish(data_dir, range(PER_STREAM)))
    try:
        await poll_until(lambda: asyncio.sleep(0, read_received(data_dir)),
                         lambda g: sum(map(len, g.values())) >= len(KEYS) * 20, timeout=20)
        joiner = await start_silo(silo_launcher, config)
        await wait_balanced(data_dir, [*first, joiner], timeout=10)
        after = owners(await leases(data_dir))
        assert len(after[joiner.silo_address]) in (2, 3)
        moved = sum(len(qs - after.get(owner, set())) for owner, qs in before.items())
        assert moved == len(after[joiner.silo_address])  # only the joiner's share moved
        assert await status_queues(data_dir) == after
        await producer
        got = await wait_all_received(data_dir, timeout=60)
        assert_in_order(got)
        extra = {k: len(got[k]) - PER_STREAM for k in KEYS if len(got[k]) != PER_STREAM}
        assert not extra, f"duplicates (stream: count) after a planned hand-off: {extra}"
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)


async def test_cluster_streams_explicit_subscriptions_reach_agents_on_other_silos(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    """Explicit subscriptions to streams the agents already deliver: the rendezvous of a
    stream, the consumer and the agent of the stream's queue are spread over three silos, and
    the rendezvous must tell the agent on its silo before subscribe returns, so every consumer
    gets every number published after it subscribed, once and in order."""
    data_dir = silo_launcher.data_dir
    config = write_config(silo_launcher.data_dir)
    silos = await start_cluster(silo_launcher, config, 2)
    cs = [s.client(cluster_id=CLUSTER) for s in silos]
    for c in cs:
        await c.connect()
    adapter = SqliteAdapterFactory(str(data_dir / "streams.db")).create_adapter("s")
    mapper = HashRingQueueMapper(QUEUES, "s")
    await adapter.open()

    async def publish_explicit(numbers: range) -> None:
        for n in numbers:
            await asyncio.gather(*(
                adapter.enqueue(mapper.queue_for(StreamId("explicit", k)),
                                StreamId("explicit", k), [n])
                for k in KEYS
            ))

    def received() -> dict[int, list[int]]:
        got: dict[int, list[int]] = defaultdict(list)
        path = data_dir / "explicit.txt"
        if path.exists():
            for line in path.read_text().splitlines():
                key, n, _ = line.split()
                got[int(key)].append(int(n))
        return got

    try:
        # Before anyone subscribes: the agents read these, register the streams with their
        # rendezvous (placed on the agents' silos) and acknowledge them.
        await publish_explicit(range(5))
        await poll_until(lambda: adapter_backlog(data_dir), lambda n: n == 0, timeout=30,
                         interval=0.1)
        # A third silo joins and takes queues: their new agents register the streams with
        # rendezvous that stay on the other silos.
        joiner = await start_silo(silo_launcher, config)
        silos.append(joiner)
        await wait_balanced(data_dir, silos, timeout=20)
        cs.append(joiner.client(cluster_id=CLUSTER))
        await cs[-1].connect()
        await publish_explicit(range(5, 10))
        await poll_until(lambda: adapter_backlog(data_dir), lambda n: n == 0, timeout=30,
                         interval=0.1)
        hosts = set()
        for i, key in enumerate(KEYS):  # consumers activated through every gateway
            hosts.add(await cs[i % 3].get_grain("ExplicitSink", key).subscribe())
        assert len(hosts) >= 2
        await publish_explicit(range(10, 60))
        got = await poll_until(lambda: asyncio.sleep(0, received()),
                               lambda g: all(len(g[k]) >= 50 for k in KEYS), timeout=30,
                               interval=0.2)
        for key in KEYS:
            assert got[key] == list(range(10, 60)), f"stream {key}: {got[key][:10]}..."
    finally:
        await adapter.close()
        for c in cs:
            await c.close()


async def adapter_backlog(data_dir: Path) -> int:
    """Rows still in the shared SQLite queue file (enqueued, not yet acknowledged)."""
    import sqlite3

    def count() -> int:
        conn = sqlite3.connect(data_dir / "streams.db")
        try:
            return int(conn.execute("SELECT COUNT(*) FROM stream_queue").fetchone()[0])
        finally:
            conn.close()

    return await asyncio.to_thread(count)
