"""Persistent streams end to end in one silo: delivery counts, ordering, faults, tokens, races."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions, reentrant
from orleanspy._util.clock import Clock
from orleanspy.diagnostics import (
    CachePressureChanged,
    CachePurged,
    DeliveryAbandoned,
    DeliveryFailed,
    DeliveryRetried,
    EventsAcknowledged,
    PullPeriodChanged,
    QueueAcquired,
    QueueRead,
    QueueReleased,
    RuntimeEvent,
    SubscriptionRejoined,
    SubscriptionSpilled,
)
from orleanspy.errors import QueueCacheMissError, StreamDeliveryError
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider, implicit_subscription
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import EventRecorder, FakeClock

WAIT = 10.0


class Sink:
    """What consumers received, per consumer key; tests await conditions on it."""

    def __init__(self) -> None:
        self.got: dict[Any, list[Any]] = defaultdict(list)
        self.tokens: dict[Any, list[SequenceToken]] = defaultdict(list)
        self.errors: dict[Any, list[BaseException]] = defaultdict(list)
        self.changed = asyncio.Event()
        self.fail: Callable[[Any, Any], bool] = lambda key, item: False

    def add(self, key: Any, item: Any, token: SequenceToken) -> None:
        self.got[key].append(item)
        self.tokens[key].append(token)
        self.changed.set()

    def error(self, key: Any, exc: BaseException) -> None:
        self.errors[key].append(exc)
        self.changed.set()

    async def until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


SINK = Sink()


class Producer(Grain):
    async def produce(self, namespace: str, key: Any, items: list[Any]) -> None:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        for item in items:
            await stream.on_next(item)

    async def produce_batch(self, namespace: str, key: Any, items: list[Any]) -> None:
        await self.get_stream_provider("s").get_stream(namespace, key).on_next_batch(items)

    async def leave(self) -> None:
        self.deactivate_on_idle()


class Consumer(Grain):
    async def on_activate(self) -> None:
        # Resume this grain's subscriptions after a reactivation.
        for namespace, key in getattr(self.silo, "resume_streams", ()):
            stream = self.get_stream_provider("s").get_stream(namespace, key)
            for handle in await stream.get_subscriptions():
                await handle.resume(self._handle, on_error=self._error)

    async def subscribe(self, namespace: str, key: Any, token: SequenceToken | None = None,
                        tag: str | None = None) -> None:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        await stream.subscribe(self._handle, token, on_error=self._error, tag=tag)

    async def unsubscribe_all(self, namespace: str, key: Any) -> int:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        handles = await stream.get_subscriptions()
        for handle in handles:
            await handle.unsubscribe()
        return len(handles)

    async def _handle(self, item: Any, token: SequenceToken) -> None:
        if SINK.fail(self.key, item):
            raise RuntimeError(f"consumer refuses {item}")
        SINK.add(self.key, item, token)

    async def _error(self, exc: BaseException) -> None:
        SINK.error(self.key, exc)

    async def leave(self) -> None:
        self.deactivate_on_idle()


@reentrant
class ReentrantProsumer(Consumer):
    async def produce_and_consume(self, namespace: str, key: Any, items: list[Any]) -> None:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        await stream.subscribe(self._handle)
        for item in items:
            await stream.on_next(item)


class Prosumer(ReentrantProsumer):
    pass


Prosumer._orleanspy_reentrant = False  # type: ignore[attr-defined]


@implicit_subscription("implicit")
class Implicit(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        SINK.add(("implicit", self.key), item, token)


GRAINS = [Producer, Consumer, Prosumer, ReentrantProsumer, Implicit]


@pytest.fixture
async def silo() -> AsyncIterator[Silo]:
    global SINK
    SINK = Sink()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(pull_period=0.01, max_delivery_time=0.5, delivery_backoff=0.01,
                              max_delivery_backoff=0.05),
    )
    s = Silo(SiloOptions(gateway_port=None), grains=GRAINS, stream_providers={"s": provider})
    await s.start()
    yield s
    await s.stop()


async def test_stream_consumer_first_receives_everything_in_order(silo: Silo) -> None:
    await silo.get_grain(Consumer, "c").subscribe("ns", "k")
    await silo.get_grain(Producer, "p").produce("ns", "k", list(range(200)))
    await SINK.until(lambda: len(SINK.got["c"]) >= 200)
    assert SINK.got["c"] == list(range(200))
    assert SINK.tokens["c"] == sorted(SINK.tokens["c"])


async def test_stream_producer_first_then_consumer_gets_what_follows(silo: Silo) -> None:
    producer = silo.get_grain(Producer, "p")
    await producer.produce("ns", "k", ["before"])
    await silo.get_grain(Consumer, "c").subscribe("ns", "k")
    await producer.produce("ns", "k", list(range(100)))
    await SINK.until(lambda: len([x for x in SINK.got["c"] if x != "before"]) >= 100)
    assert [x for x in SINK.got["c"] if x != "before"] == list(range(100))


async def test_stream_many_producers_many_consumers_exact_counts(silo: Silo) -> None:
    consumers = [f"c{i}" for i in range(5)]
    for c in consumers:
        await silo.get_grain(Consumer, c).subscribe("ns", "shared")
    producers = [silo.get_grain(Producer, f"p{i}") for i in range(4)]
    await asyncio.gather(*(
        p.produce("ns", "shared", [(i, n) for n in range(50)]) for i, p in enumerate(producers)
    ))
    await SINK.until(lambda: all(len(SINK.got[c]) >= 200 for c in consumers))
    for c in consumers:
        assert len(SINK.got[c]) == 200
        for i in range(4):  # per producer, in order
            assert [n for (p, n) in SINK.got[c] if p == i] == list(range(50))


@pytest.mark.parametrize("cls", [Prosumer, ReentrantProsumer])
async def test_stream_producer_and_consumer_in_one_grain_do_not_deadlock(
    silo: Silo, cls: type
) -> None:
    await silo.get_grain(cls, "self").produce_and_consume("ns", "own", list(range(30)))
    await SINK.until(lambda: len(SINK.got["self"]) >= 30)
    assert SINK.got["self"] == list(range(30))


async def test_stream_implicit_subscriber_gets_its_keys_stream(silo: Silo) -> None:
    await silo.get_grain(Producer, "p").produce("implicit", "z", list(range(20)))
    await silo.get_grain(Producer, "p").produce("implicit", "y", ["other"])
    await SINK.until(lambda: len(SINK.got[("implicit", "z")]) >= 20
                     and len(SINK.got[("implicit", "y")]) >= 1)
    assert SINK.got[("implicit", "z")] == list(range(20))
    assert SINK.got[("implicit", "y")] == ["other"]


async def test_stream_many_streams_in_parallel(silo: Silo) -> None:
    keys = [f"k{i}" for i in range(40)]
    for k in keys:
        await silo.get_grain(Consumer, k).subscribe("many", k)
    await asyncio.gather(*(
        silo.get_grain(Producer, k).produce("many", k, list(range(25))) for k in keys
    ))
    await SINK.until(lambda: all(len(SINK.got[k]) >= 25 for k in keys))
    assert all(SINK.got[k] == list(range(25)) for k in keys)


async def test_stream_transient_delivery_faults_lose_nothing(silo: Silo) -> None:
    failures: dict[Any, int] = defaultdict(int)

    def flaky(key: Any, item: Any) -> bool:
        if item % 7 == 0 and failures[item] < 2:
            failures[item] += 1
            return True
        return False

    SINK.fail = flaky
    await silo.get_grain(Consumer, "c").subscribe("ns", "k")
    await silo.get_grain(Producer, "p").produce("ns", "k", list(range(50)))
    await SINK.until(lambda: len(SINK.got["c"]) >= 50)
    assert SINK.got["c"] == list(range(50))
    assert failures  # the faults really happened


async def test_stream_poison_event_is_skipped_after_on_error() -> None:
    """An event refused past max_delivery_time is skipped (on_error is told) and the events
    after it are delivered, in order; the retries wait on the silo's (fake) clock."""
    global SINK
    SINK = Sink()
    clock = FakeClock()
    silo = await make_silo(clock=clock, max_delivery_time=0.5, max_delivery_backoff=0.05,
                           failure="skip")
    try:
        SINK.fail = lambda key, item: item == 13
        await silo.get_grain(Consumer, "c").subscribe("ns", "k")
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(30)))
        await _run_until(clock, SINK.until(lambda: len(SINK.got["c"]) >= 29 and SINK.errors["c"]))
        assert SINK.got["c"] == [i for i in range(30) if i != 13]
        assert isinstance(SINK.errors["c"][0], StreamDeliveryError)
    finally:
        await silo.stop()


