"""Acceptance tests of persistent streams that test_streams.py leaves open.

Subscribing inside the producer's own call; deactivating producer and consumer mid-stream;
the slow/fast scenario on different streams of one queue (memory and SQLite) with spilling;
resume from a token (also for a spilled subscription); exact notifications of the ``max``
and ``tagged`` flow-control strategies; a graceful stop during a failing delivery.

Consumers record into the module's ``SINK`` (a fresh one per test). A consumer is made slow
either by a *gate* (its handler awaits an ``asyncio.Event``: the delivery stays in flight) or
by ``SINK.fail`` (its handler raises and the agent retries: the grain stays free for other
calls). Nothing here waits for a duration or polls: tests await the sink, or the runtime
events of the silo (``RECORDERS``, one ``EventRecorder`` per silo from its start) that report
the agent state they check; tests on a ``FakeClock`` drive it with ``run_for``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions, reentrant
from orleanspy._util.clock import Clock
from orleanspy.diagnostics import (
    CachePressureChanged,
    CachePurged,
    DeliveryFailed,
    EventsAcknowledged,
    RuntimeEvent,
    SubscriptionRejoined,
    SubscriptionSpilled,
)
from orleanspy.errors import EventsMissedError, GatingRevokedError, QueueCacheMissError
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider, implicit_subscription
from orleanspy.streams.spill import SpillBook
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import EventRecorder, FakeClock

WAIT = 30.0  # generous: 2 cores shared with other test runs


class AccSink:
    """What the consumers of one test received, per consumer key, and their gates."""

    def __init__(self) -> None:
        self.got: dict[Any, list[Any]] = defaultdict(list)
        self.tokens: dict[Any, list[SequenceToken]] = defaultdict(list)
        self.errors: dict[Any, list[BaseException]] = defaultdict(list)
        self.log: dict[Any, list[Any]] = defaultdict(list)  # items and errors, in order
        self.activations: dict[Any, int] = defaultdict(int)
        self.waiting: dict[Any, int] = defaultdict(int)  # deliveries held at a gate now
        self.gates: dict[Any, asyncio.Event] = {}
        self.fail: Callable[[Any, Any], bool] = lambda key, item: False
        self.leave_at: set[tuple[Any, Any]] = set()  # (consumer, item): deactivate after it
        self.changed = asyncio.Event()

    def gate(self, key: Any) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    def open_all(self) -> None:
        for gate in self.gates.values():
            gate.set()
        self.fail = lambda key, item: False

    async def deliver(self, key: Any, item: Any, token: SequenceToken) -> None:
        gate = self.gates.get(key)
        if gate is not None and not gate.is_set():
            self.waiting[key] += 1
            self.changed.set()
            try:
                await gate.wait()
            finally:
                self.waiting[key] -= 1
        if self.fail(key, item):
            raise RuntimeError(f"consumer {key} refuses {item}")
        self.got[key].append(item)
        self.tokens[key].append(token)
        self.log[key].append(item)
        self.changed.set()

    def error(self, key: Any, exc: BaseException) -> None:
        self.errors[key].append(exc)
        self.log[key].append(exc)
        self.changed.set()

    async def until(self, predicate: Callable[[], bool], timeout: float = WAIT) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()


SINK = AccSink()
RESUME: set[tuple[str, Any]] = set()  # streams a reactivated AccConsumer resumes
RECORDERS: dict[Silo, EventRecorder] = {}  # the runtime events of each silo of the test


class AccProducer(Grain):
    async def on_activate(self) -> None:
        SINK.activations[("producer", self.key)] += 1

    async def produce(self, namespace: str, key: Any, items: list[Any]) -> None:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        for item in items:
            await stream.on_next(item)

    async def produce_batch(self, namespace: str, key: Any, items: list[Any]) -> None:
        await self.get_stream_provider("s").get_stream(namespace, key).on_next_batch(items)

    async def produce_then_leave(self, namespace: str, key: Any, items: list[Any]) -> None:
        await self.produce(namespace, key, items)
        self.deactivate_on_idle()

    async def subscribe_other_then_produce(
        self, consumer: str, namespace: str, key: Any, items: list[Any]
    ) -> None:
        """Inside this producer's call: a consumer subscribes, then the producer publishes."""
        await self.get_grain(AccConsumer, consumer).subscribe(namespace, key)
        await self.produce(namespace, key, items)


class AccConsumer(Grain):
    async def on_activate(self) -> None:
        SINK.activations[self.key] += 1
        for namespace, key in RESUME:
            stream = self.get_stream_provider("s").get_stream(namespace, key)
            for handle in await stream.get_subscriptions():
                await handle.resume(self._handle, on_error=self._error)

    async def subscribe(self, namespace: str, key: Any, token: SequenceToken | None = None,
                        tag: str | None = None) -> None:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        await stream.subscribe(self._handle, token, on_error=self._error, tag=tag)

    async def resume(self, namespace: str, key: Any, token: SequenceToken | None = None) -> int:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        handles = await stream.get_subscriptions()
        for handle in handles:
            await handle.resume(self._handle, token, on_error=self._error)
        return len(handles)

    async def _handle(self, item: Any, token: SequenceToken) -> None:
        await SINK.deliver(self.key, item, token)
        if (self.key, item) in SINK.leave_at:
            self.deactivate_on_idle()  # mid-stream: later events are still to come

    async def _error(self, exc: BaseException) -> None:
        SINK.error(self.key, exc)


