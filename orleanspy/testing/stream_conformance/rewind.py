"""The adapter suite's rewind clauses: ``read_from`` on rewindable adapters (kept containers
from a token, per stream, paged, beside ``get_messages``), ``NotImplementedError`` elsewhere.
"""

from __future__ import annotations

import asyncio

import pytest

from orleanspy.streams.adapters.base import BatchContainer, QueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing.stream_conformance.events import SAMPLE_UUID, SampleEvent
from orleanspy.testing.stream_conformance.kit import WAIT, QueueAdapterKit, assert_token_order

__all__ = ["RewindClauses"]


class RewindClauses(QueueAdapterKit):
    """Rewinding: read_from."""

    # -- read_from (rewindable adapters) -------------------------------------------------
    async def test_read_from_is_implemented_exactly_when_rewindable(
        self, adapter: QueueAdapter
    ) -> None:
        await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])
        async with self.receiver(adapter) as receiver:
            if adapter.is_rewindable:
                (container,) = await receiver.read_from(SequenceToken(0), 10)
                assert container.events == ("a",)
            else:
                with pytest.raises(NotImplementedError):
                    await receiver.read_from(SequenceToken(0), 10)

    async def test_read_from_returns_kept_containers_in_token_order(
        self, adapter: QueueAdapter
    ) -> None:
        self.require_rewindable(adapter)
        streams = [StreamId("a", 1), StreamId("a", "1"), StreamId("b", 1)]
        for n in range(10):
            await adapter.enqueue(self.queue(), streams[n % 3], [n, SampleEvent(str(n))])
        await adapter.enqueue(self.queue(1), streams[0], ["other queue"])

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            again = await receiver.read_from(SequenceToken(0), 100)

        assert again == batch
        assert [c.events for c in again] == [(n, SampleEvent(str(n))) for n in range(10)]
        assert_token_order(again)

    async def test_read_from_token_is_inclusive(self, adapter: QueueAdapter) -> None:
        self.require_rewindable(adapter)
        stream = StreamId("s", 1)
        for n in range(6):
            await adapter.enqueue(self.queue(), stream, [n, n + 100])

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            for k in range(6):
                assert await receiver.read_from(batch[k].token, 100) == batch[k:], k
            # an event token: from the container holding that event
            assert await receiver.read_from(batch[2].token.for_event(1), 100) == batch[2:]
            after_last = SequenceToken(batch[-1].token.sequence + 1)
            assert await receiver.read_from(after_last, 100) == []

    async def test_read_from_includes_containers_not_read_yet(self, adapter: QueueAdapter) -> None:
        self.require_rewindable(adapter)
        await self.enqueue_numbered(adapter, StreamId("s", 1), 4)

        async with self.receiver(adapter) as receiver:
            early = await receiver.read_from(SequenceToken(0), 100)
            batch = await self.read_all(receiver)

        assert early == batch
        assert [c.events[0] for c in batch] == [0, 1, 2, 3]

    async def test_read_from_filters_by_stream(self, adapter: QueueAdapter) -> None:
        self.require_rewindable(adapter)
        streams = [
            StreamId("a", 1), StreamId("a", "1"), StreamId("b", 1), StreamId("a", SAMPLE_UUID),
        ]
        for n in range(16):
            await adapter.enqueue(self.queue(), streams[n % 4], [n])

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            first = batch[0].token
            for stream in streams:
                mine = [c for c in batch if c.stream_id == stream]
                assert await receiver.read_from(first, 100, stream) == mine
                assert await receiver.read_from(batch[7].token, 100, stream) == [
                    c for c in batch[7:] if c.stream_id == stream
                ]
                assert await self.rewind_all(receiver, first, stream, max_count=1) == mine
            assert await receiver.read_from(first, 100, StreamId("a", 2)) == []
            assert await receiver.read_from(first, 100, StreamId("c", 1)) == []

    async def test_read_from_respects_max_count(self, adapter: QueueAdapter) -> None:
        self.require_rewindable(adapter)
        streams = [StreamId("s", 1), StreamId("s", 2)]
        for n in range(10):
            await adapter.enqueue(self.queue(), streams[n % 2], [n])

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            first = batch[0].token
            assert await receiver.read_from(first, 3) == batch[:3]
            assert await receiver.read_from(batch[4].token, 1) == batch[4:5]
            assert await receiver.read_from(first, 2, streams[1]) == [batch[1], batch[3]]
            assert await receiver.read_from(first, 0) == []
            with pytest.raises(ValueError):
                await receiver.read_from(first, -1)
            assert await self.rewind_all(receiver, first, max_count=3) == batch

    async def test_read_from_does_not_move_the_read_position(self, adapter: QueueAdapter) -> None:
        self.require_rewindable(adapter)
        stream = StreamId("s", 1)
        await self.enqueue_numbered(adapter, stream, 6)

        async with self.receiver(adapter) as receiver:
            first = await receiver.get_messages(2)
            everything = await receiver.read_from(SequenceToken(0), 100)
            assert await receiver.read_from(first[1].token, 1) == [first[1]]
            rest = await self.read_all(receiver, max_count=3)
            assert await receiver.read_from(SequenceToken(0), 100) == everything
            assert await receiver.get_messages(10) == []
            await adapter.enqueue(self.queue(), stream, ["late"])
            assert [c.events for c in await receiver.get_messages(10)] == [("late",)]

        assert first + rest == everything
        assert [c.events[0] for c in everything] == [0, 1, 2, 3, 4, 5]

    async def test_read_from_skips_acknowledged_containers(self, adapter: QueueAdapter) -> None:
        self.require_rewindable(adapter)
        streams = [StreamId("s", 1), StreamId("s", 2)]
        for n in range(8):
            await adapter.enqueue(self.queue(), streams[n % 2], [n])

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            await receiver.messages_delivered([batch[5], *batch[:3]])
            kept = batch[3:5] + batch[6:]
            assert await receiver.read_from(SequenceToken(0), 100) == kept
            assert await receiver.read_from(batch[1].token, 100, streams[1]) == [
                batch[3],
                batch[7],
            ]
            assert await receiver.read_from(batch[5].token, 1) == [batch[6]]
            await receiver.messages_delivered(batch)
            assert await receiver.read_from(SequenceToken(0), 100) == []

    async def test_read_from_runs_alongside_get_messages(self, adapter: QueueAdapter) -> None:
        self.require_rewindable(adapter)
        streams = [StreamId("s", 1), StreamId("s", 2)]
        for n in range(20):
            await adapter.enqueue(self.queue(), streams[n % 2], [n])

        async with self.receiver(adapter) as receiver, asyncio.timeout(WAIT):
            # Tasks start in creation order: the read is under way when the rewinds begin.
            read = asyncio.create_task(receiver.get_messages(5))
            rewinds = [
                asyncio.create_task(receiver.read_from(SequenceToken(0), 100)),
                asyncio.create_task(receiver.read_from(SequenceToken(0), 100, streams[1])),
            ]
            first, everything, odd = await asyncio.gather(read, *rewinds)
            rest = await self.read_all(receiver, max_count=4)

        assert first + rest == everything
        assert [c.events[0] for c in everything] == list(range(20))
        assert [c.events[0] for c in odd] == list(range(1, 20, 2))

    async def test_read_from_while_producers_enqueue_sees_a_growing_prefix(
        self, adapter: QueueAdapter
    ) -> None:
        self.require_rewindable(adapter)
        streams = [StreamId("live", i) for i in range(4)]
        seen: list[BatchContainer] = []
        async with (
            self.receiver(adapter) as receiver,
            asyncio.timeout(WAIT),
            asyncio.TaskGroup() as tg,
        ):
            for stream in streams:
                tg.create_task(self.enqueue_numbered(adapter, stream, 25))
            while len(seen) < 100:
                batch = await receiver.get_messages(7)
                seen.extend(batch)
                again = await receiver.read_from(SequenceToken(0), 1000)
                assert again[: len(seen)] == seen
                assert_token_order(again)
                await asyncio.sleep(0)  # let producers run; no timing involved

        for stream in streams:
            assert [c.events[0] for c in seen if c.stream_id == stream] == list(range(25))

    async def test_read_from_before_initialize_or_after_shutdown_raises_runtime_error(
        self, adapter: QueueAdapter
    ) -> None:
        self.require_rewindable(adapter)
        receiver = adapter.create_receiver(self.queue())
        with pytest.raises(RuntimeError):
            await receiver.read_from(SequenceToken(0), 10)
        await receiver.initialize()
        await receiver.shutdown()
        with pytest.raises(RuntimeError):
            await receiver.read_from(SequenceToken(0), 10)