async def test_stream_subscribe_from_a_token_in_the_cache_rewinds(silo: Silo) -> None:
    await silo.get_grain(Consumer, "first").subscribe("ns", "k")
    # Keep the events cached: a consumer that has not got past them gates the cache.
    SINK.fail = lambda key, item: key == "stuck"
    await silo.get_grain(Consumer, "stuck").subscribe("ns", "k")
    producer = silo.get_grain(Producer, "p")
    await producer.produce("ns", "k", list(range(10)))
    await SINK.until(lambda: len(SINK.got["first"]) >= 10)
    token5 = SINK.tokens["first"][5]
    await silo.get_grain(Consumer, "late").subscribe("ns", "k", token5)
    await SINK.until(lambda: len(SINK.got["late"]) >= 5)
    assert SINK.got["late"] == [5, 6, 7, 8, 9]


async def test_stream_subscribe_from_a_purged_token_reports_a_cache_miss(silo: Silo) -> None:
    await silo.get_grain(Consumer, "first").subscribe("ns", "k")
    await silo.get_grain(Producer, "p").produce("ns", "k", list(range(5)))
    await SINK.until(lambda: len(SINK.got["first"]) >= 5)
    old = SINK.tokens["first"][0]
    agent = next(iter(silo.stream_providers["s"].agents.values()))
    for a in silo.stream_providers["s"].agents.values():
        await a.read_once()  # purge what everyone has
    del agent
    await silo.get_grain(Consumer, "late").subscribe("ns", "k", old)
    await SINK.until(lambda: bool(SINK.errors["late"]))
    miss = SINK.errors["late"][0]
    assert isinstance(miss, QueueCacheMissError) and miss.requested == old