class AccProsumer(Grain):
    """Subscribes to a stream and publishes on it in the same call (not reentrant)."""

    async def subscribe_and_publish(self, namespace: str, key: Any, items: list[Any]) -> None:
        stream = self.get_stream_provider("s").get_stream(namespace, key)
        await stream.subscribe(self._handle)
        for item in items:
            await stream.on_next(item)
        SINK.log[("published", self.key)].append(len(items))

    async def _handle(self, item: Any, token: SequenceToken) -> None:
        await SINK.deliver(self.key, item, token)


@reentrant
class AccReentrantProsumer(AccProsumer):
    pass


@implicit_subscription("imp")
class AccImplicit(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        await SINK.deliver(("imp", self.key), item, token)

    async def on_error(self, exc: BaseException) -> None:
        SINK.error(("imp", self.key), exc)


GRAINS = [AccProducer, AccConsumer, AccProsumer, AccReentrantProsumer, AccImplicit]

SiloMaker = Callable[..., Awaitable[Silo]]


@pytest.fixture
async def make() -> AsyncIterator[SiloMaker]:
    """``silo = await make(factory=None, **StreamProviderOptions)``; stopped after the test
    (after every gate was opened, so no delivery stays blocked)."""
    global SINK
    SINK = AccSink()
    RESUME.clear()
    RECORDERS.clear()
    silos: list[Silo] = []

    async def start(
        factory: QueueAdapterFactory | None = None, clock: Clock | None = None, **options: Any
    ) -> Silo:
        options = {"pull_period": 0.01, "max_delivery_time": 60, "delivery_backoff": 0.01,
                   "max_delivery_backoff": 0.05, **options}
        provider = PersistentStreamProvider(factory or MemoryAdapterFactory(),
                                            StreamProviderOptions(**options))
        silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=GRAINS,
                    stream_providers={"s": provider}, clock=clock)
        RECORDERS[silo] = EventRecorder(silo.diagnostics)  # from the start: nothing missed
        await silo.start()
        silos.append(silo)
        return silo

    yield start
    SINK.open_all()
    async with asyncio.timeout(60):
        for silo in silos:
            await silo.stop()
    for rec in RECORDERS.values():
        rec.close()


def no_spilling() -> dict[str, Any]:
    """The option that turns spilling off."""
    return {"spill": False}


def only_agent(silo: Silo) -> Any:
    agents = list(silo.stream_providers["s"].agents.values())
    assert len(agents) == 1, "these tests run with total_queues=1"
    return agents[0]


def peak_tracker(agent: Any) -> list[int]:
    """Record the cache's exact peak occupancy after every add."""
    cache, add, peak = agent.cache, agent.cache.add, [0]

    def counting_add(containers: Any) -> Any:
        first = add(containers)
        peak[0] = max(peak[0], len(cache))
        return first

    cache.add = counting_add
    return peak


class CountingSpillBook(SpillBook):
    """A SpillBook that counts the spills (the agent's own counter is not public API)."""

    def __init__(self) -> None:
        super().__init__()
        self.spilled: list[Any] = []  # consumer keys, in spill order

    def add(self, sub: Any) -> None:
        self.spilled.append(sub.record.consumer_key)
        super().add(sub)


def count_spills(agent: Any) -> CountingSpillBook:
    assert not agent.spiller.book, "install before anything was spilled"
    agent.spiller.book = book = CountingSpillBook()
    return book


class AckRecorder:
    """Wraps an agent's receiver: calls ``on_ack()`` for every non-empty acknowledgement."""

    def __init__(self, inner: Any, on_ack: Callable[[], Any]) -> None:
        self.inner = inner
        self.on_ack = on_ack

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def messages_delivered(self, batch: Any) -> None:
        if batch:
            self.on_ack()
        await self.inner.messages_delivered(batch)


async def park_a_caught_up_subscription(silo: Silo) -> None:
    """A caught-up consumer on another stream of the queue: someone waits for newer events,
    so a laggard is worth spilling from the first time the cache fills."""
    await silo.get_grain(AccConsumer, "idle").subscribe("ns", "idle")
    await silo.get_grain(AccProducer, "p").produce("ns", "idle", ["x"])
    await SINK.until(lambda: SINK.got["idle"] == ["x"])


async def reported(
    silo: Silo,
    kinds: type[RuntimeEvent] | tuple[type[RuntimeEvent], ...],
    predicate: Callable[[], bool],
) -> None:
    """Wait until ``predicate()`` (agent state) holds, checked now and on each of the silo's
    runtime events of ``kinds``: those that report a change of the state it reads."""
    await RECORDERS[silo].wait_state(kinds, predicate, WAIT)


async def queue_holds(silo: Silo, agent: Any, n: int) -> None:
    """Wait until the agent's queue keeps exactly ``n`` containers: checked now and after
    each acknowledgement (the only thing that removes containers from a queue)."""
    rec = RECORDERS[silo]
    while True:
        seen = len(rec.of(EventsAcknowledged))  # counted first: none slips in between
        if await queue_length(silo, agent) == n:
            return
        await rec.wait_event(EventsAcknowledged, timeout=WAIT, count=seen + 1)


async def run_until(clock: FakeClock, *waits: Coroutine[Any, Any, Any],
                    step: float = 0.01, within: float | None = None) -> None:
    """Drive fake time in ``step``s (agent pulls, back-offs) until every wait is done;
    fail if that takes more than ``within`` seconds of fake time."""
    done = asyncio.ensure_future(asyncio.gather(*waits))
    start = clock.monotonic()
    try:
        async with asyncio.timeout(WAIT):
            while not done.done():
                if within is not None and clock.monotonic() - start > within:
                    raise AssertionError(f"not done within {within:g} s of fake time")
                await clock.run_for(step)
        await done
    finally:
        done.cancel()


