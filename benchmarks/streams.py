"""Stream benchmarks: persistent streams against hand-written baselines, in one run.

Usage::

    .venv/bin/python benchmarks/streams.py            # table for humans (progress on stderr)
    .venv/bin/python benchmarks/streams.py --json     # one JSON list on stdout
    .venv/bin/python benchmarks/streams.py --only backpressure     # one group of figures
    .venv/bin/python benchmarks/streams.py --profile memory        # pyinstrument, our side

Throughput figures (best of ``--trials`` for orleanspy and for its baseline, trials
interleaved, the baseline run with the same N events of the same payload; see
docs/benchmarks.md, section "Streams"):

1. ``memory_1_consumer``: 10 producer grains (each called once by its own task) publish N
   events with ``stream.on_next`` on one stream of a memory-adapter provider; one consumer
   grain subscribed to it; from the first publish until the consumer has all N. Baseline:
   10 producer tasks ``await queue.put(event)`` into one ``asyncio.Queue`` read by one
   consumer task.
2. ``memory_1_consumer_batch100``: the same with ``on_next_batch`` of 100 events (one
   container per 100 events); baseline: the queue carries lists of 100 events.
3. ``memory_fanout_100``: the same stream with 100 consumer grains subscribed (each gets all
   N events), in deliveries/s; baseline: every producer puts each event into 100 queues,
   one consumer task each.
4. ``sqlite_1_consumer``: figure 1 on ``SqliteAdapterFactory`` (durable: each ``on_next``
   returns once committed), until the consumer has all N and the rows are deleted.
   Baseline: raw ``sqlite3`` on a temp file (same pragmas and table): insert the N
   msgpack-encoded events in transactions of 1000 rows with ``executemany``, select them
   back in order 1000 at a time, delete each page.

5. ``jetstream_10_producers_vs_handwritten``: figure 1 on ``NatsAdapterFactory`` (NATS
   JetStream at ``NATS_URL``, default ``nats://127.0.0.1:4222``; each ``on_next`` returns
   once JetStream acknowledged the message holding it), until the consumer has all N and
   the queue holds nothing unacknowledged. Baseline: nats-py by hand in the same run, each
   producer awaiting the JetStream publish of its event, a pull reader purging what it read.

6. ``memory_filter_1pct_vs_none``: figure 1 with events that carry a flag set on one event
   in 100 (``[producer, index, BODY, hit]``), the consumer subscribed with the filter
   ``event[3] == true``, in events/s from the first publish until the agent has acknowledged
   every event (it read and judged each one; the consumer got the 1 %). Baseline: the same
   events and consumer without a filter, in the same run.

Every consumer (ours and the baselines') does the same work per event: count it and check
that each producer's events arrive in order.

PostgreSQL run (``--only postgres``; ``POSTGRES_URL``, default
``postgresql://postgres@127.0.0.1:5432/test``; a schema of its own, dropped afterwards):
``postgres_10_producers_vs_handwritten`` is figure 4's work on ``PostgresAdapterFactory``
against asyncpg by hand (producers awaiting their commit, one ``INSERT ... unnest`` per batch
of waiting events, an ordered SELECT reader that deletes what it read, its deletes committed
with ``synchronous_commit`` off as the adapter's acknowledgements are);
``grain_state_write_postgres_vs_sqlite`` / ``_vs_redis``: 10 grains writing their state in
turn (etag-checked, durable when the call returns) through each ``GrainStorage`` provider.

Backpressure run (``--only backpressure``; figures ``backpressure_*``): one stream on one
queue (``total_queues=1``, ``cache_size=512``, ``pull_period=0.01``, memory adapter), a fast
consumer (no waiting) and a slow one (``await asyncio.sleep`` paced to ``d = 10 / fast solo
rate`` seconds per event). The fast consumer first runs alone (its solo rate), then both
together (``--flow-control max`` runs it under the other strategy). Sampled every 50 ms:
cache occupancy (and the exact peak, checked after every add), pull period, both consumers'
counts, the memory queue's backlog, RSS; plotted with ``--plot [PATH]`` (default path
docs/streams-backpressure.png; needs matplotlib), so a plain run leaves the checkout clean.

Replay run (``--only replay``; figures ``replay_*``): replay rate from the queue's storage
(``subscribe(from_time=...)`` on a provider with a retention) against live delivery of the
same events in the same run, on SQLite and Redis (``replay_figures``).

Pull period 0.01 s throughout (the default is 0.1 s): the low-latency setting a throughput-
or latency-sensitive deployment uses, and the one the tests use. Under sustained load the
agent reads back-to-back anyway; the period matters at the start and after a back-off.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import itertools
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import msgpack
from _common import Figure, progress, quiet_logging

from orleanspy import Grain, Silo, SiloOptions, grain_type
from orleanspy.streams.adapters import (
    MemoryAdapterFactory,
    PostgresAdapterFactory,
    RedisAdapterFactory,
    SqliteAdapterFactory,
)
from orleanspy.streams.ids import StreamId
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider
from orleanspy.streams.stream import StreamObserver

NS = "bench"
BODY = "x" * 64  # every event is [producer, index, BODY]: ~70 bytes of msgpack
PRODUCERS = 10
FANOUT = 100
BATCH = 100
FILTER_EVERY = 100  # the filter figure: one event in this many matches (1 %)
FILTER = "event[3] == true"
QUEUE_CAPACITY = 100_000  # MemoryAdapterFactory's default capacity_per_queue
SQLITE_CHUNK = 1000
WINDOW = 64  # sends a pipelining producer keeps in flight
PULL_PERIOD: list[float | None] = [None]  # --pull-period; None: the provider's default
DELIVERY_BATCH: list[int | None] = [None]  # --delivery-batch; None: the provider's default
BATCH_HANDLER = [False]  # consumers take whole deliveries (--batch-handler)
BP_CACHE = 512
BP_SLOWDOWN = 10
BP_FAST_SECONDS = 2.0  # the fast consumer's stream gets about this many seconds of events
SAMPLE_EVERY = 0.05
PACING_SLACK = 0.005  # a paced consumer catches up at most this much after a stall
DONE_TIMEOUT = 120.0
PLOT = Path(__file__).resolve().parent.parent / "docs" / "streams-backpressure.png"

# A trial: publish ``n`` events and return the rate (events or deliveries per second).
Trial = Callable[[int], Awaitable[float]]


# -- what a consumer does with an event (ours and the baselines alike) ------------------------
@dataclass(slots=True, eq=False)
class Tally:
    """Counts one consumer's events and checks each producer's order; ``done`` at ``expect``."""

    expect: int
    delay: float = 0.0  # seconds per event, paced (see StreamConsumer._on_next)
    due: float = 0.0
    count: int = 0
    step: int = 1  # each producer's events come ``step`` indices apart (a filter's 1 in 100)
    disorder: int = 0  # events that came after a later one of their producer (or twice)
    gaps: int = 0  # places where events of a producer were skipped
    last_at: float = 0.0
    next: dict[int, int] = field(default_factory=dict)
    done: asyncio.Future[float] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def add(self, item: Any) -> None:
        p, i = item[0], item[1]
        expected = self.next.get(p, 0)
        if i != expected:
            if i < expected:
                self.disorder += 1
            else:
                self.gaps += 1
        self.next[p] = i + self.step
        self.count += 1
        self.last_at = now = time.perf_counter()
        if self.count == self.expect and not self.done.done():
            self.done.set_result(now)

    def check(self, who: str) -> None:
        if self.count != self.expect or self.disorder or self.gaps:
            raise RuntimeError(
                f"{who}: received {self.count} of {self.expect} events, "
                f"{self.disorder} out of order, {self.gaps} gaps"
            )


TALLIES: dict[Any, Tally] = {}  # consumer grain key -> its tally (set before subscribing)


# -- grains -------------------------------------------------------------------------------------
@grain_type("BenchStreamProducer")
class StreamProducer(Grain):
    async def produce(
        self, provider: str, key: str, producer: int, count: int, batch: int, window: int = 0,
        marked: bool = False,
    ) -> None:
        stream = self.get_stream_provider(provider).get_stream(NS, key)
        if marked:  # one event in FILTER_EVERY has a flag set (the filter figure)
            for i in range(count):
                await stream.on_next([producer, i, BODY, i % FILTER_EVERY == 0])
            return
        if window:  # pipelined: up to ``window`` sends in flight, oldest awaited first
            inflight: collections.deque[asyncio.Future[None]] = collections.deque()
            for start in range(0, count, batch):
                stop = min(start + batch, count)
                inflight.append(stream.send_batch([[producer, i, BODY]
                                                   for i in range(start, stop)]))
                if len(inflight) >= window:
                    await inflight.popleft()
            await asyncio.gather(*inflight)
            return
        if batch <= 1:
            on_next = stream.on_next
            for i in range(count):
                await on_next([producer, i, BODY])
        else:
            for start in range(0, count, batch):
                stop = min(start + batch, count)
                await stream.on_next_batch([[producer, i, BODY] for i in range(start, stop)])


    async def produce_two(
        self, provider: str, key_a: str, count_a: int, key_b: str, count_b: int
    ) -> None:
        """``count_a`` events on one stream and ``count_b`` on another, interleaved evenly.

        The memory adapter's ``enqueue`` never suspends while the queue has room, so this
        yields to the loop every 16 events: production and delivery then overlap, as with
        producers in other grains or processes."""
        p = self.get_stream_provider(provider)
        a, b = p.get_stream(NS, key_a).on_next, p.get_stream(NS, key_b).on_next
        j = 0
        for i in range(count_a):
            if not i % 16:
                await asyncio.sleep(0)
            await a([0, i, BODY])
            while j < count_b and j * count_a <= i * count_b:
                await b([0, j, BODY])
                j += 1
        for k in range(j, count_b):
            await b([0, k, BODY])


@grain_type("BenchStreamConsumer")
class StreamConsumer(Grain):
    def __init__(self) -> None:
        self.tally: Tally | None = None

    async def subscribe(self, provider: str, key: str, expression: str | None = None,
                        from_time: float | None = None) -> None:
        self.tally = TALLIES[self.key]
        stream = self.get_stream_provider(provider).get_stream(NS, key)
        if BATCH_HANDLER[0] and not self.tally.delay:
            await stream.subscribe(StreamObserver(None, on_next_batch=self._on_batch),
                                   filter=expression, from_time=from_time)
        else:
            await stream.subscribe(self._on_next, filter=expression, from_time=from_time)

    async def _on_batch(self, items: list[Any]) -> None:
        add = self.tally.add  # type: ignore[union-attr]
        for item, _ in items:
            add(item)

    async def _on_next(self, item: Any, token: Any) -> None:
        tally = self.tally
        assert tally is not None
        if tally.delay:
            # A slow consumer: ``delay`` seconds per event on an absolute schedule, so that
            # the loop's timer granularity (~1 ms when idle) does not make it slower still.
            now = asyncio.get_running_loop().time()
            tally.due = max(tally.due, now - PACING_SLACK) + tally.delay
            if tally.due > now:
                await asyncio.sleep(tally.due - now)
        tally.add(item)


GRAINS = [StreamProducer, StreamConsumer]
_ids = itertools.count()


def _provider_options(**overrides: Any) -> StreamProviderOptions:
    """Default settings, unless ``--pull-period`` / ``--delivery-batch`` say otherwise."""
    chosen: dict[str, Any] = {}
    if PULL_PERIOD[0] is not None:
        chosen["pull_period"] = PULL_PERIOD[0]
        chosen["max_pull_period"] = max(PULL_PERIOD[0], 1.0)
    if DELIVERY_BATCH[0] is not None:
        chosen["batch_size"] = DELIVERY_BATCH[0]
    return StreamProviderOptions(**{**chosen, **overrides})


def _silo(providers: dict[str, PersistentStreamProvider]) -> Silo:
    return Silo(
        SiloOptions(gateway_port=None, collection_quantum=3600.0),
        grains=GRAINS,
        stream_providers=providers,
    )


def _agent(silo: Silo, provider: str, key: str) -> Any:
    p = silo.stream_providers[provider]
    return p.agents[p.mapper.queue_for(StreamId(NS, key))]


async def _until(predicate: Callable[[], bool], timeout: float = DONE_TIMEOUT) -> None:
    """Poll a runtime counter (the agent offers no event to wait on) every millisecond."""
    async with asyncio.timeout(timeout):
        for _ in itertools.count():
            if predicate():
                return
            await asyncio.sleep(0.001)


async def _queue_empty(adapter: Any, queue: Any) -> bool:
    if hasattr(adapter, "pending_count"):
        return int(await adapter.pending_count(queue)) == 0
    return int(adapter.queue_length(queue)) == 0


async def _until_async(predicate: Callable[[], Awaitable[bool]],
                       timeout: float = DONE_TIMEOUT) -> None:
    """Poll an adapter's count (no event to wait on) every millisecond."""
    async with asyncio.timeout(timeout):
        for _ in itertools.count():
            if await predicate():
                return
            await asyncio.sleep(0.001)


