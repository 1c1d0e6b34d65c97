"""Time travel on durable adapters: a retention keeps acknowledged events in the queue's
storage, ``subscribe(..., from_time=...)`` replays them from there and hands the subscription
over to the live cache without a gap or a duplicate, and a point beyond the retention fails
with an error naming the oldest point available. Everything runs on a ``FakeClock``: the
adapters stamp events (written, acknowledged) with the silo's clock, so an hour passes in
fake time."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.errors import ConfigurationError, ReplayUnavailableError
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.adapters.base import QueueAdapter, QueueAdapterFactory
from orleanspy.streams.adapters.redis import RedisAdapterFactory
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.stream import StreamObserver
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import FakeClock

WAIT = 60.0  # real seconds: a bound for a broken test only
GOT: dict[str, list[int]] = {}
ERRORS: dict[str, list[Exception]] = {}
TOKENS: dict[str, list[SequenceToken]] = {}


class Reader(Grain):
    async def join(self, from_time: float | None = None,
                   token: SequenceToken | None = None) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        await stream.subscribe(StreamObserver(self._got, on_error=self._error), token,
                               from_time=from_time)

    async def rewind(self, from_time: float) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        (handle,) = await stream.get_subscriptions()
        await handle.resume(StreamObserver(self._got, on_error=self._error),
                            from_time=from_time)

    async def _got(self, item: int, token: Any) -> None:
        GOT.setdefault(str(self.key), []).append(item)
        TOKENS.setdefault(str(self.key), []).append(token)

    async def _error(self, exc: Exception) -> None:
        ERRORS.setdefault(str(self.key), []).append(exc)


def factory_for(kind: str, tmp_path: Path, redis_url: Callable[[], str]) -> QueueAdapterFactory:
    if kind == "sqlite":
        return SqliteAdapterFactory(str(tmp_path / "queues.db"))
    return RedisAdapterFactory(redis_url())


@pytest.fixture(params=["sqlite", "redis"])
def durable(request: pytest.FixtureRequest, tmp_path: Path) -> QueueAdapterFactory:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return RedisAdapterFactory(url)
    return SqliteAdapterFactory(str(tmp_path / "queues.db"))


async def advance_until(clock: FakeClock, done: Callable[[], bool], within: float) -> None:
    start = clock.monotonic()
    while not done():
        assert clock.monotonic() - start <= within, f"not done within {within:g} fake s"
        await clock.run_for(0.1)
        # the adapter's I/O (Redis, SQLite's thread) takes real time: a step of fake time
        # lets it land, so a loaded machine does not spend the fake budget before it does
        await asyncio.sleep(0.001)


async def test_a_replay_from_an_hour_back_hands_over_to_live_without_gap_or_duplicate(
    durable: QueueAdapterFactory,
) -> None:
    GOT.clear()
    ERRORS.clear()
    TOKENS.clear()
    clock = FakeClock()
    provider = PersistentStreamProvider(durable, StreamProviderOptions(
        total_queues=1, cache_size=16, pull_period=0.1, retention=5400.0))
    # the test jumps a minute of fake time at once: no call in flight may time out meanwhile
    silo = Silo(SiloOptions(gateway_port=None, collection_quantum=3600.0,
                            collection_age=86400.0, response_timeout=86400.0,
                            shutdown_timeout=5.0),
                grains=[Reader], stream_providers={"s": provider}, clock=clock)
    stream = provider.get_stream("ns", "k")
    written: list[float] = []
    async with asyncio.timeout(WAIT):
        await silo.start()
        try:
            live = silo.get_grain(Reader, "live")
            await live.join()
            for m in range(120):  # two fake hours, an event a minute, each acknowledged
                written.append(clock.time())
                await stream.on_next(m)
                await advance_until(clock, lambda m=m: len(GOT.get("live", ())) == m + 1, 5.0)
                clock.advance(59.0)
            assert GOT["live"] == list(range(120))

            # one hour back: far beyond the 16-event cache, served from the queue's storage
            from_time = clock.time() - 3600.0
            await silo.get_grain(Reader, "replay").join(from_time)
            for m in range(120, 130):  # live events while the replay runs
                written.append(clock.time())
                await stream.on_next(m)
                await clock.run_for(0.05)
            await advance_until(clock, lambda: len(GOT.get("replay", ())) >= 70
                                and len(GOT["live"]) == 130, 60.0)
            await clock.run_for(2.0)  # a duplicate would show up meanwhile

            expected = [m for m, at in enumerate(written) if at >= from_time]
            assert 59 <= expected[0] <= 61 and expected[-1] == 129  # an hour of them
            assert GOT["replay"] == expected  # no gap, no duplicate, in order
            assert GOT["live"] == list(range(130))
            assert not ERRORS

            # two hours back: the events of the first half hour were trimmed (acknowledged
            # more than 5400 s ago): refused, naming the oldest point available
            with pytest.raises(ReplayUnavailableError) as caught:
                await silo.get_grain(Reader, "too-far").join(written[0])
            error = caught.value
            assert "oldest point available is token" in str(error)
            assert isinstance(error.oldest_token, SequenceToken)
            first_kept = min(range(len(written)),
                             key=lambda m: abs(written[m] - error.oldest_time))
            assert 28 <= first_kept <= 32  # acknowledged 5400 s before the last trim
            assert "too-far" not in GOT

            # a token older than the cache: replayed from storage as well, exactly from it
            await silo.get_grain(Reader, "by-token").join(None, TOKENS["live"][100])
            await advance_until(clock, lambda: len(GOT.get("by-token", ())) >= 30, 60.0)
            # a token beyond retention: on_error names the oldest point, which it starts at
            await silo.get_grain(Reader, "old-token").join(None, TOKENS["live"][0])
            await advance_until(clock, lambda: len(GOT.get("old-token", ())) >= 130 - first_kept,
                                60.0)
            await clock.run_for(2.0)
            assert GOT["by-token"] == list(range(100, 130))
            assert "by-token" not in ERRORS
            assert GOT["old-token"] == list(range(first_kept, 130))
            (too_old,) = ERRORS["old-token"]
            assert isinstance(too_old, ReplayUnavailableError)
            assert too_old.oldest_token == TOKENS["live"][first_kept]
            # resume from a time rewinds an existing subscription the same way
            await silo.get_grain(Reader, "by-token").rewind(written[120])
            await advance_until(clock, lambda: len(GOT["by-token"]) >= 40, 60.0)
            await clock.run_for(2.0)
            assert GOT["by-token"] == [*range(100, 130), *range(120, 130)]
        finally:
            await silo.stop()


@contextlib.asynccontextmanager
async def _retaining(durable: QueueAdapterFactory, clock: FakeClock, seconds: float,
                     count: int) -> AsyncIterator[QueueAdapter]:
    """An open adapter of provider "s" on ``clock`` that keeps acknowledged events for
    ``seconds`` or the newest ``count``; closed afterwards."""
    adapter = durable.create_adapter("s")
    adapter.use_clock(clock)
    adapter.retain(seconds, count)
    await adapter.open()
    try:
        yield adapter
    finally:
        await adapter.close()


async def _fill(adapter: QueueAdapter, clock: FakeClock, queue: QueueId, stream: StreamId,
                n: int) -> list[Any]:
    receiver = adapter.create_receiver(queue)
    await receiver.initialize()
    for i in range(n):
        await adapter.enqueue(queue, stream, [i])
        clock.advance(10.0)
    batch = await receiver.get_messages(100)
    assert [c.events for c in batch] == [(i,) for i in range(n)]
    assert [c.enqueued_at for c in batch] == [batch[0].enqueued_at + 10.0 * i
                                              for i in range(n)]  # the injected clock's
    return [receiver, batch]


async def test_retention_trims_by_duration_after_acknowledgement(
    durable: QueueAdapterFactory,
) -> None:
    clock = FakeClock(start=1_000_000.0)
    queue, stream = QueueId("s", 0), StreamId("ns", "k")
    async with _retaining(durable, clock, 100.0, 0) as adapter:
        receiver, batch = await _fill(adapter, clock, queue, stream, 10)
        await receiver.messages_delivered(batch[:6])  # acknowledged at 1_000_100
        kept = await adapter.read_range(queue, SequenceToken(0), 100, stream)
        assert [c.events for c in kept] == [(i,) for i in range(10)]
        by_time = await adapter.read_range(queue, 1_000_030.0, 100, stream)
        assert [c.events for c in by_time] == [(i,) for i in range(3, 10)]
        clock.advance(99.0)
        await receiver.messages_delivered(batch[6:7])  # not yet 100 s: nothing trimmed
        assert len(await adapter.read_range(queue, SequenceToken(0), 100, stream)) == 10
        clock.advance(2.0)
        await receiver.messages_delivered(batch[7:8])  # the first six are 101 s old
        with pytest.raises(ReplayUnavailableError) as caught:
            await adapter.read_range(queue, SequenceToken(0), 100, stream)
        assert caught.value.oldest_token == batch[6].token
        assert caught.value.oldest_time == batch[6].enqueued_at
        with pytest.raises(ReplayUnavailableError):
            await adapter.read_range(queue, 1_000_050.0, 100, stream)
        rest = await adapter.read_range(queue, caught.value.oldest_token, 100, stream)
        assert [c.events for c in rest] == [(i,) for i in range(6, 10)]
        await receiver.shutdown()


async def test_a_replay_from_an_events_own_write_time_includes_it(
    durable: QueueAdapterFactory,
) -> None:
    """Write times are kept to the microsecond: a time that rounds down there (and is the
    event's own write time, as a caller took it from the same clock) still finds it."""
    clock = FakeClock(start=3_000_000.0000004)
    queue, stream = QueueId("s", 2), StreamId("ns", "k")
    async with _retaining(durable, clock, 3600.0, 0) as adapter:
        clock.advance(10.0)
        at = clock.time()
        receiver, batch = await _fill(adapter, clock, queue, stream, 3)
        await receiver.messages_delivered(batch)
        by_time = await adapter.read_range(queue, at, 100, stream)
        assert [c.events for c in by_time] == [(0,), (1,), (2,)]
        await receiver.shutdown()


async def test_retention_trims_by_count_and_without_retention_nothing_replays(
    durable: QueueAdapterFactory,
) -> None:
    clock = FakeClock(start=2_000_000.0)
    queue, stream = QueueId("s", 1), StreamId("ns", "k")
    async with _retaining(durable, clock, 0.0, 3) as adapter:
        receiver, batch = await _fill(adapter, clock, queue, stream, 8)
        await receiver.messages_delivered(batch[:6])  # the newest 3 acknowledged stay
        with pytest.raises(ReplayUnavailableError) as caught:
            await adapter.read_range(queue, batch[2].token, 100, stream)
        assert caught.value.oldest_token == batch[3].token
        again = await adapter.read_range(queue, batch[3].token, 100, stream)
        assert [c.events for c in again] == [(i,) for i in range(3, 8)]
        # read_from (what a spilled subscription reads) sees the retained ones too
        assert await receiver.read_from(batch[3].token, 100, stream) == again
        await receiver.shutdown()

    plain = durable.create_adapter("t")  # no retention: acknowledged means gone
    plain.use_clock(clock)
    await plain.open()
    try:
        queue = QueueId("t", 1)
        receiver, batch = await _fill(plain, clock, queue, stream, 4)
        await receiver.messages_delivered(batch[:2])
        with pytest.raises(ReplayUnavailableError) as caught:
            await plain.read_range(queue, batch[0].token, 100, stream)
        assert caught.value.oldest_token == batch[2].token
        assert len(await plain.read_range(queue, batch[2].token, 100, stream)) == 2
        await receiver.shutdown()
    finally:
        await plain.close()


async def test_the_memory_adapter_refuses_retention_and_replay() -> None:
    adapter = MemoryAdapterFactory().create_adapter("s")
    with pytest.raises(ConfigurationError, match="keeps nothing once acknowledged"):
        adapter.retain(60.0, 0)
    adapter.retain(0.0, 0)  # the default is accepted
    await adapter.open()
    try:
        with pytest.raises(ReplayUnavailableError, match="not durable"):
            await adapter.read_range(QueueId("s", 0), 0.0, 10)
    finally:
        await adapter.close()
    with pytest.raises(ConfigurationError, match="retention"):
        PersistentStreamProvider(MemoryAdapterFactory(), StreamProviderOptions(
            retention=60.0)).bind("s", None, clock=FakeClock(), diagnostics=None,  # type: ignore[arg-type]
                                  silo_name="x")