async def queue_length(silo: Silo, agent: Any) -> int:
    adapter = silo.stream_providers["s"].adapter
    if hasattr(adapter, "queue_length"):
        return int(adapter.queue_length(agent.queue))
    return int(await adapter.pending_count(agent.queue))


def factory_for(adapter: str, tmp_path: Path) -> QueueAdapterFactory:
    if adapter == "sqlite":
        return SqliteAdapterFactory(str(tmp_path / "queues.db"))
    return MemoryAdapterFactory()


# -- both join orders ---------------------------------------------------------------------------
async def test_join_producer_first_on_a_stream_the_agent_already_delivers(make: SiloMaker) -> None:
    """The producer publishes first and the agent has registered the stream (a witness got
    the event) before the consumer subscribes: exactly what follows is delivered, once."""
    silo = await make(total_queues=1)
    await silo.get_grain(AccConsumer, "witness").subscribe("ns", "k")
    producer = silo.get_grain(AccProducer, "p")
    await producer.produce("ns", "k", ["before"])
    await SINK.until(lambda: SINK.got["witness"] == ["before"])
    assert ("ns", "k") in {(s.namespace, s.key) for s in only_agent(silo).streams}
    await silo.get_grain(AccConsumer, "c").subscribe("ns", "k")
    await producer.produce("ns", "k", [*range(100), "end"])
    await SINK.until(lambda: "end" in SINK.got["c"] and "end" in SINK.got["witness"])
    assert SINK.got["c"] == [*range(100), "end"]  # "before" was read before it subscribed
    assert SINK.got["witness"] == ["before", *range(100), "end"]


# -- subscribing inside the producer's call -----------------------------------------------------
@pytest.mark.parametrize("cls", [AccProsumer, AccReentrantProsumer])
@pytest.mark.parametrize("warm", [False, True], ids=["new-stream", "known-stream"])
async def test_subscribe_then_publish_in_the_same_call(
    make: SiloMaker, cls: type[AccProsumer], warm: bool
) -> None:
    """A grain subscribes and then publishes more events than the cache holds, in one call.
    Not reentrant, it cannot take a delivery before the call returns: its subscription
    holds the cache (and may be spilled) meanwhile. No deadlock; every event once, in order."""
    silo = await make(total_queues=1, cache_size=50)
    if warm:  # the agent delivers this stream already: the rendezvous tells it directly
        await silo.get_grain(AccConsumer, "witness").subscribe("ns", "own")
        await silo.get_grain(AccProducer, "p").produce("ns", "own", ["warm"])
        await SINK.until(lambda: SINK.got["witness"] == ["warm"])
    n = 300
    async with asyncio.timeout(WAIT):
        await silo.get_grain(cls, "self").subscribe_and_publish("ns", "own", list(range(n)))
    await SINK.until(lambda: len(SINK.got["self"]) >= n)
    await silo.get_grain(AccProducer, "p").produce("ns", "own", ["end"])
    await SINK.until(lambda: "end" in SINK.got["self"])
    assert SINK.got["self"] == [*range(n), "end"]
    if warm:
        await SINK.until(lambda: "end" in SINK.got["witness"])
        assert SINK.got["witness"] == ["warm", *range(n), "end"]


async def test_consumer_subscribed_by_the_producer_inside_its_call_gets_what_follows(
    make: SiloMaker,
) -> None:
    """Inside its call the producer makes a consumer subscribe, then publishes: the consumer
    gets a contiguous tail of the stream that includes everything published after its
    subscribe returned (earlier events not yet read by the agent may come too)."""
    silo = await make(total_queues=1)
    producer = silo.get_grain(AccProducer, "p")
    await producer.produce("ns", "k", ["before"])
    stream: list[Any] = ["before"]
    for round_ in range(5):
        items = [(round_, n) for n in range(20)]
        await producer.subscribe_other_then_produce(f"c{round_}", "ns", "k", items)
        stream += items
    await producer.produce("ns", "k", ["end"])
    stream.append("end")
    keys = [f"c{r}" for r in range(5)]
    await SINK.until(lambda: all("end" in SINK.got[k] for k in keys))
    for r, key in enumerate(keys):
        got = SINK.got[key]
        after = [(rr, n) for rr in range(r, 5) for n in range(20)]
        assert got == stream[len(stream) - len(got):], key  # a tail, in order, no repeats
        assert got[-len(after) - 1:] == [*after, "end"], key


# -- deactivating producer and consumer mid-stream ----------------------------------------------
@pytest.mark.parametrize("cache_size", [4096, 40], ids=["big-cache", "small-cache"])
async def test_deactivating_producer_and_consumer_mid_stream_keeps_exact_counts(
    make: SiloMaker, cache_size: int
) -> None:
    """The consumer deactivates inside its deliveries of events 30 and 140 (later events
    are cached or still queued; with the small cache it gates the reads or is spilled) and
    resumes without a token in on_activate; the producer deactivates after each of its
    calls. Every event arrives exactly once, in order, and both really were reactivated."""
    silo = await make(total_queues=1, cache_size=cache_size)
    RESUME.add(("ns", "k"))
    SINK.leave_at = {("c", 30), ("c", 140)}
    consumer = silo.get_grain(AccConsumer, "c")
    producer = silo.get_grain(AccProducer, "p")
    await consumer.subscribe("ns", "k")
    for chunk in range(4):
        await producer.produce_then_leave("ns", "k", list(range(chunk * 50, chunk * 50 + 50)))
        act = silo.catalog.get(producer.grain_id)  # type: ignore[attr-defined]
        if act is not None:
            async with asyncio.timeout(WAIT):
                await act.wait_deactivated()
        assert silo.catalog.get(producer.grain_id) is None  # type: ignore[attr-defined]
    await producer.produce("ns", "k", ["end"])
    await SINK.until(lambda: "end" in SINK.got["c"])
    assert SINK.got["c"] == [*range(200), "end"]
    assert SINK.errors["c"] == []
    assert SINK.activations[("producer", "p")] == 5
    assert SINK.activations["c"] == 3  # deactivated twice mid-stream, reactivated by delivery