async def test_stream_deactivated_consumer_resumes_with_exact_counts(silo: Silo) -> None:
    silo.resume_streams = [("ns", "k")]  # type: ignore[attr-defined]
    consumer = silo.get_grain(Consumer, "c")
    producer = silo.get_grain(Producer, "p")
    await consumer.subscribe("ns", "k")
    await producer.produce("ns", "k", list(range(20)))
    await SINK.until(lambda: len(SINK.got["c"]) >= 20)
    await consumer.leave()
    await producer.leave()
    act = silo.catalog.get(consumer.grain_id)
    if act is not None:
        await act.wait_deactivated()
    assert silo.catalog.get(consumer.grain_id) is None
    await producer.produce("ns", "k", list(range(20, 40)))
    await SINK.until(lambda: len(SINK.got["c"]) >= 40)
    assert SINK.got["c"] == list(range(40))


async def test_stream_unsubscribe_stops_delivery(silo: Silo) -> None:
    consumer = silo.get_grain(Consumer, "c")
    await consumer.subscribe("ns", "k")
    await silo.get_grain(Consumer, "witness").subscribe("ns", "k")
    assert await consumer.unsubscribe_all("ns", "k") == 1
    await silo.get_grain(Producer, "p").produce("ns", "k", list(range(10)))
    await SINK.until(lambda: len(SINK.got["witness"]) >= 10)
    assert SINK.got["c"] == []


async def test_stream_subscribe_versus_publish_race_never_misses(silo: Silo) -> None:
    producer = silo.get_grain(Producer, "p")
    for round_ in range(30):
        key = f"race{round_}"
        await producer.produce("race", key, ["warm"])  # the agent knows the stream
        consumer = silo.get_grain(Consumer, key)
        published: list[int] = []

        async def publish(k: str = key, out: list[int] = published) -> None:
            for n in range(20):
                await producer.produce("race", k, [n])
                out.append(n)
                await asyncio.sleep(0)

        pub = asyncio.create_task(publish())
        await asyncio.sleep(0)
        await consumer.subscribe("race", key)
        after = len(published)  # everything from index `after` on was published later
        await pub
        await SINK.until(lambda k=key, a=after: set(range(a, 20)) <= set(SINK.got[k]))
        got = [x for x in SINK.got[key] if x != "warm"]
        assert got == sorted(got)