# -- our side: one trial --------------------------------------------------------------------
async def stream_trial(
    silo: Silo,
    provider: str,
    n: int,
    *,
    consumers: int = 1,
    batch: int = 1,
    wait_ack: bool = False,
    profiler: Any = None,
    producers: int = 10,
    window: int = 0,
    key: str | None = None,
    marked: bool = False,
    expression: str | None = None,
) -> float:
    """Publish ``n`` events (``producers`` producer grains) to ``consumers`` subscribers of a
    new stream (``key``: of this one); return deliveries per second from the first publish
    until every consumer has all ``n`` (and, with ``wait_ack``, the agent acknowledged them
    to the adapter).

    ``marked``: the events carry a flag set on one in ``FILTER_EVERY``; with ``expression``
    (a filter that selects the flagged ones) the consumers expect those only, and the rate
    counts all ``n`` events."""
    key = key or f"s{next(_ids)}"
    per = n // producers
    n = per * producers
    step = FILTER_EVERY if expression is not None else 1
    expect = producers * (-(-per // step))
    tallies = []
    for c in range(consumers):
        ck = f"{key}-c{c}"
        TALLIES[ck] = tally = Tally(expect, step=step)
        tallies.append(tally)
        await silo.get_grain(StreamConsumer, ck).subscribe(provider, key, expression)
    refs = [silo.get_grain(StreamProducer, f"p{p}") for p in range(producers)]
    agent = _agent(silo, provider, key)
    adapter = silo.stream_providers[provider].adapter
    gc.collect()
    if profiler is not None:
        profiler.start()
    t0 = time.perf_counter()
    await asyncio.gather(*(
        ref.produce(provider, key, p, per, batch, window, marked) for p, ref in enumerate(refs)
    ))
    async with asyncio.timeout(DONE_TIMEOUT):
        await asyncio.gather(*(t.done for t in tallies))
    if wait_ack:  # every container acknowledged: the queue holds nothing of the stream
        await _until_async(lambda: _queue_empty(adapter, agent.queue))
    elapsed = time.perf_counter() - t0
    if profiler is not None:
        profiler.stop()
    for c, tally in enumerate(tallies):
        tally.check(f"consumer {c} of stream {key}")
        del TALLIES[f"{key}-c{c}"]
    return n * consumers / elapsed


# -- baselines ------------------------------------------------------------------------------
async def queue_trial(n: int, *, consumers: int = 1, batch: int = 1) -> float:
    """10 producer tasks -> asyncio.Queue per consumer -> consumer task(s); deliveries/s."""
    per = n // PRODUCERS
    n = per * PRODUCERS
    queues: list[asyncio.Queue[Any]] = [asyncio.Queue(QUEUE_CAPACITY) for _ in range(consumers)]
    tallies = [Tally(n) for _ in range(consumers)]

    async def consume(queue: asyncio.Queue[Any], tally: Tally) -> None:
        get, add = queue.get, tally.add
        while tally.count < n:
            item = await get()
            if batch <= 1:
                add(item)
            else:
                for event in item:
                    add(event)

    async def produce(p: int) -> None:
        puts = [q.put for q in queues]
        if batch <= 1:
            for i in range(per):
                event = [p, i, BODY]
                for put in puts:
                    await put(event)
        else:
            for start in range(0, per, batch):
                events = [[p, i, BODY] for i in range(start, min(start + batch, per))]
                for put in puts:
                    await put(events)

    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(consume(q, t)) for q, t in zip(queues, tallies, strict=True)]
    gc.collect()
    t0 = time.perf_counter()
    await asyncio.gather(*(produce(p) for p in range(PRODUCERS)))
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - t0
    for tally in tallies:
        tally.check("asyncio.Queue baseline")
    return n * consumers / elapsed


_RAW_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS q (seq INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL,"
    " namespace TEXT NOT NULL, key BLOB NOT NULL, events BLOB NOT NULL, size INTEGER NOT NULL)",
    "CREATE INDEX IF NOT EXISTS q_by_queue ON q (queue, seq)",
)


def raw_sqlite_trial(path: str, n: int, batch: int = 1) -> float:
    """Make the events and insert them as rows (``batch`` events a row) in transactions of
    1000 rows (executemany), select them back in order 1000 rows at a time, delete each
    page; the events are msgpack-encoded/decoded. Events/s."""
    per = n // PRODUCERS
    n = per * PRODUCERS
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        for statement in _RAW_SCHEMA:
            conn.execute(statement)
        tally = Tally(n)
        pack, unpack = msgpack.packb, msgpack.unpackb
        key = pack("raw")
        insert = "INSERT INTO q (queue, namespace, key, events, size) VALUES (?, ?, ?, ?, ?)"
        select = "SELECT seq, events FROM q WHERE queue = ? AND seq > ? ORDER BY seq LIMIT ?"
        gc.collect()
        t0 = time.perf_counter()
        step = SQLITE_CHUNK * batch
        for start in range(0, n, step):
            rows = []
            for j in range(start, min(start + step, n), batch):
                payload = pack([[k % PRODUCERS, k // PRODUCERS, BODY]
                                for k in range(j, min(j + batch, n))])
                rows.append(("raw-0", NS, key, payload, len(payload)))
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(insert, rows)
            conn.execute("COMMIT")
        last = 0
        while True:
            page = conn.execute(select, ("raw-0", last, SQLITE_CHUNK)).fetchall()
            if not page:
                break
            for _seq, events in page:
                for event in unpack(events):
                    tally.add(event)
            last = page[-1][0]
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DELETE FROM q WHERE queue = ? AND seq <= ?", ("raw-0", last))
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - t0
        tally.check("raw SQLite baseline")
        return n / elapsed
    finally:
        conn.close()


async def raw_sqlite(path: str, n: int, batch: int = 1) -> float:
    return raw_sqlite_trial(path, n, batch)


async def handwritten_sqlite(path: str, n: int, producers: int = 10) -> float:
    """The same per-event-durable work written by hand with asyncio and sqlite3: ``producers``
    tasks each ``await enqueue(event)``, which returns once the event's row is committed; a
    writer commits every waiting row in one transaction (group commit) on one database
    thread; a reader selects the committed rows in order, hands each event to the consumer's
    tally and deletes what it read (the acknowledgement), one transaction per page. Events/s
    from the first enqueue until the consumer has all ``n`` and the rows are deleted."""
    per = n // producers
    n = per * producers
    loop = asyncio.get_running_loop()
    db = ThreadPoolExecutor(1)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    pack, unpack = msgpack.packb, msgpack.unpackb
    insert = "INSERT INTO q (queue, namespace, key, events, size) VALUES (?, ?, ?, ?, ?)"
    select = "SELECT seq, events FROM q WHERE queue = ? AND seq > ? ORDER BY seq LIMIT ?"
    key = pack("hand")

    def setup() -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        for statement in _RAW_SCHEMA:
            conn.execute(statement)
        conn.execute("DELETE FROM q")

    def write(rows: list[tuple[Any, ...]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, rows)
        conn.execute("COMMIT")

    def read(last: int) -> list[tuple[int, bytes]]:
        return conn.execute(select, ("hand-0", last, SQLITE_CHUNK)).fetchall()

    def delete(last: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM q WHERE queue = ? AND seq <= ?", ("hand-0", last))
        conn.execute("COMMIT")

    await loop.run_in_executor(db, setup)
    tally = Tally(n)
    waiting: list[tuple[tuple[Any, ...], asyncio.Future[None]]] = []
    wake, committed = asyncio.Event(), asyncio.Event()

    async def enqueue(event: Any) -> None:
        payload = pack([event])
        fut = loop.create_future()
        waiting.append((("hand-0", NS, key, payload, len(payload)), fut))
        wake.set()
        await fut

    async def producer(p: int) -> None:
        for i in range(per):
            await enqueue([p, i, BODY])

    async def writer() -> None:
        while True:
            await wake.wait()
            wake.clear()
            batch = waiting[:]
            waiting.clear()
            await loop.run_in_executor(db, write, [row for row, _ in batch])
            for _, fut in batch:
                fut.set_result(None)
            committed.set()

    async def reader() -> None:
        last = 0
        while tally.count < n:
            await committed.wait()
            committed.clear()
            while True:
                page = await loop.run_in_executor(db, read, last)
                if not page:
                    break
                for _seq, events in page:
                    for event in unpack(events):
                        tally.add(event)
                last = page[-1][0]
                await loop.run_in_executor(db, delete, last)

    gc.collect()
    t0 = time.perf_counter()
    write_task = loop.create_task(writer())
    try:
        await asyncio.gather(reader(), *(producer(p) for p in range(producers)))
        elapsed = time.perf_counter() - t0
    finally:
        write_task.cancel()
        await asyncio.gather(write_task, return_exceptions=True)
        conn.close()
        db.shutdown()
    tally.check("hand-written SQLite pipeline")
    return n / elapsed


REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")


async def handwritten_redis(url: str, n: int, producers: int = 10) -> float:
    """The same per-event work by hand with redis-py: ``producers`` tasks each ``await`` the
    XADD of their event, a writer sending every waiting XADD in one pipelined round trip and
    resolving the waiters, a reader reading the stream in order (XRANGE), counting, and
    deleting what it read (XDEL, the acknowledgement). Events/s until the consumer has all
    ``n`` and the stream is empty."""
    import redis.asyncio as aioredis

    per = n // producers
    n = per * producers
    client = aioredis.Redis.from_url(url)
    key = f"orleanspy-bench-hand:{next(_ids)}"
    loop = asyncio.get_running_loop()
    tally = Tally(n)
    waiting: list[tuple[bytes, asyncio.Future[None]]] = []
    wake, added = asyncio.Event(), asyncio.Event()
    pack, unpack = msgpack.packb, msgpack.unpackb

    async def enqueue(event: Any) -> None:
        fut = loop.create_future()
        waiting.append((pack([event]), fut))
        wake.set()
        await fut

    async def producer(p: int) -> None:
        for i in range(per):
            await enqueue([p, i, BODY])

    async def writer() -> None:
        while True:
            await wake.wait()
            wake.clear()
            batch = waiting[:]
            waiting.clear()
            pipe = client.pipeline(transaction=False)
            for payload, _ in batch:
                pipe.xadd(key, {"e": payload})
            await pipe.execute()
            for _, fut in batch:
                fut.set_result(None)
            added.set()

    async def reader() -> None:
        last = "-"
        while tally.count < n:
            await added.wait()
            added.clear()
            while True:
                page = await client.xrange(key, min=last, max="+", count=SQLITE_CHUNK)
                if not page:
                    break
                for _id, fields in page:
                    for event in unpack(fields[b"e"]):
                        tally.add(event)
                await client.xdel(key, *[i for i, _ in page])
                last = "(" + page[-1][0].decode()

    gc.collect()
    t0 = time.perf_counter()
    write_task = loop.create_task(writer())
    try:
        await asyncio.gather(reader(), *(producer(p) for p in range(producers)))
        elapsed = time.perf_counter() - t0
    finally:
        write_task.cancel()
        await asyncio.gather(write_task, return_exceptions=True)
        await client.delete(key)
        await client.aclose()
    tally.check("hand-written redis-py pipeline")
    return n / elapsed


@contextlib.asynccontextmanager
async def _redis_keys_deleted(prefix: str) -> AsyncIterator[None]:
    """Delete the run's keys (queues, counters, subscriptions) afterwards."""
    try:
        yield
    finally:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            keys = [k async for k in client.scan_iter(match=f"{prefix}:*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


async def raw_redis(url: str, n: int, batch: int = 1) -> float:
    """Bulk: make and encode the N events (``batch`` events an entry, as the producers do),
    XADD them in pipelines of 1000 entries, read them back with XRANGE 1000 at a time
    (decoding each), XDEL each page. Events/s."""
    import redis.asyncio as aioredis

    per = n // PRODUCERS
    n = per * PRODUCERS
    client = aioredis.Redis.from_url(url)
    key = f"orleanspy-bench-raw:{next(_ids)}"
    tally = Tally(n)
    pack = msgpack.packb
    gc.collect()
    t0 = time.perf_counter()
    try:
        step = SQLITE_CHUNK * batch
        for start in range(0, n, step):
            pipe = client.pipeline(transaction=False)
            for j in range(start, min(start + step, n), batch):
                pipe.xadd(key, {"e": pack([[k % PRODUCERS, k // PRODUCERS, BODY]
                                           for k in range(j, min(j + batch, n))])})
            await pipe.execute()
        last = "-"
        while True:
            page = await client.xrange(key, min=last, max="+", count=SQLITE_CHUNK)
            if not page:
                break
            for _id, fields in page:
                for event in msgpack.unpackb(fields[b"e"]):
                    tally.add(event)
            await client.xdel(key, *[i for i, _ in page])
            last = "(" + page[-1][0].decode()
        elapsed = time.perf_counter() - t0
    finally:
        await client.delete(key)
        await client.aclose()
    tally.check("raw Redis baseline")
    return n / elapsed

POSTGRES_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def handwritten_postgres(url: str, n: int, producers: int = 10) -> float:
    """The same durable per-event work by hand with asyncpg: ``producers`` tasks each
    ``await`` the commit of their event, a writer inserting every waiting event in one
    ``INSERT ... SELECT FROM unnest`` (one transaction, one round trip) and resolving the
    waiters, a reader selecting the rows in order (1000 at a time), counting, and deleting
    what it read (the acknowledgement: committed without waiting for its WAL flush, as the
    adapter's acknowledgement is). Events/s until the consumer has all ``n`` and the table
    is empty."""
    import asyncpg

    per = n // producers
    n = per * producers
    table = f"hand_{next(_ids)}"
    conn = await asyncpg.connect(url.split("?")[0])
    await conn.execute(f"CREATE TABLE {table} (seq BIGSERIAL PRIMARY KEY, events BYTEA)")
    reader_conn = await asyncpg.connect(url.split("?")[0],
                                        server_settings={"synchronous_commit": "off"})
    loop = asyncio.get_running_loop()
    tally = Tally(n)
    waiting: list[tuple[bytes, asyncio.Future[None]]] = []
    wake, added = asyncio.Event(), asyncio.Event()
    pack, unpack = msgpack.packb, msgpack.unpackb

    async def enqueue(event: Any) -> None:
        fut = loop.create_future()
        waiting.append((pack([event]), fut))
        wake.set()
        await fut

    async def producer(p: int) -> None:
        for i in range(per):
            await enqueue([p, i, BODY])

    async def writer() -> None:
        while True:
            await wake.wait()
            wake.clear()
            batch = waiting[:]
            waiting.clear()
            await conn.execute(f"INSERT INTO {table} (events) SELECT * FROM unnest($1::bytea[])",
                               [payload for payload, _ in batch])
            for _, fut in batch:
                fut.set_result(None)
            added.set()

    async def reader() -> None:
        last = 0
        while tally.count < n:
            await added.wait()
            added.clear()
            while True:
                page = await reader_conn.fetch(
                    f"SELECT seq, events FROM {table} WHERE seq > $1 ORDER BY seq LIMIT $2",
                    last, SQLITE_CHUNK)
                if not page:
                    break
                for _seq, events in page:
                    for event in unpack(events):
                        tally.add(event)
                await reader_conn.execute(f"DELETE FROM {table} WHERE seq = ANY($1::bigint[])",
                                          [row[0] for row in page])
                last = page[-1][0]

    gc.collect()
    t0 = time.perf_counter()
    write_task = loop.create_task(writer())
    try:
        await asyncio.gather(reader(), *(producer(p) for p in range(producers)))
        elapsed = time.perf_counter() - t0
    finally:
        write_task.cancel()
        await asyncio.gather(write_task, return_exceptions=True)
        await conn.execute(f"DROP TABLE {table}")
        await conn.close()
        await reader_conn.close()
    tally.check("hand-written asyncpg")
    return n / elapsed


async def grain_state_writes(storage: Any, n: int, writers: int = PRODUCERS) -> float:
    """``writers`` tasks, each writing its own grain's state ``n / writers`` times in turn
    (each write etag-checked against the last one, as a grain's ``write_state`` does);
    writes per second."""
    from orleanspy.ids import GrainId

    per = n // writers
    payload = msgpack.packb({"balance": 100, "history": list(range(20))})

    async def writer(w: int) -> None:
        grain_id = GrainId("BenchState", f"{next(_ids)}-{w}")
        etag = None
        for _ in range(per):
            etag = await storage.write(grain_id, "state", payload, etag)

    t0 = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return per * writers / (time.perf_counter() - t0)


@contextlib.asynccontextmanager
async def _postgres_schema_dropped(url: str, schema: str) -> AsyncIterator[None]:
    """Drop the run's schema (queues, leases) afterwards."""
    try:
        yield
    finally:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()


async def postgres_figures(s: float, t: int) -> list[Figure]:
    """The PostgreSQL rows: the adapter against asyncpg by hand, and grain-state writes on
    PostgreSQL against SQLite and Redis."""
    from orleanspy.storage.postgres import PostgresGrainStorage
    from orleanspy.storage.redis import RedisGrainStorage
    from orleanspy.storage.sqlite import SqliteGrainStorage

    figures: list[Figure] = []
    schema = f"orleanspy_bench_{os.getpid()}_{next(_ids)}"
    sep = "&" if "?" in POSTGRES_URL else "?"
    url = f"{POSTGRES_URL}{sep}schema={schema}"
    provider = PersistentStreamProvider(PostgresAdapterFactory(url), _provider_options())
    async with _postgres_schema_dropped(POSTGRES_URL, schema):
        async with _silo({"pg": provider}) as silo:
            progress("PostgreSQL adapter, 10 producers awaiting each event vs by hand ...")
            ours, base, n = await compare(
                partial(stream_trial, silo, "pg", wait_ack=True),
                partial(handwritten_postgres, url),
                deliveries_per_event=1, seconds=s, trials=t,
            )
            figures.append(Figure(
                "postgres_10_producers_vs_handwritten", ours, "events/s", base, 1.0,
                f"N={n:,}; baseline: asyncpg by hand, producers awaiting their commit, one "
                "INSERT ... unnest per batch of waiting events, ordered SELECT reader, DELETE",
            ))
        progress("grain-state writes: PostgreSQL, SQLite, Redis ...")
        prefix = f"orleanspy-bench-{os.getpid()}-{next(_ids)}"
        with tempfile.TemporaryDirectory() as tmp:
            stores = {"postgres": PostgresGrainStorage(url),
                      "sqlite": SqliteGrainStorage(os.path.join(tmp, "state.db")),
                      "redis": RedisGrainStorage(f"{REDIS_URL}?prefix={prefix}")}
            async with _redis_keys_deleted(prefix):
                best = dict.fromkeys(stores, 0.0)
                try:
                    for store in stores.values():
                        await store.open()
                        await grain_state_writes(store, 200)  # warm-up
                    for _ in range(t):
                        for name, store in stores.items():
                            best[name] = max(best[name], await grain_state_writes(store, 2000))
                finally:
                    for store in stores.values():
                        await store.close()
        figures += [Figure(
            f"grain_state_write_postgres_vs_{other}", best["postgres"], "writes/s",
            best[other], 0.0,
            f"N=2,000; {PRODUCERS} grains writing in turn, each write etag-checked and "
            f"durable when it returns; baseline: the {other} provider, same work",
        ) for other in ("sqlite", "redis")]
    return figures



NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")


async def handwritten_jetstream(url: str, n: int, producers: int = 10) -> float:
    """The same per-event work by hand with nats-py: ``producers`` tasks each ``await`` the
    JetStream publish of their event (one message each, the server's acknowledgement
    awaited; the connection pipelines the producers' requests), a reader pulling the
    subject in order through an ephemeral consumer (1000 at a time), counting, and purging
    what it read (the acknowledgement). Events/s until the consumer has all ``n``."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig

    per = n // producers
    n = per * producers
    nc = await nats.connect(url)
    js = nc.jetstream()
    name = f"orleanspy-bench-hand-{os.getpid()}-{next(_ids)}"
    subject = name.replace("-", "_")
    await js.add_stream(name=name, subjects=[subject])
    tally = Tally(n)
    pack, unpack = msgpack.packb, msgpack.unpackb

    async def producer(p: int) -> None:
        for i in range(per):
            await js.publish(subject, pack([[p, i, BODY]]))

    async def reader() -> None:
        sub = await js.pull_subscribe(
            subject, config=ConsumerConfig(ack_policy=AckPolicy.NONE))
        while tally.count < n:
            try:
                msgs = await sub.fetch(SQLITE_CHUNK, timeout=0.05)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:
                for event in unpack(msg.data):
                    tally.add(event)
            await js.purge_stream(name, seq=msgs[-1].metadata.sequence.stream + 1)
        await sub.unsubscribe()

    gc.collect()
    t0 = time.perf_counter()
    try:
        await asyncio.gather(reader(), *(producer(p) for p in range(producers)))
        elapsed = time.perf_counter() - t0
    finally:
        await js.delete_stream(name)
        await nc.close()
    tally.check("hand-written nats-py JetStream")
    return n / elapsed


# -- measurement ----------------------------------------------------------------------------
async def calibrate(trial: Trial, deliveries_per_event: int, seconds: float, n_max: int) -> int:
    """Warm up and return the event count that makes one trial last about ``seconds``."""
    n = max(PRODUCERS, 1000 // deliveries_per_event)
    while True:
        rate = await trial(n)
        elapsed = n * deliveries_per_event / rate
        if elapsed >= 0.25 or n >= n_max:
            break
        n = min(n * 4, n_max)
    n = int(n * seconds / elapsed)
    return max(PRODUCERS, min(n_max, n // PRODUCERS * PRODUCERS))


async def compare(
    ours: Trial, base: Trial, *, deliveries_per_event: int, seconds: float, trials: int,
    n_max: int = QUEUE_CAPACITY,
) -> tuple[float, float, int]:
    """Best rate of each side over interleaved trials, both with the same N (after warm-up)."""
    n = await calibrate(ours, deliveries_per_event, seconds, n_max)
    await base(n)  # warm-up
    best_ours = best_base = 0.0
    for _ in range(trials):
        best_ours = max(best_ours, await ours(n))
        best_base = max(best_base, await base(n))
    return best_ours, best_base, n


async def throughput(args: argparse.Namespace, which: set[str]) -> list[Figure]:
    figures: list[Figure] = []
    s, t = args.seconds, args.trials
    for group in ("memory", "batch", "fanout", "filter"):
        if group not in which:
            continue
        # A silo per group: one group's consumer grains do not slow the next one's GC.
        provider = PersistentStreamProvider(MemoryAdapterFactory(), _provider_options())
        async with _silo({"m": provider}) as silo:
            if group == "memory":
                progress("memory adapter, 1 consumer ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "m"), queue_trial,
                    deliveries_per_event=1, seconds=s, trials=t,
                )
                figures.append(Figure(
                    "memory_1_consumer", ours, "events/s", base, 0.3,
                    f"N={n:,}, {PRODUCERS} producer grains, on_next per event; "
                    "baseline asyncio.Queue",
                ))
            if group == "batch":
                progress(f"memory adapter, 1 consumer, on_next_batch({BATCH}) ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "m", batch=BATCH),
                    partial(queue_trial, batch=BATCH),
                    deliveries_per_event=1, seconds=s, trials=t, n_max=3 * QUEUE_CAPACITY,
                )
                figures.append(Figure(
                    f"memory_1_consumer_batch{BATCH}", ours, "events/s", base, 0.3,
                    f"N={n:,}, on_next_batch of {BATCH}; baseline queue of {BATCH}-event lists"
                    " (target assumed: as memory_1_consumer)",
                ))
            if group == "filter":
                progress("memory adapter, a 1 % filter vs none ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "m", wait_ack=True, marked=True,
                            expression=FILTER),
                    partial(stream_trial, silo, "m", wait_ack=True, marked=True),
                    deliveries_per_event=1, seconds=s, trials=t,
                )
                figures.append(Figure(
                    "memory_filter_1pct_vs_none", ours, "events/s", base, 0.0,
                    f"N={n:,}, {PRODUCERS} producer grains; filter {FILTER} matches 1 in "
                    f"{FILTER_EVERY}, until every event is acknowledged; baseline: the same "
                    "events, no filter",
                ))
            if group == "fanout":
                progress("memory adapter, 10 consumers on one stream ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "m", consumers=10),
                    partial(queue_trial, consumers=10),
                    deliveries_per_event=10, seconds=s, trials=t,
                )
                figures.append(Figure(
                    "memory_fanout_10", ours, "deliveries/s", base, 0.6,
                    f"N={n:,} events x 10 subscribers of one stream; baseline 10 queues",
                ))
                progress(f"memory adapter, {FANOUT} consumers on one stream ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "m", consumers=FANOUT),
                    partial(queue_trial, consumers=FANOUT),
                    deliveries_per_event=FANOUT, seconds=s, trials=t,
                )
                figures.append(Figure(
                    f"memory_fanout_{FANOUT}", ours, "deliveries/s", base, 0.3,
                    f"N={n:,} events x {FANOUT} subscribers of one stream; baseline "
                    f"{FANOUT} queues (target assumed: as memory_1_consumer)",
                ))
    if "sqlite" in which:
        progress("SQLite adapter, 1 consumer ...")
        with tempfile.TemporaryDirectory(prefix="orleanspy-bench-") as tmp:
            provider = PersistentStreamProvider(
                SqliteAdapterFactory(str(Path(tmp) / "streams.db")), _provider_options()
            )
            raw = str(Path(tmp) / "raw.db")
            async with _silo({"q": provider}) as silo:
                hand = str(Path(tmp) / "hand.db")
                progress("SQLite adapter, 10 producers awaiting each event vs by hand ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "q", wait_ack=True),
                    partial(handwritten_sqlite, hand),
                    deliveries_per_event=1, seconds=s, trials=t,
                )
                figures.append(Figure(
                    "sqlite_10_producers_vs_handwritten", ours, "events/s", base, 1.2,
                    f"N={n:,}; baseline: asyncio + sqlite3 by hand, group commit, each "
                    "event awaited until committed, read, acknowledged (deleted)",
                ))
                progress("SQLite adapter, 100 producers ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "q", wait_ack=True, producers=100),
                    partial(raw_sqlite, raw),
                    deliveries_per_event=1, seconds=s, trials=t,
                )
                figures.append(Figure(
                    "sqlite_100_producers", ours, "events/s", base, 0.6,
                    f"N={n:,}, 100 producer grains awaiting each event; baseline raw "
                    f"sqlite3 bulk ({SQLITE_CHUNK}-row transactions)",
                ))
                progress("SQLite adapter, 10 producers vs bulk ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "q", wait_ack=True), partial(raw_sqlite, raw),
                    deliveries_per_event=1, seconds=s, trials=t,
                )
                figures.append(Figure(
                    "sqlite_1_consumer", ours, "events/s", base, 0.0,
                    f"N={n:,}, {PRODUCERS} producer grains, on_next per event (durable), "
                    f"until acknowledged; baseline raw sqlite3, {SQLITE_CHUNK}-row transactions",
                ))
                progress(f"SQLite adapter, 1 consumer, on_next_batch({BATCH}) ...")
                ours, base, n = await compare(
                    partial(stream_trial, silo, "q", batch=BATCH, wait_ack=True),
                    partial(raw_sqlite, raw, batch=BATCH),
                    deliveries_per_event=1, seconds=s, trials=t, n_max=3 * QUEUE_CAPACITY,
                )
                figures.append(Figure(
                    f"sqlite_1_consumer_batch{BATCH}", ours, "events/s", base, 0.5,
                    f"N={n:,}, on_next_batch of {BATCH}; baseline rows of {BATCH} events "
                    "(target assumed: as sqlite_1_consumer)",
                ))
    if "redis" in which:
        prefix = f"orleanspy-bench-{os.getpid()}-{next(_ids)}"
        url = f"{REDIS_URL}?prefix={prefix}"
        provider = PersistentStreamProvider(RedisAdapterFactory(url), _provider_options())
        async with _redis_keys_deleted(prefix), _silo({"r": provider}) as silo:
            progress("Redis adapter, 10 producers awaiting each event vs by hand ...")
            ours, base, n = await compare(
                partial(stream_trial, silo, "r", wait_ack=True),
                partial(handwritten_redis, REDIS_URL),
                deliveries_per_event=1, seconds=s, trials=t,
            )
            figures.append(Figure(
                "redis_10_producers_vs_handwritten", ours, "events/s", base, 1.0,
                f"N={n:,}; baseline: redis-py by hand, producers awaiting their XADD, one "
                "pipelined round trip per batch of waiting XADDs, XRANGE reader, XDEL",
            ))
            progress("Redis adapter, send_batch(100) pipelined vs raw pipelined XADD bulk ...")
            ours, base, n = await compare(
                partial(stream_trial, silo, "r", batch=BATCH, wait_ack=True, window=WINDOW),
                partial(raw_redis, REDIS_URL, batch=BATCH),
                deliveries_per_event=1, seconds=s, trials=t, n_max=3 * QUEUE_CAPACITY,
            )
            figures.append(Figure(
                "redis_bulk_batch100_vs_raw", ours, "events/s", base, 0.5,
                f"N={n:,}, {PRODUCERS} producers, send_batch of {BATCH} with {WINDOW} in "
                f"flight each; baseline: raw pipelined XADD of entries of {BATCH} events, "
                "1000 per round trip, XRANGE and XDEL 1000 at a time",
            ))
            progress("Redis adapter, on_next_batch(100) awaited vs raw ...")
            ours, base, n = await compare(
                partial(stream_trial, silo, "r", batch=BATCH, wait_ack=True),
                partial(raw_redis, REDIS_URL, batch=BATCH),
                deliveries_per_event=1, seconds=s, trials=t, n_max=3 * QUEUE_CAPACITY,
            )
            figures.append(Figure(
                "redis_batch100_awaited_vs_raw", ours, "events/s", base, 0.0,
                f"N={n:,}, {PRODUCERS} producers each awaiting its on_next_batch of {BATCH} "
                "(one batch in flight per producer); baseline as above",
            ))
    if "jetstream" in which:
        from orleanspy.streams.adapters.nats import NatsAdapterFactory

        url = f"{NATS_URL}?prefix=orleanspy_bench_{os.getpid()}_{next(_ids)}"
        factory = NatsAdapterFactory(url)
        provider = PersistentStreamProvider(factory, _provider_options())
        async with _silo({"j": provider}) as silo:
            progress("JetStream adapter, 10 producers awaiting each event vs by hand ...")
            try:
                ours, base, n = await compare(
                    partial(stream_trial, silo, "j", wait_ack=True),
                    partial(handwritten_jetstream, NATS_URL),
                    deliveries_per_event=1, seconds=s, trials=t,
                )
            finally:
                await silo.stream_providers["j"].adapter.delete_all()
        figures.append(Figure(
            "jetstream_10_producers_vs_handwritten", ours, "events/s", base, 1.0,
            f"N={n:,}; baseline: nats-py by hand, producers awaiting the JetStream "
            "acknowledgement of their event's message, pull reader, purge of what was read",
        ))
    return figures


# -- backpressure ---------------------------------------------------------------------------
def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(slots=True)
class Sample:
    t: float
    cache: int
    period: float
    backlog: int  # containers in the memory queue, not yet acknowledged
    spilled: int  # subscriptions served from the queue
    fast: int
    slow: int
    rss: float


@dataclass
class BackpressureRun:
    name: str
    n: int
    samples: list[Sample]
    fast_rate: float  # fast consumer: n / time until it had all n
    slow_rate: float
    slow_received: int
    slow_disorder: int
    slow_gaps: int
    fast_disorder: int
    cache_peak: int  # exact: checked after every add to the cache
    spills: int


def _track_peak(agent: Any) -> list[int]:
    """Instrumentation: the cache's exact peak occupancy, checked after every add."""
    cache, add, peak = agent.cache, agent.cache.add, [0]

    def counting_add(containers: Any) -> Any:
        first = add(containers)
        peak[0] = max(peak[0], len(cache))
        return first

    cache.add = counting_add
    return peak


async def bp_run(
    silo: Silo, provider_name: str, n: int, slow_delay: float | None, n_fast: int | None = None
) -> BackpressureRun:
    """The producer publishes ``n_fast`` (default ``n``) events on one stream and ``n`` on
    another stream of the same queue, interleaved; the fast consumer reads the first, the slow
    one (if any) the second."""
    n_fast = n if n_fast is None else n_fast
    provider = silo.stream_providers[provider_name]
    agent = next(iter(provider.agents.values()))
    adapter = provider.adapter
    key = f"bp{next(_ids)}"
    fast_key, slow_key = f"{key}-fast", f"{key}-slow"
    TALLIES[fast_key] = fast = Tally(n_fast)
    await silo.get_grain(StreamConsumer, fast_key).subscribe(provider_name, fast_key)
    slow = None
    if slow_delay is not None:
        TALLIES[slow_key] = slow = Tally(n, delay=slow_delay)
        await silo.get_grain(StreamConsumer, slow_key).subscribe(provider_name, slow_key)
    await _until(lambda: len(agent.cache) == 0 and adapter.queue_length(agent.queue) == 0)
    peak = getattr(agent, "_bench_peak", None) or _track_peak(agent)
    agent._bench_peak = peak
    peak[0] = 0
    spills_before = _spill_count(agent)
    samples: list[Sample] = []
    gc.collect()
    t0 = time.perf_counter()

    def sample() -> None:
        samples.append(Sample(
            time.perf_counter() - t0, len(agent.cache), agent.period,
            adapter.queue_length(agent.queue), len(agent.spiller), fast.count,
            slow.count if slow else 0, rss_mib(),
        ))

    async def sampler() -> None:
        while True:
            sample()
            await asyncio.sleep(SAMPLE_EVERY)

    task = asyncio.get_running_loop().create_task(sampler())
    try:
        await silo.get_grain(StreamProducer, "bp-producer").produce_two(
            provider_name, fast_key, n_fast, slow_key, n
        )
        async with asyncio.timeout(DONE_TIMEOUT):
            t_fast = await fast.done
            if slow is not None:
                await _settled(slow)
        t_slow = slow.last_at if slow else t_fast
        await _until(lambda: adapter.queue_length(agent.queue) == 0)  # all acknowledged
        await asyncio.sleep(0.2)  # a few samples after the end
        sample()
    finally:
        task.cancel()
    del TALLIES[fast_key]
    TALLIES.pop(slow_key, None)
    return BackpressureRun(
        provider_name, n, samples, n_fast / (t_fast - t0),
        (slow.count if slow else n) / (t_slow - t0),
        slow.count if slow else 0, slow.disorder if slow else 0, slow.gaps if slow else 0,
        fast.disorder + fast.gaps, peak[0], _spill_count(agent) - spills_before,
    )


def _spill_count(agent: Any) -> int:
    return int(getattr(agent, "spill_count", 0))


async def _settled(tally: Tally, quiet: float = 1.0) -> None:
    """Until ``tally`` has all its events, or none came for ``quiet`` seconds (it missed
    some: flow control ``max``)."""
    for _ in itertools.count():
        if tally.done.done() or (tally.count and time.perf_counter() - tally.last_at > quiet):
            return
        await asyncio.sleep(SAMPLE_EVERY)


async def backpressure(args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    opts = _provider_options(total_queues=1, cache_size=BP_CACHE, flow_control=args.flow_control)
    nospill = _provider_options(total_queues=1, cache_size=BP_CACHE, spill=False)
    providers = {
        "bp": PersistentStreamProvider(MemoryAdapterFactory(), opts),
        "bp_nospill": PersistentStreamProvider(MemoryAdapterFactory(), nospill),
    }
    async with _silo(providers) as silo:
        progress("backpressure: fast consumer alone ...")
        warm = await bp_run(silo, "bp", 3000, None)
        n = max(2000, int(args.bp_seconds * warm.fast_rate / (BP_SLOWDOWN + 1)))
        n_fast = min(QUEUE_CAPACITY // 2, max(n, int(BP_FAST_SECONDS * warm.fast_rate)))
        solo = await bp_run(silo, "bp", n, None, n_fast)
        delay = BP_SLOWDOWN / solo.fast_rate
        progress(f"backpressure: fast + slow (sleep {delay * 1e3:.2f} ms/event), N={n:,} ...")
        run = await bp_run(silo, "bp", n, delay, n_fast)
        progress("backpressure: the same with spill=False ...")
        lim = await bp_run(silo, "bp_nospill", n, delay, n_fast)
        agent = next(iter(providers["bp"].agents.values()))
        pressure_size = agent.cache.pressure_size
    periods = [s.period for s in lim.samples]
    rss = [s.rss for s in run.samples + lim.samples]
    figures = [
        Figure("backpressure_fast_rate", run.fast_rate, "events/s", solo.fast_rate, 0.8,
               f"fast consumer with a {BP_SLOWDOWN}x slower one on another stream of its "
               f"queue vs without it (flow control {args.flow_control}), {n_fast:,} events; the "
               f"slow one's stream gets N={n:,} (without a consumer in the baseline)"),
        Figure("backpressure_slow_in_order", run.slow_received - run.slow_disorder, "events",
               n, 1.0, f"events the slow consumer received in order, of N ({run.slow_gaps} "
               "gaps)"),
        Figure("backpressure_cache_max", max(run.cache_peak, lim.cache_peak), "containers",
               BP_CACHE, -1.0, "exact peak after every cache add, both runs; <= the bound"),
        Figure("backpressure_nospill_slow_in_order", lim.slow_received - lim.slow_disorder,
               "events", n, 1.0, "spill=False: the slow consumer's events received in order, "
               "of N"),
        Figure("backpressure_nospill_fast_rate", lim.fast_rate, "events/s", solo.fast_rate, 0.0,
               "spill=False: the fast consumer waits behind the slow one (as in Orleans)"),
        Figure("backpressure_nospill_pull_period_max", max(periods) * 1e3, "ms",
               opts.pull_period * 1e3, 0.0,
               f"spill=False, sampled; min {min(periods) * 1e3:g} ms, last "
               f"{periods[-1] * 1e3:g} ms; max_pull_period {opts.max_pull_period * 1e3:g} ms"),
        Figure("backpressure_rss_max", max(rss), "MiB", rss[0], 0.0,
               "process RSS, max during both runs vs at the start"),
    ]
    lines = [
        f"backpressure: {n_fast:,} events for the fast consumer and N={n:,} for the slow one, "
        f"on two streams of one queue (total_queues=1, "
        f"cache_size={BP_CACHE}, pull_period={opts.pull_period:g} s, pressure from "
        f"{pressure_size}), slow consumer paced at {delay * 1e3:.2f} ms/event",
    ]
    for r, label in ((run, f"spilling (default), flow control {args.flow_control}"),
                     (lim, "spill=False")):
        per = [s.period for s in r.samples]
        lines += [
            f"  {label}:",
            f"    cache: max {r.cache_peak} (exact) vs bound {BP_CACHE}; spilled "
            f"{r.spills} times; queue backlog max {max(s.backlog for s in r.samples):,}",
            f"    pull period: min {min(per) * 1e3:g} ms, max {max(per) * 1e3:g} ms, "
            f"last {per[-1] * 1e3:g} ms",
            f"    fast consumer: {r.fast_rate:,.0f}/s vs {solo.fast_rate:,.0f}/s without the "
            f"slow one ({r.fast_rate / solo.fast_rate:.0%})",
            f"    slow consumer: {r.slow_rate:,.0f}/s; received {r.slow_received:,} of {n:,}, "
            f"{r.slow_disorder} out of order, {r.slow_gaps} gaps",
        ]
    lines.append(f"  RSS: {rss[0]:.0f} MiB at start, max {max(rss):.0f} MiB")
    if args.plot is not None:
        lines.append(plot(args.plot, solo, run, lim, delay, opts, args.flow_control))
    return figures, lines


def _rates(samples: list[Sample], attr: str, window: int = 5) -> tuple[list[float], list[float]]:
    """Rate of a cumulative count over a sliding window of samples (centred times)."""
    ts, rs = [], []
    for a, b in zip(samples, samples[window:], strict=False):
        dt = b.t - a.t
        if dt > 0:
            ts.append((a.t + b.t) / 2)
            rs.append((getattr(b, attr) - getattr(a, attr)) / dt)
    return ts, rs


def plot(
    path: Path, solo: BackpressureRun, run: BackpressureRun, lim: BackpressureRun,
    delay: float, opts: StreamProviderOptions, flow: str,
) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "  (no plot: matplotlib is not installed; pip install matplotlib)"
    fig, grid = plt.subplots(5, 2, figsize=(15, 13), sharex="col")
    titles = (
        f"spilling (default, flow control {flow}): the slow one is served from the queue",
        "spill=False (as in Orleans): the full cache stops the reads for both",
    )
    top = max(max(x.backlog for x in r.samples) for r in (run, lim)) * 1.1 or 1
    for col, (r, title) in enumerate(zip((run, lim), titles, strict=True)):
        s = r.samples
        t = [x.t for x in s]
        ax = grid[0][col]
        ax.plot(t, [x.cache for x in s], label="cache occupancy")
        ax.axhline(opts.cache_size, color="red", linestyle="--",
                   label=f"cache bound {opts.cache_size}")
        ax.axhline(int(opts.cache_size * 0.9), color="orange", linestyle=":",
                   label="pressure (90 %)")
        ax.set_ylabel("containers")
        ax.set_ylim(0, opts.cache_size * 1.3)
        ax.legend(loc="upper right", fontsize=7)
        ax.set_title(title, fontsize=10)
        ax = grid[1][col]
        ax.plot(t, [x.backlog for x in s], color="grey",
                label="containers in the queue, unacknowledged")
        ax.set_ylim(0, top)
        ax.set_ylabel("containers")
        ax.legend(loc="upper right", fontsize=7)
        ax = grid[2][col]
        ax.step(t, [x.period * 1e3 for x in s], where="post", label="pull period")
        ax.axhline(opts.max_pull_period * 1e3, color="red", linestyle="--",
                   label=f"max_pull_period {opts.max_pull_period * 1e3:g} ms")
        ax.set_yscale("log")
        ax.set_ylabel("ms")
        ax.legend(loc="upper right", fontsize=7)
        ax = grid[3][col]
        tr, rr = _rates(solo.samples, "fast")
        ax.plot(tr, rr, color="tab:blue", alpha=0.35, label="fast, without the slow one")
        for attr, color in (("fast", "tab:blue"), ("slow", "tab:orange")):
            tr, rr = _rates(s, attr)
            ax.plot(tr, rr, color=color, label=f"{attr} consumer")
        ax.axhline(0.8 * solo.fast_rate, color="tab:blue", linestyle=":",
                   label="80 % of the fast one's rate without the slow one")
        ax.set_ylabel("events/s (0.25 s window)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right", fontsize=7)
        ax = grid[4][col]
        ax.plot(t, [x.rss for x in s], color="tab:green", label="RSS (VmRSS)")
        ax.set_ylim(0, max(x.rss for x in s) * 1.25)
        ax.set_ylabel("MiB")
        ax.set_xlabel("seconds since the first publish")
        ax.legend(loc="upper right", fontsize=7)
    fig.suptitle(
        f"Two streams on one queue: a fast consumer and one {BP_SLOWDOWN}x slower (paced, "
        f"{delay * 1e3:.2f} ms/event, N={run.n:,} events); cache_size={opts.cache_size}",
        fontsize=11,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return f"  plot: {path}"


# -- report ---------------------------------------------------------------------------------
def report(figures: list[Figure], as_json: bool) -> None:
    """As ``_common.report``, plus figures that are upper bounds (target < 0: ratio <= -target)
    and informational ones (target 0)."""
    if as_json:
        from _common import report as json_report

        json_report(figures, True)
        return
    w = max(len(f.name) for f in figures)
    print(f"{'figure':<{w}}  {'orleanspy':>12}  {'baseline':>12}  {'ratio':>7}  target")
    for f in figures:
        if f.target > 0:
            goal, ok = f">= {f.target:g}x", f.ratio >= f.target
        elif f.target < 0:
            goal, ok = f"<= {-f.target:g}x", f.ratio <= -f.target
        else:
            goal, ok = "info", True
        status = "" if f.target == 0 else ("ok" if ok else "MISSED")
        print(
            f"{f.name:<{w}}  {f.value:>12,.0f}  {f.baseline:>12,.0f}  {f.ratio:>6.2f}x"
            f"  {goal} {status}   ({f.unit})"
        )
        if f.note:
            print(f"  ({f.note})")


# -- profiling our side ---------------------------------------------------------------------
def _jetstream_factory(url: str) -> Any:
    from orleanspy.streams.adapters.nats import NatsAdapterFactory

    return NatsAdapterFactory(url)


async def profile(which: str, n: int) -> None:
    try:
        from pyinstrument import Profiler
    except ImportError:  # pragma: no cover - dev dependency
        sys.exit("--profile needs pyinstrument (pip install pyinstrument)")
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    kwargs: dict[str, Any] = {
        "memory": {}, "batch": {"batch": BATCH}, "fanout": {"consumers": FANOUT},
        "fanout10": {"consumers": 10},
        "sqlite": {"wait_ack": True}, "redis": {"wait_ack": True, "batch": BATCH},
        "postgres": {"wait_ack": True}, "jetstream": {"wait_ack": True},
    }[which]
    if which.startswith("fanout"):
        n = max(PRODUCERS, n // FANOUT)
    prefix = f"orleanspy-bench-{os.getpid()}"
    schema = f"orleanspy_bench_{os.getpid()}_{next(_ids)}"
    sep = "&" if "?" in POSTGRES_URL else "?"
    with tempfile.TemporaryDirectory(prefix="orleanspy-bench-") as tmp:
        factory: Any = (
            SqliteAdapterFactory(str(Path(tmp) / "s.db")) if which == "sqlite"
            else RedisAdapterFactory(f"{REDIS_URL}?prefix={prefix}")
            if which == "redis"
            else PostgresAdapterFactory(f"{POSTGRES_URL}{sep}schema={schema}")
            if which == "postgres"
            else _jetstream_factory(f"{NATS_URL}?prefix={prefix.replace('-', '_')}")
            if which == "jetstream" else MemoryAdapterFactory()
        )
        provider = PersistentStreamProvider(factory, _provider_options())
        cleanup = (_redis_keys_deleted(prefix) if which == "redis"
                   else _postgres_schema_dropped(POSTGRES_URL, schema) if which == "postgres"
                   else contextlib.nullcontext())
        async with cleanup, _silo({"p": provider}) as silo:
            try:
                await stream_trial(silo, "p", max(PRODUCERS, n // 10), **kwargs)  # warm-up
                rate = await stream_trial(silo, "p", n, profiler=profiler, **kwargs)
            finally:
                if which == "jetstream":
                    await silo.stream_providers["p"].adapter.delete_all()
    sys.stderr.write(f"\n=== {which}: {rate:,.0f} per second (N={n:,}) ===\n")
    sys.stderr.write(profiler.output_text(unicode=False, color=False))


# -- replay ---------------------------------------------------------------------------------
async def replay_figures(args: argparse.Namespace) -> list[Figure]:
    """``replay_{sqlite,redis}_from_storage_vs_live``: on a provider with a retention, N
    events are published and delivered live to one consumer (the baseline figure: live
    delivery until every event is acknowledged, which keeps them in storage), then a second
    consumer subscribes ``from_time`` before the first publish and gets all N replayed from
    the queue's storage (the figure: from the subscribe call until it has all N)."""
    figures: list[Figure] = []
    n = max(PRODUCERS, int(20_000 * args.seconds)) // PRODUCERS * PRODUCERS
    for kind in ("sqlite", "redis"):
        prefix = f"orleanspy-bench-replay-{os.getpid()}"
        with tempfile.TemporaryDirectory(prefix="orleanspy-bench-") as tmp:
            factory: Any = (SqliteAdapterFactory(str(Path(tmp) / "r.db")) if kind == "sqlite"
                            else RedisAdapterFactory(f"{REDIS_URL}?prefix={prefix}"))
            provider = PersistentStreamProvider(factory, _provider_options(
                total_queues=1, retention=3600.0))
            cleanup = (_redis_keys_deleted(prefix) if kind == "redis"
                       else contextlib.nullcontext())
            progress(f"replay from storage vs live, {kind} ...")
            try:
                async with cleanup, _silo({"r": provider}) as silo:
                    key = f"replay{next(_ids)}"
                    since = time.time() - 1.0
                    live = await stream_trial(silo, "r", n, wait_ack=True, key=key)
                    ck = f"{key}-replay"
                    TALLIES[ck] = tally = Tally(n)
                    t0 = time.perf_counter()
                    await silo.get_grain(StreamConsumer, ck).subscribe("r", key, None, since)
                    async with asyncio.timeout(DONE_TIMEOUT):
                        await tally.done
                    replay = n / (time.perf_counter() - t0)
                    tally.check(f"replay of {key}")
            except OSError as exc:  # no Redis server: the figure is left out
                progress(f"  {kind} unavailable: {exc!r}")
                continue
            figures.append(Figure(
                f"replay_{kind}_from_storage_vs_live", replay, "events/s", live, 0,
                f"N={n:,}, retention 3600 s; replay: subscribe(from_time) until all N from "
                "the queue's storage; baseline: live delivery of the same N until acknowledged",
            ))
    return figures


# -- main -----------------------------------------------------------------------------------
GROUPS = ("memory", "batch", "fanout", "filter", "sqlite", "redis", "postgres", "jetstream",
          "backpressure", "replay")


async def run(args: argparse.Namespace) -> tuple[list[Figure], list[str]]:
    which = set(args.only or GROUPS)
    figures = await throughput(args, which)
    if "postgres" in which:
        figures += await postgres_figures(args.seconds, args.trials)
    if "replay" in which:
        figures += await replay_figures(args)
    lines: list[str] = []
    if "backpressure" in which:
        bp_figures, lines = await backpressure(args)
        figures += bp_figures
    return figures, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list, nothing else")
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="target duration of one throughput trial (default 1.0)")
    parser.add_argument("--trials", type=int, default=5, help="trials per side (best is kept)")
    parser.add_argument("--only", action="append", choices=GROUPS,
                        help="run only these groups (repeatable)")
    parser.add_argument("--bp-seconds", type=float, default=8.0,
                        help="approximate length of the backpressure run (default 8)")
    parser.add_argument("--flow-control", default="min", choices=["min", "max"],
                        help="flow control of the backpressure run (default min)")
    parser.add_argument("--delivery-batch", type=int, default=None,
                        help="StreamProviderOptions.batch_size: containers per delivery call "
                        "(default: the provider's default)")
    parser.add_argument("--pull-period", type=float, default=None,
                        help="StreamProviderOptions.pull_period (default: the provider's "
                        "default, as the acceptance figures use)")
    parser.add_argument("--batch-handler", action="store_true",
                        help="consumers subscribe a batch observer (on_next_batch: one turn "
                        "per delivery) instead of on_next per event")
    parser.add_argument(
        "--plot", type=Path, nargs="?", const=PLOT, default=None,
        help=f"write the backpressure PNG to PLOT (given alone: {PLOT}); none by default",
    )
    parser.add_argument("--profile",
                        choices=["memory", "batch", "fanout", "fanout10", "sqlite", "redis",
                                 "postgres", "jetstream"],
                        help="profile orleanspy's side of one figure instead (stderr)")
    parser.add_argument("--events", type=int, default=30_000,
                        help="events for --profile (default 30000; fanout: /100)")
    args = parser.parse_args()
    DELIVERY_BATCH[0] = args.delivery_batch
    PULL_PERIOD[0] = args.pull_period
    BATCH_HANDLER[0] = args.batch_handler
    quiet_logging()
    if args.profile:
        asyncio.run(profile(args.profile, args.events))
        return
    t0 = time.perf_counter()
    figures, lines = asyncio.run(run(args))
    progress(f"done in {time.perf_counter() - t0:.0f} s")
    report(figures, args.json)
    if not args.json:
        for line in lines:
            print(line)
    else:
        for line in lines:
            progress(line)


if __name__ == "__main__":
    main()