# -- the slow/fast scenario ---------------------------------------------------------------------
@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
async def test_slow_and_fast_consumers_on_two_streams_of_one_queue(
    make: SiloMaker, adapter: str, tmp_path: Path
) -> None:
    """Slow (its first delivery blocked) and fast consumer on different streams of the only
    queue. The cache never exceeds its bound; the fast one gets every event while the slow
    one has none; the slow one's events wait in the queue, unacknowledged; once released it
    gets every event in order, exactly once, and the queue drains."""
    n, bound = 500, 100
    silo = await make(factory_for(adapter, tmp_path), total_queues=1, cache_size=bound)
    agent = only_agent(silo)
    peak = peak_tracker(agent)
    book = count_spills(agent)
    # Someone caught up from the start, so the first full cache spills the laggard whatever
    # the fast one's position then (else see test_a_stuck_consumer_does_not_stall_...).
    await park_a_caught_up_subscription(silo)
    gate = SINK.gate("slow")
    await silo.get_grain(AccConsumer, "slow").subscribe("ns", "slow-stream")
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "fast-stream")
    producer = silo.get_grain(AccProducer, "p")
    for chunk in range(10):  # interleaved on the queue
        items = list(range(chunk * 50, chunk * 50 + 50))
        await producer.produce("ns", "slow-stream", items)
        await producer.produce("ns", "fast-stream", items)
    await SINK.until(lambda: len(SINK.got["fast"]) >= n)
    assert SINK.got["fast"] == list(range(n))
    assert SINK.got["slow"] == [] and SINK.waiting["slow"] == 1  # stuck on its first event
    assert agent.read == 2 * n + 1 and peak[0] <= bound  # + the idle stream's event
    # Everything is read and the fast stream purged: exactly the slow stream stays queued.
    await reported(silo, (CachePurged, SubscriptionSpilled),
                   lambda: len(agent.cache) == 0 and agent.snapshot().spilled == 1)
    assert "slow" in book.spilled and SINK.got["slow"] == []
    # The fast stream's acknowledgements complete; none of the slow stream's is made.
    await queue_holds(silo, agent, n)
    gate.set()
    await SINK.until(lambda: len(SINK.got["slow"]) >= n)
    assert SINK.got["slow"] == list(range(n))
    await reported(silo, SubscriptionRejoined, lambda: agent.snapshot().spilled == 0)
    await queue_holds(silo, agent, 0)  # all acknowledged at last
    await producer.produce("ns", "slow-stream", ["end"])  # served from the cache again
    await producer.produce("ns", "fast-stream", ["end"])
    await SINK.until(lambda: "end" in SINK.got["slow"] and "end" in SINK.got["fast"])
    assert SINK.got["slow"] == [*range(n), "end"] and SINK.got["fast"] == [*range(n), "end"]
    assert peak[0] <= bound


