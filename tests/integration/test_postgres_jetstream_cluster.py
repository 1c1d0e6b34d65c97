"""Three silo processes with membership, grain state and reminders in PostgreSQL and their
stream queues in NATS JetStream (a ``nats-server`` of the test's own), under a grain-state,
stream and reminder load, through three faults in turn: a kill -9 of one silo while the
server terminates every PostgreSQL connection of the cluster (``pg_terminate_backend`` of
this test's schema only) every 300 ms, then a SIGKILL and restart of the NATS server.

Nothing acknowledged is lost (grain state, stream events); an event arrives twice only if it
was enqueued before the kill and either its queue was the killed silo's (the silo could not
acknowledge what it had delivered, and the queue's next owner delivers it) or the killed
silo ran the consumer that first handled it (the consumer died before its answer reached
the queue's agent, which delivers it again to the consumer's next activation); each
reminder ticks once per period, with no double tick and no missing one outside the failover
window of the killed silo; and the surviving silos recover from both servers' faults by
themselves."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient
from orleanspy.cluster.membership import SiloStatus
from orleanspy.options import ClientOptions
from orleanspy.streams.adapters.nats import NatsAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.leases import Lease
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.postgres_leases import PostgresQueueLeaseStore

from .backends import (
    FAST,
    NatsServer,
    enqueue_numbers,
    statuses,
    streams_config,
    terminate_backends,
    until_received,
)
from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration

CLUSTER = "pg-js-itest"
DETECTION = 15.0
PERIOD = 1.0  # the reminders' period
TICKERS = 6
COUNTERS = 4
KEYS = list(range(8))  # stream keys
#: After the killed silo is declared dead: the survivors read the table (0.5 s), take its
#: reminders over and place its grains anew; a tick due meanwhile may be missed.
FAILOVER = 2.5


async def leases(url: str) -> dict[str, Lease]:
    store = PostgresQueueLeaseStore(url, CLUSTER)
    try:
        return await store.read_all()
    finally:
        await store.close()


def read_ticks(data_dir: Path) -> dict[str, list[tuple[int, float, int]]]:
    """``PacedTicker`` lines: per ticker, (tick index, due time, pid) in arrival order."""
    got: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    path = data_dir / "ticks.txt"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if len(parts) == 4:
                got[parts[0]].append((int(parts[1]), float(parts[2]), int(parts[3])))
    return got


async def test_a_cluster_on_postgres_and_jetstream_rides_out_kill_9_and_server_faults(
    postgres_url: str, nats_server: NatsServer, silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    pg = postgres_url
    data_dir = silo_launcher.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)  # the sinks and tickers write there
    nats_url = nats_server.url()
    config = streams_config(tmp_path, nats_url)
    args = ("--membership", pg, "--storage", pg, "--reminders", pg, "--cluster-id", CLUSTER,
            "--config", str(config), "--min-reminder-period", "0.5",
            "--app", "tests.integration.app", *FAST)
    silos = list(await asyncio.gather(*(  # three at once: each may take longer to start
        silo_launcher.start(*args, app="tests.integration.cluster_stream_app", timeout=30)
        for _ in range(3))))
    await poll_until(lambda: statuses(pg, CLUSTER),
                     lambda s: list(s.values()).count(SiloStatus.ACTIVE) == 3,
                     timeout=DETECTION)
    client = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, gateways=tuple(s.gateway for s in silos), membership=pg,
        gateway_refresh_period=0.5, reconnect_delay=0.2, reconnect_delay_max=1.0))
    adapter = NatsAdapterFactory(nats_url, enqueue_timeout=1.0).create_adapter("s")
    acknowledged: dict[int, list[int]] = defaultdict(list)
    attempts, acks = [0] * COUNTERS, [0] * COUNTERS
    stop, stop_pg = asyncio.Event(), asyncio.Event()

    async def count(key: int) -> None:
        """Add 1 to counter ``key`` again and again: ``acks`` the calls that returned."""
        counter: Any = client.get_grain("Counter", f"c{key}")
        while not stop.is_set():
            attempts[key] += 1
            try:
                await counter.add(1)
                acks[key] += 1
            except Exception:
                await asyncio.sleep(0.1)  # the grain's silo died, or PostgreSQL dropped it
            await asyncio.sleep(0.02)

    tasks: list[asyncio.Task[Any]] = []
    try:
        await client.connect()
        await adapter.open()
        pids = [await client.get_grain("PacedTicker", f"t{i}").start(PERIOD)
                for i in range(TICKERS)]
        victim = next(s for s in silos if s.pid == pids[0])  # hosts ticker t0
        survivors = [s for s in silos if s is not victim]
        tasks.append(asyncio.create_task(enqueue_numbers(
            adapter, range(10**6), keys=KEYS, pause_every=1, pause=0.03,
            acknowledged=acknowledged, stop=stop.is_set)))
        tasks += [asyncio.create_task(count(k)) for k in range(COUNTERS)]
        await until_received(data_dir, lambda g: sum(map(len, g.values())) >= 200, 30)
        await poll_until(lambda: asyncio.sleep(0, read_ticks(data_dir)),
                         lambda t: len(t) == TICKERS and all(len(v) >= 2 for v in t.values()),
                         timeout=10)

        # 1. kill -9 of a silo while PostgreSQL drops every connection of the cluster
        held = await leases(pg)
        victim_queues = {q for q, lease in held.items() if lease.owner == victim.silo_address}
        assert victim_queues, held
        at_kill = max(max(v, default=0) for v in acknowledged.values()) + 1  # in flight
        terminator = asyncio.create_task(terminate_backends(pg, stop_pg))
        tasks.append(terminator)
        t_kill = time.time()
        assert await victim.kill() == -9
        await poll_until(lambda: statuses(pg, CLUSTER),
                         lambda s: SiloStatus.DEAD in s.values(), timeout=DETECTION)
        t_dead = time.time()
        stop_pg.set()
        assert await terminator > 0

        # 2. the NATS server killed (SIGKILL) and started again on its store
        await nats_server.restart(outage=2.0)
        t_nats = time.time()
        before = sum(map(len, acknowledged.values()))
        await poll_until(lambda: asyncio.sleep(0, sum(map(len, acknowledged.values()))),
                         lambda n: n >= before + 100, timeout=15)  # production goes on
        stop.set()
        await asyncio.gather(*tasks)

        # nothing acknowledged lost; a duplicate only of what the killed silo's queues held
        # when it died (delivered, not yet acknowledged: its next owner delivers it again)
        got = await until_received(
            data_dir, lambda g: all(set(acknowledged[k]) <= set(g.get(k, ())) for k in KEYS),
            timeout=30)
        mapper = HashRingQueueMapper(8, "s")
        for key in KEYS:
            mine = set(acknowledged[key])
            numbers = [n for n, _ in got[key]]
            firsts = [n for n in dict.fromkeys(numbers) if n in mine]
            assert firsts == acknowledged[key], f"stream {key}: out of order"
            twice = sorted({n for n in numbers if numbers.count(n) > 1})
            queue = str(mapper.queue_for(StreamId("numbers", key)))
            # the process that handled each number's first copy: a consumer that ran on the
            # killed silo died before its answer reached the queue's agent, which delivers
            # the number again to the consumer's next activation
            first_by = {n: pid for n, pid in reversed(got[key])}
            assert not twice or (
                (queue in victim_queues or all(first_by[n] == victim.pid for n in twice))
                and max(twice) <= at_kill), (
                f"stream {key} on {queue} (killed silo's queues: {sorted(victim_queues)}, "
                f"{at_kill} in flight at the kill) has duplicates {twice}, first handled "
                f"by {[first_by[n] for n in twice]} (the killed silo: {victim.pid})")
        # grain state: every acknowledged add is kept, none applied twice
        for key in range(COUNTERS):
            value = await client.get_grain("Counter", f"c{key}").get()
            assert acks[key] <= value <= attempts[key], (key, acks[key], value, attempts[key])
        # reminders: ticking again after every fault, once per period
        ticks = await poll_until(
            lambda: asyncio.sleep(0, read_ticks(data_dir)),
            lambda t: all(max(due for _, due, _ in v) > t_nats + 2 * PERIOD
                          for v in t.values()), timeout=10)
        for name, seen in ticks.items():
            indices = [i for i, _, _ in seen]
            assert len(indices) == len(set(indices)), f"{name} ticked twice: {indices}"
            due = {i: d for i, d, _ in seen}
            period_of = (max(due.values()) - min(due.values())) / (max(due) - min(due))
            for i in set(range(min(due), max(due))) - set(due):
                at = min(due.values()) + (i - min(due)) * period_of
                assert t_kill - PERIOD <= at <= t_dead + FAILOVER, (
                    f"{name} missed tick {i} (due {at - t_kill:+.1f} s from the kill, "
                    f"{t_dead - t_kill:.1f} s to detection): {indices}")
        assert {p for _, _, p in ticks["t0"]} >= {victim.pid}  # it did move
        assert ticks["t0"][-1][2] != victim.pid
        # the survivors rode out both servers' faults without a restart
        for silo in survivors:
            assert silo.alive
            log = silo.log_text()
            assert "nats_disconnected" in log and "nats_reconnected" in log
    finally:
        stop.set()
        stop_pg.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await adapter.close()
        await client.close()