async def test_stream_batch_publish_delivers_each_event(silo: Silo) -> None:
    await silo.get_grain(Consumer, "c").subscribe("ns", "k")
    await silo.get_grain(Producer, "p").produce_batch("ns", "k", ["a", "b", "c"])
    await SINK.until(lambda: len(SINK.got["c"]) >= 3)
    assert SINK.got["c"] == ["a", "b", "c"]
    tokens = SINK.tokens["c"]
    assert tokens[0].sequence == tokens[2].sequence and [t.index for t in tokens] == [0, 1, 2]


async def make_silo(clock: Clock | None = None, **options: Any) -> Silo:
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(),
        StreamProviderOptions(**{"pull_period": 0.01, "max_delivery_time": 30,
                                 "delivery_backoff": 0.01, "max_delivery_backoff": 0.02,
                                 **options}),
    )
    silo = Silo(SiloOptions(gateway_port=None), grains=GRAINS, stream_providers={"s": provider},
                clock=clock)
    await silo.start()
    return silo


async def test_stream_delivery_retries_wait_on_the_silo_clock_and_are_reported() -> None:
    """A refused event is retried after back-offs of the silo's (fake) clock, each attempt
    reported; past max_delivery_time it is abandoned, skipped, and on_error is told."""
    global SINK
    SINK = Sink()
    clock = FakeClock()
    silo = await make_silo(clock=clock, max_delivery_time=3.5, delivery_backoff=1.0,
                           max_delivery_backoff=1.0, failure="skip")
    try:
        with EventRecorder(silo.diagnostics) as rec:
            SINK.fail = lambda key, item: item == "poison"
            await silo.get_grain(Consumer, "c").subscribe("ns", "k")
            await silo.get_grain(Producer, "p").produce("ns", "k", ["poison"])
            await _run_until(clock, rec.wait_event(DeliveryRetried))
            (retried,) = rec.of(DeliveryRetried)
            assert retried.attempt == 1 and 0.9 <= retried.delay <= 1.0
            await asyncio.sleep(0.05)
            assert len(rec.of(DeliveryFailed)) == 1  # real time does not move the retry
            await clock.run_for(1.0)
            await rec.wait_event(DeliveryFailed, count=2)
            await clock.run_for(3.0)
            abandoned = await rec.wait_event(DeliveryAbandoned)
            assert abandoned.action == "skip" and abandoned.subscription
            await silo.get_grain(Producer, "p").produce("ns", "k", ["ok"])
            await _run_until(clock, SINK.until(lambda: SINK.got["c"] == ["ok"]))
            (error,) = SINK.errors["c"]
            assert isinstance(error, StreamDeliveryError)
            assert [e.attempt for e in rec.of(DeliveryFailed)] == [1, 2, 3, 4]
    finally:
        await silo.stop()


async def test_stream_agent_pulls_on_the_silo_clock() -> None:
    """The agent reads its queue once per pull period of the silo's clock, not of real time."""
    global SINK
    SINK = Sink()
    clock = FakeClock()
    silo = await make_silo(clock=clock, total_queues=1, pull_period=1.0, max_pull_period=2.0)
    try:
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        await silo.get_grain(Consumer, "c").subscribe("ns", "k")
        await silo.get_grain(Producer, "p").produce("ns", "k", ["a"])
        await clock.run_for(1.0)  # the first pull falls within the first period
        await SINK.until(lambda: SINK.got["c"] == ["a"])
        await silo.get_grain(Producer, "p").produce("ns", "k", ["b"])
        await asyncio.sleep(0.05)
        assert agent.read == 1 and SINK.got["c"] == ["a"]  # real time does not pull
        await clock.run_for(1.0)
        await SINK.until(lambda: SINK.got["c"] == ["a", "b"])
    finally:
        await silo.stop()


async def test_stream_queue_acquired_and_released_are_reported() -> None:
    silo = Silo(SiloOptions(gateway_port=None), grains=GRAINS, stream_providers={
        "s": PersistentStreamProvider(MemoryAdapterFactory(), StreamProviderOptions(
            total_queues=2)),
    })
    rec = EventRecorder(silo.diagnostics)
    await silo.start()
    await silo.stop()
    rec.close()
    assert sorted(e.queue for e in rec.of(QueueAcquired)) == sorted(
        e.queue for e in rec.of(QueueReleased)
    )
    assert len(rec.of(QueueAcquired)) == 2


