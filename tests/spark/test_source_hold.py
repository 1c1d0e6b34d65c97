"""A Spark reader counts as a subscriber for retention: its hold (per reader, in the back end)
keeps what the silos acknowledge, trimming stops before it, it never moves back, and it
lapses ``seconds`` after it was last set. Also the durable adapters' other calls for outside
readers: the newest sequence of a queue and enqueues written at most once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orleanspy.errors import ConfigurationError, ReplayUnavailableError
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.adapters.base import QueueAdapter
from orleanspy.streams.adapters.redis import RedisAdapterFactory
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import FakeClock

Q = QueueId("s", 0)
SID = StreamId("numbers", 1)


@pytest.fixture(params=["sqlite", "redis"])
async def adapter(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[QueueAdapter]:
    if request.param == "redis":
        factory = RedisAdapterFactory(request.getfixturevalue("redis_url"))
    else:
        factory = SqliteAdapterFactory(str(tmp_path / "queues.db"))
    made = factory.create_adapter("s")
    made.use_clock(FakeClock())
    await made.open()
    try:
        yield made
    finally:
        await made.close()


def clock_of(adapter: QueueAdapter) -> FakeClock:
    clock = adapter._clock  # type: ignore[attr-defined]
    assert isinstance(clock, FakeClock)
    return clock


async def consume(adapter: QueueAdapter, numbers: range) -> list[int]:
    """Enqueue one container per number and acknowledge them all, as a silo's agent does;
    their sequences."""
    for n in numbers:
        await adapter.enqueue(Q, SID, [n])
    receiver = adapter.create_receiver(Q)
    await receiver.initialize()
    got = await receiver.get_messages(1000)
    await receiver.messages_delivered(got)
    await receiver.shutdown()
    return [c.token.sequence for c in got]


async def kept(adapter: QueueAdapter, start: int) -> list[int]:
    return [c.events[0] for c in await adapter.read_range(Q, SequenceToken(start), 1000)]


async def test_a_hold_keeps_acknowledged_events_without_a_retention(
    adapter: QueueAdapter,
) -> None:
    assert await adapter.newest_sequence(Q) == 0
    assert await adapter.hold("spark", {Q: 1}, 60.0) == {}
    seqs = await consume(adapter, range(10))
    assert await adapter.newest_sequence(Q) == seqs[-1]
    assert await kept(adapter, 1) == list(range(10))  # acknowledged, still there


async def test_without_a_hold_acknowledged_events_go(adapter: QueueAdapter) -> None:
    seqs = await consume(adapter, range(3))
    with pytest.raises(ReplayUnavailableError):
        await adapter.read_range(Q, SequenceToken(seqs[0]), 10)
    assert await adapter.newest_sequence(Q) == seqs[-1]  # the newest is known still


async def test_trimming_stops_at_the_hold_and_the_hold_never_moves_back(
    adapter: QueueAdapter,
) -> None:
    await adapter.hold("spark", {Q: 1}, 60.0)
    seqs = await consume(adapter, range(10))
    await adapter.hold("spark", {Q: seqs[5]}, 60.0)  # the reader committed 0..4
    await adapter.hold("spark", {Q: seqs[2]}, 60.0)  # an older hold does not move it back
    await consume(adapter, range(10, 12))  # an acknowledgement trims
    with pytest.raises(ReplayUnavailableError) as info:
        await adapter.read_range(Q, SequenceToken(seqs[4]), 10)
    assert info.value.oldest_token == SequenceToken(seqs[5])
    assert await kept(adapter, seqs[5]) == list(range(5, 12))


async def test_a_second_reader_holds_on_its_own(adapter: QueueAdapter) -> None:
    await adapter.hold("fast", {Q: 1}, 60.0)
    await adapter.hold("slow", {Q: 1}, 60.0)
    seqs = await consume(adapter, range(6))
    await adapter.hold("fast", {Q: seqs[-1] + 1}, 60.0)
    await consume(adapter, range(6, 7))
    assert await kept(adapter, 1) == list(range(7))  # "slow" still needs them all
    await adapter.release("slow", [Q])
    await consume(adapter, range(7, 8))
    assert await kept(adapter, seqs[-1] + 1) == [6, 7]
    with pytest.raises(ReplayUnavailableError):
        await adapter.read_range(Q, SequenceToken(seqs[0]), 10)


async def test_a_hold_lapses_after_its_seconds_and_says_so(adapter: QueueAdapter) -> None:
    clock = clock_of(adapter)
    await adapter.hold("spark", {Q: 1}, 30.0)
    seqs = await consume(adapter, range(3))
    clock.advance(31.0)  # the reader did not come back within its hold
    await consume(adapter, range(3, 4))
    with pytest.raises(ReplayUnavailableError):
        await adapter.read_range(Q, SequenceToken(seqs[0]), 10)
    lapsed = await adapter.hold("spark", {Q: seqs[0]}, 30.0)
    assert list(lapsed) == [Q]
    assert await adapter.hold("spark", {Q: seqs[0]}, 30.0) == {}  # renewed in time


async def test_enqueue_once_writes_a_marker_with_its_containers(adapter: QueueAdapter) -> None:
    other = QueueId("s", 1)
    batches = [(Q, SID, [1, 2]), (other, StreamId("numbers", 2), [3])]
    assert await adapter.enqueue_once("w:0:0", batches, 60.0) is True
    assert await adapter.enqueue_once("w:0:0", batches, 60.0) is False  # a retry: nothing
    assert await adapter.enqueue_once("w:0:1", [(Q, SID, [4])], 60.0) is True
    assert [c.events for c in await adapter.read_range(Q, SequenceToken(0), 10)] == [
        (1, 2), (4,)]
    assert [c.events for c in await adapter.read_range(other, SequenceToken(0), 10)] == [(3,)]
    with pytest.raises(ValueError, match="empty"):
        await adapter.enqueue_once("w:0:2", [(Q, SID, [])], 60.0)


async def test_the_memory_adapter_refuses_outside_readers_naming_the_fix() -> None:
    memory = MemoryAdapterFactory().create_adapter("s")
    await memory.open()
    try:
        with pytest.raises(ConfigurationError, match="durable adapter"):
            await memory.newest_sequence(Q)
        with pytest.raises(ConfigurationError, match="sqlite:PATH"):
            await memory.hold("spark", {Q: 1}, 60.0)
    finally:
        await memory.close()