@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
async def test_slow_consumer_that_keeps_progressing_is_spilled_and_rejoins(
    make: SiloMaker, adapter: str, tmp_path: Path
) -> None:
    """A slow consumer (held at first, then each delivery yields many times) with a fast
    peer on its stream and a fast consumer on another stream of the same queue, while the
    producers go on: it falls out of the cache, is served from the queue, catches up and
    rejoins (maybe several times). Cache bounded; everyone gets every event in order,
    exactly once; the queue drains."""
    n, bound = 1500, 60
    silo = await make(factory_for(adapter, tmp_path), total_queues=1, cache_size=bound)
    agent = only_agent(silo)
    peak = peak_tracker(agent)
    book = count_spills(agent)
    slow_steps = 40

    real_deliver = SINK.deliver

    async def deliver(key: Any, item: Any, token: SequenceToken) -> None:
        if key == "slow":
            for _ in range(slow_steps):  # slow, not blocked: many loop turns per event
                await asyncio.sleep(0)
        await real_deliver(key, item, token)

    SINK.deliver = deliver  # type: ignore[method-assign]
    await park_a_caught_up_subscription(silo)  # see the test above
    gate = SINK.gate("slow")  # held at first, so that it falls out of the cache for sure
    await silo.get_grain(AccConsumer, "slow").subscribe("ns", "a")
    await silo.get_grain(AccConsumer, "slow-peer").subscribe("ns", "a")  # same stream, fast
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "b")
    producer = silo.get_grain(AccProducer, "p")

    async def open_gate() -> None:
        await SINK.until(lambda: len(SINK.got["fast"]) >= n // 4)
        await reported(silo, SubscriptionSpilled, lambda: "slow" in book.spilled)
        gate.set()

    opener = asyncio.create_task(open_gate())
    try:
        for chunk in range(n // 50):
            items = list(range(chunk * 50, chunk * 50 + 50))
            await asyncio.gather(producer.produce("ns", "a", items),
                                 silo.get_grain(AccProducer, "q").produce("ns", "b", items))
        await opener
    finally:
        opener.cancel()
    await SINK.until(lambda: len(SINK.got["fast"]) >= n and len(SINK.got["slow-peer"]) >= n)
    await SINK.until(lambda: len(SINK.got["slow"]) >= n, timeout=60)
    await producer.produce("ns", "a", ["end"])
    await SINK.until(lambda: "end" in SINK.got["slow"])
    assert SINK.got["slow"] == [*range(n), "end"]
    assert SINK.got["slow-peer"][:n] == list(range(n))
    assert SINK.got["fast"] == list(range(n))
    assert peak[0] <= bound
    assert "slow" in book.spilled  # the scenario did spill
    await reported(silo, SubscriptionRejoined, lambda: agent.snapshot().spilled == 0)
    await queue_holds(silo, agent, 0)


@pytest.mark.parametrize("late", [
    pytest.param(False, id="peer-on-its-stream"),
    pytest.param(True, id="late-other-stream"),
])
async def test_a_stuck_consumer_does_not_stall_the_other_consumers_of_its_queue(
    make: SiloMaker, late: bool
) -> None:
    """Spilling on (the default): a consumer stuck on event 10 must not stop the others of
    its queue once they wait for newer events: a peer on its stream that lagged too when the
    cache first filled, or a consumer of another stream that subscribes after the stuck one
    filled the cache."""
    clock = FakeClock()  # back-offs and the pressure's max_pull_period pass in fake time
    silo = await make(total_queues=1, cache_size=50, clock=clock)  # pressure mark 45, half 25
    agent = only_agent(silo)
    SINK.fail = lambda key, item: key == "slow" and item >= 10
    await silo.get_grain(AccConsumer, "slow").subscribe("ns", "a")
    if not late:
        SINK.gate("fast")  # lags too when the cache first fills
        await silo.get_grain(AccConsumer, "fast").subscribe("ns", "a")
    producer = silo.get_grain(AccProducer, "p")
    rec = RECORDERS[silo]
    await producer.produce("ns", "a", list(range(200)))
    await run_until(clock, SINK.until(lambda: len(SINK.got["slow"]) >= 10),
                    rec.wait_event(CachePressureChanged, lambda e: e.on))  # the cache filled up
    assert agent.read >= 45
    if late:
        await silo.get_grain(AccConsumer, "fast").subscribe("ns", "b")
        await producer.produce("ns", "b", list(range(20)))
    else:
        SINK.gates["fast"].set()  # now it waits for newer events: the laggard should go
    expected = list(range(20 if late else 200))
    # Within a few back-off periods; a queue stalled by the stuck consumer never gets there.
    await run_until(clock, SINK.until(lambda: len(SINK.got["fast"]) >= len(expected)),
                    within=10.0)
    assert SINK.got["fast"] == expected
    assert SINK.got["slow"] == list(range(10))
    SINK.fail = lambda key, item: False
    await run_until(clock, SINK.until(lambda: len(SINK.got["slow"]) >= 200))
    await producer.produce("ns", "a", ["end"])
    await run_until(clock, SINK.until(lambda: "end" in SINK.got["slow"]))
    assert SINK.got["slow"] == [*range(200), "end"]


# -- resume from a token ------------------------------------------------------------------------
async def test_resume_from_a_cached_token_rewinds_the_subscription(make: SiloMaker) -> None:
    silo = await make(total_queues=1)
    consumer = silo.get_grain(AccConsumer, "c")
    await consumer.subscribe("ns", "k")
    # A stuck second subscription keeps the stream's events in the cache.
    SINK.fail = lambda key, item: key == "holder"
    await silo.get_grain(AccConsumer, "holder").subscribe("ns", "k")
    producer = silo.get_grain(AccProducer, "p")
    await producer.produce("ns", "k", list(range(10)))
    await SINK.until(lambda: len(SINK.got["c"]) >= 10)
    token = SINK.tokens["c"][4]
    assert await consumer.resume("ns", "k", token) == 1
    await SINK.until(lambda: len(SINK.got["c"]) >= 16)
    await producer.produce("ns", "k", ["end"])
    await SINK.until(lambda: "end" in SINK.got["c"])
    assert SINK.got["c"] == [*range(10), *range(4, 10), "end"]
    assert SINK.tokens["c"][10] == token
    assert SINK.errors["c"] == []


async def test_resume_from_a_purged_token_reports_the_miss_and_continues_from_low(
    make: SiloMaker,
) -> None:
    silo = await make(total_queues=1)
    consumer = silo.get_grain(AccConsumer, "c")
    await consumer.subscribe("ns", "k")
    producer = silo.get_grain(AccProducer, "p")
    await producer.produce("ns", "k", list(range(5)))
    await SINK.until(lambda: len(SINK.got["c"]) >= 5)
    agent = only_agent(silo)
    # purged and acknowledged: gone everywhere
    await reported(silo, EventsAcknowledged, lambda: agent.acknowledged >= 5)
    old = SINK.tokens["c"][1]
    SINK.fail = lambda key, item: key == "holder"  # keeps 5.. cached
    await silo.get_grain(AccConsumer, "holder").subscribe("ns", "k")
    await producer.produce("ns", "k", [5, 6, 7])
    await SINK.until(lambda: len(SINK.got["c"]) >= 8)
    low = SINK.tokens["c"][5]
    assert await consumer.resume("ns", "k", old) == 1
    await SINK.until(lambda: bool(SINK.errors["c"]) and len(SINK.got["c"]) >= 11)
    miss = SINK.errors["c"][0]
    assert isinstance(miss, QueueCacheMissError)
    assert (miss.requested, miss.low, miss.high) == (old, low, SINK.tokens["c"][7])
    assert SINK.got["c"] == [*range(8), 5, 6, 7]  # continues from the oldest available


async def test_resume_of_a_spilled_subscription_without_token_keeps_its_position(
    make: SiloMaker,
) -> None:
    silo = await make(total_queues=1, cache_size=50)
    agent = only_agent(silo)
    await park_a_caught_up_subscription(silo)
    slow = silo.get_grain(AccConsumer, "slow")
    await slow.subscribe("ns", "k")
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "k")
    SINK.fail = lambda key, item: key == "slow" and item >= 10  # retried, grain stays free
    await silo.get_grain(AccProducer, "p").produce("ns", "k", list(range(200)))
    await SINK.until(lambda: len(SINK.got["fast"]) >= 200)
    await reported(silo, (CachePurged, SubscriptionSpilled),
                   lambda: agent.snapshot().spilled == 1 and len(agent.cache) == 0)
    assert SINK.got["slow"] == list(range(10))
    assert await slow.resume("ns", "k") == 1  # e.g. after a reactivation
    SINK.fail = lambda key, item: False
    await SINK.until(lambda: len(SINK.got["slow"]) >= 200)
    await silo.get_grain(AccProducer, "p").produce("ns", "k", ["end"])
    await SINK.until(lambda: "end" in SINK.got["slow"])
    assert SINK.got["slow"] == [*range(200), "end"] and SINK.errors["slow"] == []


async def test_resume_of_a_spilled_subscription_from_a_token_the_queue_still_holds(
    make: SiloMaker,
) -> None:
    """The slow subscription is spilled at event 10; events 10..199 left the cache but stay
    in the queue (their acknowledgement is held for it). Resuming from event 150's token must
    deliver 150.. from the queue (DESIGN 3: 'where the cache or the queue still holds it')."""
    silo = await make(total_queues=1, cache_size=50)
    agent = only_agent(silo)
    await park_a_caught_up_subscription(silo)
    slow = silo.get_grain(AccConsumer, "slow")
    await slow.subscribe("ns", "k")
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "k")  # learns the tokens
    SINK.fail = lambda key, item: key == "slow" and item >= 10
    await silo.get_grain(AccProducer, "p").produce("ns", "k", list(range(200)))
    await SINK.until(lambda: len(SINK.got["fast"]) >= 200)
    await reported(silo, (CachePurged, SubscriptionSpilled),
                   lambda: agent.snapshot().spilled == 1 and len(agent.cache) == 0)
    assert await queue_length(silo, agent) >= 190  # 10..199 are still in the queue
    token = SINK.tokens["fast"][150]
    # The delivery of 10 being retried never succeeds (see the test below for why).
    SINK.fail = lambda key, item: key == "slow" and isinstance(item, int) and 10 <= item < 150
    assert await slow.resume("ns", "k", token) == 1
    await silo.get_grain(AccProducer, "p").produce("ns", "k", ["end"])
    await SINK.until(lambda: "end" in SINK.got["slow"])
    assert SINK.errors["slow"] == []
    assert SINK.got["slow"] == [*range(10), *range(150, 200), "end"]