class Gate:
    """Holds a consumer's deliveries until opened."""

    def __init__(self) -> None:
        self.open = asyncio.Event()


def _peak_tracker(agent: Any) -> list[int]:
    """Record the cache's exact peak occupancy after every add."""
    cache, add, peak = agent.cache, agent.cache.add, [0]

    def counting_add(containers: Any) -> Any:
        first = add(containers)
        peak[0] = max(peak[0], len(cache))
        return first

    cache.add = counting_add
    return peak


async def _run_until(clock: FakeClock, *waits: Coroutine[Any, Any, Any],
                     step: float = 0.01) -> None:
    """Drive fake time in ``step``s (agent pulls, back-offs) until every wait is done."""
    done = asyncio.ensure_future(asyncio.gather(*waits))
    try:
        async with asyncio.timeout(WAIT):
            while not done.done():
                await clock.run_for(step)
        await done
    finally:
        done.cancel()


async def _reported(
    rec: EventRecorder,
    kinds: type[RuntimeEvent] | tuple[type[RuntimeEvent], ...],
    predicate: Callable[[], bool],
) -> None:
    """Wait until ``predicate()`` (agent state) holds, checked now and on each runtime event
    of ``kinds``: those that report a change of the state it reads."""
    await rec.wait_state(kinds, predicate, WAIT)


def _queue_drained(rec: EventRecorder, adapter: Any, agent: Any) -> Coroutine[Any, Any, None]:
    """Wait until the agent's queue is empty: checked on each acknowledgement (the only
    thing that removes containers from a queue)."""
    return rec.wait_state(EventsAcknowledged, lambda: adapter.queue_length(agent.queue) == 0,
                          WAIT)


async def test_stream_slow_consumer_is_spilled_to_the_queue_and_the_fast_one_goes_on() -> None:
    global SINK
    SINK = Sink()
    silo = await make_silo(cache_size=100, total_queues=1)
    try:
        gate = asyncio.Event()
        SINK.fail = lambda key, item: key == "slow" and not gate.is_set()  # retried later
        await silo.get_grain(Consumer, "slow").subscribe("ns", "k")
        await silo.get_grain(Consumer, "fast").subscribe("ns", "k")
        await silo.get_grain(Consumer, "other").subscribe("ns", "k2")  # same queue
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        rec = EventRecorder(silo.diagnostics)  # before anything is read
        peak = _peak_tracker(agent)
        producer = silo.get_grain(Producer, "p")
        for chunk in range(10):
            await producer.produce("ns", "k", list(range(chunk * 50, chunk * 50 + 50)))
            await producer.produce("ns", "k2", [chunk])
        # The fast consumers get everything while the slow one is still stuck on event 0.
        await SINK.until(lambda: len(SINK.got["fast"]) >= 500 and len(SINK.got["other"]) >= 10)
        assert SINK.got["slow"] == []
        assert SINK.got["fast"] == list(range(500)) and SINK.got["other"] == list(range(10))
        assert agent.snapshot().spilled == 1
        assert peak[0] <= 100  # the cache stayed bounded
        adapter = silo.stream_providers["s"].adapter
        assert adapter.queue_length(agent.queue) >= 500  # the slow one's events stay queued
        gate.set()
        await SINK.until(lambda: len(SINK.got["slow"]) >= 500, timeout=20)
        assert SINK.got["slow"] == list(range(500))  # every event, in order, once
        await _reported(rec, SubscriptionRejoined, lambda: agent.snapshot().spilled == 0)
        await _queue_drained(rec, adapter, agent)  # all acknowledged
        await producer.produce("ns", "k", [500])  # back in the cache: delivered from there
        await SINK.until(lambda: 500 in SINK.got["slow"] and 500 in SINK.got["fast"])
        assert SINK.got["slow"] == list(range(501)) and peak[0] <= 100
    finally:
        await silo.stop()