async def test_a_retry_pending_when_the_subscription_is_resumed_is_not_delivered(
    make: SiloMaker,
) -> None:
    """The consumer refuses event 10; during the retry back-off it resumes from event 15's
    token (still cached) and accepts everything again. The replaced subscription's pending
    retry must not deliver 10 after resume returned: the consumer asked for 15 on."""
    clock = FakeClock()
    silo = await make(total_queues=1, delivery_backoff=2.0, max_delivery_backoff=2.0,
                      clock=clock)
    agent = only_agent(silo)
    consumer = silo.get_grain(AccConsumer, "c")
    await consumer.subscribe("ns", "k")
    await silo.get_grain(AccConsumer, "witness").subscribe("ns", "k")  # learns the tokens
    refused: list[int] = []

    def fail(key: Any, item: Any) -> bool:
        if key == "c" and item == 10:
            refused.append(item)
            return True
        return False

    SINK.fail = fail
    await silo.get_grain(AccProducer, "p").produce("ns", "k", list(range(20)))
    # The next attempt is about 2 s of fake time away: time stops once 10 was refused.
    await run_until(clock, SINK.until(lambda: len(SINK.got["witness"]) >= 20),
                    RECORDERS[silo].wait_event(DeliveryFailed, timeout=WAIT))  # 10 refused
    assert refused and set(refused) == {10}
    (old,) = [sub for subs in agent.streams.values() for sub in subs.values()
              if sub.record.consumer_key == "c"]
    assert old.task is not None  # waiting in its back-off
    assert await consumer.resume("ns", "k", SINK.tokens["witness"][15]) == 1
    SINK.fail = lambda key, item: False
    loop_of_old = old.task
    await clock.run_for(2.0)  # the replaced subscription's back-off ends
    async with asyncio.timeout(WAIT):
        await loop_of_old  # and its loop with it
    assert old.task is None
    await silo.get_grain(AccProducer, "p").produce("ns", "k", ["end"])
    await run_until(clock, SINK.until(lambda: "end" in SINK.got["c"]))
    assert SINK.got["c"] == [*range(10), *range(15, 20), "end"]  # actual: 10 after 19