@pytest.mark.parametrize("spill", [True, False])
async def test_stream_full_cache_and_nobody_waiting_backs_off(spill: bool) -> None:
    """A lone stuck consumer: the full cache stops the reads and the period backs off. With
    spilling, once the pressure lasted max_pull_period the consumer is spilled anyway (a
    stream not read yet may be waiting behind it) and the reads go on; without, the backlog
    waits in the queue until the consumer drains the cache."""
    global SINK
    SINK = Sink()
    clock = FakeClock()
    silo = await make_silo(clock=clock, cache_size=100, total_queues=1, max_pull_period=0.2,
                           spill=spill)
    try:
        gate = asyncio.Event()
        SINK.fail = lambda key, item: key == "slow" and not gate.is_set()
        await silo.get_grain(Consumer, "slow").subscribe("ns", "k")
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        peak = _peak_tracker(agent)
        rec = EventRecorder(silo.diagnostics)
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(1000)))
        await _run_until(clock, rec.wait_event(CachePressureChanged, lambda e: e.on))
        assert agent.period > agent.options.pull_period  # backed off first
        if spill:
            await _run_until(clock, _reported(
                rec, (SubscriptionSpilled, QueueRead),
                lambda: agent.snapshot().spilled == 1 and agent.read == 1000))
        else:
            await _run_until(clock, _reported(
                rec, (PullPeriodChanged, QueueRead, CachePurged),
                lambda: agent.period >= 0.04 and agent.cache.under_pressure()))
            assert agent.read < 1000 and agent.snapshot().spilled == 0
        assert peak[0] <= 100
        gate.set()
        await _run_until(clock, SINK.until(lambda: len(SINK.got["slow"]) >= 1000, timeout=20))
        assert SINK.got["slow"] == list(range(1000))
        await _run_until(clock, _reported(  # full speed again
            rec, PullPeriodChanged, lambda: agent.period == agent.options.pull_period))
        rec.close()
        assert peak[0] <= 100
    finally:
        await silo.stop()


async def test_stream_a_consumer_that_keeps_up_is_not_spilled_for_a_burst() -> None:
    """A burst on one stream fills the cache while the other stream of the queue is idle
    (its subscription has everything, and the cache no longer holds any of its events):
    nobody is held back, so the burst's consumer stays in the cache and gets every event
    from there, never re-read from the queue."""
    global SINK
    SINK = Sink()
    clock = FakeClock()
    silo = await make_silo(clock=clock, cache_size=100, total_queues=1, pull_period=0.05,
                           max_pull_period=0.5)
    try:
        await silo.get_grain(Consumer, "idle").subscribe("ns", "quiet")
        await silo.get_grain(Consumer, "fast").subscribe("ns", "k")
        producer = silo.get_grain(Producer, "p")
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        quiet = StreamId("ns", "quiet")
        with EventRecorder(silo.diagnostics) as purges:
            await producer.produce("ns", "quiet", [0])  # registered, delivered, purged
            await _run_until(clock, SINK.until(lambda: SINK.got["idle"] == [0]), step=0.001)
            await _run_until(clock, purges.wait_state(
                CachePurged, lambda: not agent.cache.holds(quiet), WAIT), step=0.01)
        with EventRecorder(silo.diagnostics) as rec:
            await producer.produce("ns", "k", list(range(1000)))
            await _run_until(clock, SINK.until(lambda: len(SINK.got["fast"]) >= 1000),
                             step=0.001)
        assert SINK.got["fast"] == list(range(1000))
        assert any(e.on for e in rec.of(CachePressureChanged))  # the burst filled the cache
        assert agent.snapshot().spill_count == 0
    finally:
        await silo.stop()


async def test_stream_unsubscribing_a_spilled_subscription_releases_its_events() -> None:
    global SINK
    SINK = Sink()
    silo = await make_silo(cache_size=100, total_queues=1)
    try:
        SINK.fail = lambda key, item: key == "slow"  # never accepts anything
        await silo.get_grain(Consumer, "slow").subscribe("ns", "k")
        await silo.get_grain(Consumer, "fast").subscribe("ns", "k")
        rec = EventRecorder(silo.diagnostics)
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(300)))
        await SINK.until(lambda: len(SINK.got["fast"]) >= 300)
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        await _reported(rec, SubscriptionSpilled, lambda: agent.snapshot().spilled == 1)
        assert await silo.get_grain(Consumer, "slow").unsubscribe_all("ns", "k") == 1
        adapter = silo.stream_providers["s"].adapter
        await _queue_drained(rec, adapter, agent)
        rec.close()
        assert agent.snapshot().spilled == 0
    finally:
        await silo.stop()


async def test_stream_max_flow_control_tells_the_laggard_what_it_missed() -> None:
    global SINK
    SINK = Sink()
    silo = await make_silo(flow_control="max", cache_size=1000, total_queues=1)
    try:
        gate = asyncio.Event()
        SINK.fail = lambda key, item: key == "lag" and not gate.is_set()
        await silo.get_grain(Consumer, "lag").subscribe("ns", "k")
        await silo.get_grain(Consumer, "fast").subscribe("ns", "k")
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(50)))
        await SINK.until(lambda: len(SINK.got["fast"]) >= 50)
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        await agent.read_once()  # purge behind the fastest consumer
        gate.set()
        await silo.get_grain(Producer, "p").produce("ns", "k", [50, 51])
        await SINK.until(lambda: bool(SINK.errors["lag"]) and 51 in SINK.got["lag"])
        from orleanspy.errors import EventsMissedError

        gaps = [e for e in SINK.errors["lag"] if isinstance(e, EventsMissedError)]
        assert gaps, SINK.errors["lag"]
        missed = set(range(gaps[0].first.sequence, gaps[0].last.sequence + 1))
        received = set(SINK.got["lag"])
        # every event is either received or reported missed, and none both
        assert received.isdisjoint({n for n in range(52) if SINK.tokens["fast"][n].sequence
                                    in missed})
        assert len(received) + len(
            [n for n in range(50) if SINK.tokens["fast"][n].sequence in missed]
        ) >= 51
    finally:
        await silo.stop()


async def test_stream_tagged_flow_control_only_the_group_gates() -> None:
    global SINK
    SINK = Sink()
    silo = await make_silo(flow_control="tagged,group=archive", cache_size=1000,
                           total_queues=1)
    try:
        gate = asyncio.Event()
        SINK.fail = lambda key, item: key in ("viewer", "archive") and not gate.is_set()
        await silo.get_grain(Consumer, "archive").subscribe("ns", "k", tag="archive")
        await silo.get_grain(Consumer, "viewer").subscribe("ns", "k")
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(30)))
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        await agent.read_once()  # read whatever the pump has not read yet, then purge
        await agent.read_once()
        assert len(agent.cache) == 30  # the stuck archive member holds everything
        gate.set()
        await SINK.until(lambda: len(SINK.got["archive"]) >= 30 and len(SINK.got["viewer"]) >= 30)
        assert SINK.got["archive"] == list(range(30))
    finally:
        await silo.stop()


async def test_stream_tagged_flow_control_a_stuck_non_member_does_not_gate() -> None:
    global SINK
    SINK = Sink()
    silo = await make_silo(flow_control="tagged,group=archive", cache_size=1000,
                           total_queues=1)
    try:
        gate = asyncio.Event()
        SINK.fail = lambda key, item: key == "viewer" and not gate.is_set()
        await silo.get_grain(Consumer, "archive").subscribe("ns", "k", tag="archive")
        await silo.get_grain(Consumer, "viewer").subscribe("ns", "k")
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(30)))
        await SINK.until(lambda: len(SINK.got["archive"]) >= 30)
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        await agent.read_once()
        assert len(agent.cache) == 0  # the archive group is past everything
        gate.set()
        await silo.get_grain(Producer, "p").produce("ns", "k", [30])
        await SINK.until(lambda: 30 in SINK.got["viewer"])
        from orleanspy.errors import EventsMissedError

        assert any(isinstance(e, EventsMissedError) for e in SINK.errors["viewer"])
    finally:
        await silo.stop()