# -- flow control: exact notifications ---------------------------------------------------------
async def test_max_flow_control_names_the_exact_range_the_laggard_missed(
    make: SiloMaker,
) -> None:
    """The laggard's delivery of event 0 is held while the fastest takes 0..49 and the
    cache purges them: it gets 0 (in flight, not missed), then EventsMissedError(1..49)
    exactly, then what follows."""
    silo = await make(flow_control="max", total_queues=1)
    agent = only_agent(silo)
    gate = SINK.gate("lag")
    await silo.get_grain(AccConsumer, "lag").subscribe("ns", "k")
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "k")
    producer = silo.get_grain(AccProducer, "p")
    await producer.produce("ns", "k", list(range(50)))
    await SINK.until(lambda: len(SINK.got["fast"]) >= 50 and SINK.waiting["lag"] == 1)
    # the fastest is past everything: purged
    await reported(silo, CachePurged, lambda: len(agent.cache) == 0)
    gate.set()
    await SINK.until(lambda: len(SINK.log["lag"]) >= 2)
    await producer.produce("ns", "k", [50, 51])
    await SINK.until(lambda: 51 in SINK.got["lag"])
    tokens = SINK.tokens["fast"]
    (gap,) = SINK.errors["lag"]
    assert isinstance(gap, EventsMissedError)
    assert (gap.first, gap.last) == (tokens[1], tokens[49])
    assert SINK.log["lag"] == [0, gap, 50, 51]  # told before the events after the gap


@pytest.mark.parametrize("flow", ["max", "tagged,group=archive"])
async def test_laggard_told_of_every_event_purged_while_its_delivery_ran(
    make: SiloMaker, flow: str
) -> None:
    """As above, but more events (50, 51) come and are purged while the laggard's delivery
    of 0 is still in flight: the gap it is told of must reach 51, or it must get 50 and 51.
    Every event must be either delivered or named in an EventsMissedError."""
    silo = await make(flow_control=flow, total_queues=1)
    agent = only_agent(silo)
    gate = SINK.gate("lag")
    await silo.get_grain(AccConsumer, "lag").subscribe("ns", "k")  # a non-member if tagged
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "k", tag="archive")
    producer = silo.get_grain(AccProducer, "p")
    await producer.produce("ns", "k", list(range(50)))
    await SINK.until(lambda: len(SINK.got["fast"]) >= 50 and SINK.waiting["lag"] == 1)
    await reported(silo, CachePurged, lambda: len(agent.cache) == 0)
    await producer.produce("ns", "k", [50, 51])
    await SINK.until(lambda: len(SINK.got["fast"]) >= 52)
    # 50, 51 purged too, 0 still in flight
    await reported(silo, CachePurged, lambda: len(agent.cache) == 0)
    gate.set()
    await SINK.until(lambda: len(SINK.log["lag"]) >= 2)
    await producer.produce("ns", "k", [52])
    await SINK.until(lambda: 52 in SINK.got["lag"])
    tokens = SINK.tokens["fast"]
    (gap,) = SINK.errors["lag"]
    assert isinstance(gap, EventsMissedError)
    assert SINK.log["lag"] == [0, gap, 52]
    assert (gap.first, gap.last) == (tokens[1], tokens[51])


async def test_max_flow_control_gap_of_batches_ends_at_the_last_missed_event(
    make: SiloMaker,
) -> None:
    silo = await make(flow_control="max", total_queues=1)
    agent = only_agent(silo)
    gate = SINK.gate("lag")
    await silo.get_grain(AccConsumer, "lag").subscribe("ns", "k")
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "k")
    producer = silo.get_grain(AccProducer, "p")
    for b in range(5):  # five containers of three events each
        await producer.produce_batch("ns", "k", [(b, i) for i in range(3)])
    await SINK.until(lambda: len(SINK.got["fast"]) >= 15 and SINK.waiting["lag"] == 1)
    await reported(silo, CachePurged, lambda: len(agent.cache) == 0)
    gate.set()
    await SINK.until(lambda: len(SINK.log["lag"]) >= 4)
    await producer.produce("ns", "k", ["end"])
    await SINK.until(lambda: "end" in SINK.got["lag"])
    tokens = SINK.tokens["fast"]
    # The first container (3 events) was in flight and is delivered; events 3..14 missed.
    assert SINK.got["lag"] == [(0, 0), (0, 1), (0, 2), "end"]
    (gap,) = SINK.errors["lag"]
    assert isinstance(gap, EventsMissedError)
    assert gap.first == tokens[3]
    assert gap.last == tokens[14]  # the last event missed: (sequence, 2), not (sequence, 0)


async def test_tagged_non_member_is_told_the_exact_range_it_missed(make: SiloMaker) -> None:
    silo = await make(flow_control="tagged,group=archive", total_queues=1)
    agent = only_agent(silo)
    gate = SINK.gate("viewer")
    await silo.get_grain(AccConsumer, "archive").subscribe("ns", "k", tag="archive")
    await silo.get_grain(AccConsumer, "viewer").subscribe("ns", "k")
    producer = silo.get_grain(AccProducer, "p")
    await producer.produce("ns", "k", list(range(30)))
    await SINK.until(lambda: len(SINK.got["archive"]) >= 30 and SINK.waiting["viewer"] == 1)
    # the stuck non-member held nothing
    await reported(silo, CachePurged, lambda: len(agent.cache) == 0)
    gate.set()
    await SINK.until(lambda: len(SINK.log["viewer"]) >= 2)
    await producer.produce("ns", "k", [30])
    await SINK.until(lambda: 30 in SINK.got["viewer"] and 30 in SINK.got["archive"])
    tokens = SINK.tokens["archive"]
    (gap,) = SINK.errors["viewer"]
    assert isinstance(gap, EventsMissedError) and (gap.first, gap.last) == (tokens[1], tokens[29])
    assert SINK.log["viewer"] == [0, gap, 30]
    assert SINK.got["archive"] == list(range(31)) and SINK.errors["archive"] == []


async def test_tagged_member_gates_until_its_timeout_then_is_told_and_no_longer_gates(
    make: SiloMaker,
) -> None:
    """A stuck member holds every event of the stream (nothing is acknowledged) until the
    timeout; then it gets GatingRevokedError, the cache purges, and once it recovers it is
    told exactly what it missed and receives what follows."""
    timeout = 1.0
    clock = FakeClock()  # the timeout passes in fake time: the test does not wait for it
    silo = await make(flow_control=f"tagged,group=g,timeout={timeout}s", total_queues=1,
                      clock=clock)
    agent = only_agent(silo)
    acked_at: list[float] = []
    agent.receiver = AckRecorder(agent.receiver, lambda: acked_at.append(clock.monotonic()))
    SINK.fail = lambda key, item: key == "stuck"  # retried: the grain stays free for on_error
    await silo.get_grain(AccConsumer, "stuck").subscribe("ns", "k", tag="g")
    await silo.get_grain(AccConsumer, "ok").subscribe("ns", "k", tag="g")
    producer = silo.get_grain(AccProducer, "p")
    started = clock.monotonic()  # the stuck member's cursor is set after this
    await producer.produce("ns", "k", list(range(20)))
    await run_until(clock, SINK.until(lambda: len(SINK.got["ok"]) >= 20))
    await run_until(clock, SINK.until(lambda: bool(SINK.errors["stuck"])))
    (revoked,) = SINK.errors["stuck"]
    assert isinstance(revoked, GatingRevokedError)
    await run_until(clock, RECORDERS[silo].wait_state(  # no longer held
        (CachePurged, EventsAcknowledged), lambda: len(agent.cache) == 0 and bool(acked_at),
        WAIT))
    assert acked_at[0] - started >= timeout  # held (unacknowledged) for the timeout
    SINK.fail = lambda key, item: False
    await run_until(clock, SINK.until(lambda: len(SINK.log["stuck"]) >= 3))  # 0, then the gap
    await producer.produce("ns", "k", [20])
    await run_until(clock, SINK.until(lambda: 20 in SINK.got["stuck"] and 20 in SINK.got["ok"]))
    tokens = SINK.tokens["ok"]
    gap = SINK.errors["stuck"][1]
    assert isinstance(gap, EventsMissedError) and (gap.first, gap.last) == (tokens[1], tokens[19])
    assert SINK.log["stuck"] == [revoked, 0, gap, 20]
    assert SINK.got["ok"] == list(range(21))


async def test_min_flow_control_without_spilling_never_drops_and_tells_nobody(
    make: SiloMaker,
) -> None:
    """Gating under min with spilling off: the stuck consumer holds the cache, the agent
    stops reading (the queue keeps the backlog), nobody is told of missed events, and after
    it recovers both consumers get everything."""
    silo = await make(total_queues=1, cache_size=50, max_pull_period=0.1, **no_spilling())
    agent = only_agent(silo)
    peak = peak_tracker(agent)
    SINK.fail = lambda key, item: key == "slow"
    await silo.get_grain(AccConsumer, "slow").subscribe("ns", "k")
    await silo.get_grain(AccConsumer, "fast").subscribe("ns", "k")
    with EventRecorder(silo.diagnostics) as rec:
        await silo.get_grain(AccProducer, "p").produce("ns", "k", list(range(300)))
        await rec.wait_event(CachePressureChanged, lambda e: e.on)
    assert agent.cache.under_pressure() and agent.period > agent.options.pull_period
    assert agent.read < 300 and agent.acknowledged == 0 and peak[0] <= 50
    assert len(SINK.got["fast"]) < 300  # the slowest gates everyone on the queue
    SINK.fail = lambda key, item: False
    await SINK.until(lambda: len(SINK.got["slow"]) >= 300 and len(SINK.got["fast"]) >= 300)
    assert SINK.got["slow"] == list(range(300)) and SINK.got["fast"] == list(range(300))
    assert SINK.errors["slow"] == [] and SINK.errors["fast"] == [] and peak[0] <= 50


# -- graceful restart -------------------------------------------------------------------------
async def test_graceful_stop_during_a_transient_delivery_failure_loses_nothing(
    make: SiloMaker,
) -> None:
    """A consumer's delivery of event 3 fails (transiently: its retry budget is 60 s) when
    the silo is stopped gracefully. After a restart on the same queues the event must be
    delivered: it was never delivered, so it must not have been acknowledged."""
    factory = MemoryAdapterFactory()  # the queues outlive the silo (same factory)
    options = {"total_queues": 1, "cache_size": 10}
    silo = await make(factory, **options)
    key = ("imp", "k")
    refused: list[Any] = []

    def fail(consumer: Any, item: Any) -> bool:
        if consumer == key and item == 3:
            refused.append(item)
            return True
        return False

    SINK.fail = fail
    await silo.get_grain(AccProducer, "p").produce("imp", "k", list(range(10)))
    await RECORDERS[silo].wait_event(DeliveryFailed, timeout=WAIT)  # 3 refused
    await SINK.until(lambda: SINK.got[key] == [0, 1, 2])
    assert refused and set(refused) == {3}
    await silo.stop()
    SINK.fail = lambda consumer, item: False
    silo2 = await make(factory, **options)
    await silo2.get_grain(AccProducer, "p").produce("imp", "k", ["end"])
    await SINK.until(lambda: "end" in SINK.got[key])
    assert first_seen(SINK.got[key]) == [*range(10), "end"]
    assert SINK.errors[key] == []  # nothing failed for good: the retry budget was 60 s


def first_seen(items: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for x in items:
        if x not in seen:
            seen.append(x)
    return seen