async def test_stream_tagged_group_waits_for_its_minimum_size() -> None:
    global SINK
    SINK = Sink()
    silo = await make_silo(flow_control="tagged,group=g,min=2", total_queues=1)
    try:
        await silo.get_grain(Consumer, "m1").subscribe("ns", "k", tag="g")
        await silo.get_grain(Consumer, "other").subscribe("ns", "k")
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(10)))
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        await agent.read_once()
        await agent.read_once()
        assert SINK.got["m1"] == [] and SINK.got["other"] == []  # the group is not complete
        assert len(agent.cache) == 10
        await silo.get_grain(Consumer, "m2").subscribe("ns", "k", tag="g")
        await SINK.until(lambda: len(SINK.got["m1"]) >= 10 and len(SINK.got["other"]) >= 10)
        assert SINK.got["m1"] == list(range(10))
    finally:
        await silo.stop()


async def test_stream_tagged_member_that_stalls_stops_gating_and_is_told() -> None:
    global SINK
    SINK = Sink()
    silo = await make_silo(flow_control="tagged,group=g,timeout=200ms", total_queues=1)
    try:
        SINK.fail = lambda key, item: key == "stuck"
        await silo.get_grain(Consumer, "stuck").subscribe("ns", "k", tag="g")
        await silo.get_grain(Consumer, "ok").subscribe("ns", "k", tag="g")
        await silo.get_grain(Producer, "p").produce("ns", "k", list(range(20)))
        await SINK.until(lambda: len(SINK.got["ok"]) >= 20)
        from orleanspy.errors import GatingRevokedError

        await SINK.until(
            lambda: any(isinstance(e, GatingRevokedError) for e in SINK.errors["stuck"]),
            timeout=5,
        )
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        await agent.read_once()
        assert len(agent.cache) == 0  # the stalled member no longer holds the events
    finally:
        await silo.stop()


async def test_stream_client_publishes_through_the_gateway() -> None:
    global SINK
    SINK = Sink()
    from orleanspy.testing import TestCluster

    provider = PersistentStreamProvider(MemoryAdapterFactory(),
                                        StreamProviderOptions(pull_period=0.01))
    async with TestCluster(GRAINS, stream_providers={"s": provider}) as cluster:
        await cluster.get_grain(Consumer, "c").subscribe("ns", "from-client")
        stream = cluster.client.get_stream_provider("s").get_stream("ns", "from-client")
        for n in range(10):
            await stream.on_next(n)
        await stream.on_next_batch([10, 11])
        await SINK.until(lambda: len(SINK.got["c"]) >= 12)
        assert SINK.got["c"] == list(range(12))


async def test_stream_agent_statistics_are_readable_from_the_silo(silo: Silo) -> None:
    await silo.get_grain(Consumer, "c").subscribe("ns", "k")
    await silo.get_grain(Producer, "p").produce("ns", "k", list(range(10)))
    await SINK.until(lambda: len(SINK.got["c"]) >= 10)
    stats = silo.statistics().streams["s"]
    assert len(stats) == 8  # one agent per queue
    busy = [s for s in stats if s.read]
    assert len(busy) == 1 and busy[0].read == 10 and busy[0].delivered == 10
    assert busy[0].subscriptions == 1 and busy[0].cache_max == 4096


async def test_stream_agent_reports_reads_purges_and_acknowledgements() -> None:
    """The agent's counters and the events that report them agree: what was read, purged
    from the cache and acknowledged to the queue."""
    global SINK
    SINK = Sink()
    silo = await make_silo(total_queues=1)
    try:
        agent = next(iter(silo.stream_providers["s"].agents.values()))
        adapter = silo.stream_providers["s"].adapter
        with EventRecorder(silo.diagnostics) as rec:
            await silo.get_grain(Consumer, "c").subscribe("ns", "k")
            await silo.get_grain(Producer, "p").produce("ns", "k", list(range(10)))
            await SINK.until(lambda: len(SINK.got["c"]) >= 10)
            await _queue_drained(rec, adapter, agent)
            assert sum(e.count for e in rec.of(QueueRead)) == agent.read == 10
            assert rec.of(QueueRead)[-1].total == 10
            assert sum(e.count for e in rec.of(CachePurged)) == 10
            acks = rec.of(EventsAcknowledged)
            assert sum(e.count for e in acks) == acks[-1].total == agent.acknowledged == 10
            assert {e.queue for e in acks} == {str(agent.queue)}
            assert not rec.of(SubscriptionSpilled) and not rec.of(PullPeriodChanged)
    finally:
        await silo.stop()
