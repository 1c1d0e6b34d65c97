"""The adapter suite's receiver clauses: ``get_messages`` returns each container once, in
order, with increasing tokens, and ``messages_delivered`` acknowledges them for good.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from orleanspy.streams.adapters.base import BatchContainer, QueueAdapter
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing.stream_conformance.kit import WAIT, QueueAdapterKit, assert_token_order

__all__ = ["ReadClauses"]


class ReadClauses(QueueAdapterKit):
    """The receiver side: reading and acknowledging."""

    # -- get_messages --------------------------------------------------------------------
    async def test_get_messages_on_empty_queue_returns_empty_list(
        self, adapter: QueueAdapter
    ) -> None:
        async with self.receiver(adapter) as receiver:
            assert await receiver.get_messages(10) == []

    async def test_get_messages_returns_one_container_per_enqueue(
        self, adapter: QueueAdapter
    ) -> None:
        stream = StreamId("orders", "o-1")
        await adapter.enqueue(self.queue(), stream, ["a", "b", "c"])

        async with self.receiver(adapter) as receiver:
            (container,) = await receiver.get_messages(10)

        assert container.stream_id == stream
        assert container.events == ("a", "b", "c")
        assert type(container.events) is tuple
        assert container.token.index == 0
        assert container.size > 0
        assert container.items() == [
            ("a", container.token.for_event(0)),
            ("b", container.token.for_event(1)),
            ("c", container.token.for_event(2)),
        ]

    async def test_containers_carry_their_write_time(self, adapter: QueueAdapter) -> None:
        if not self.records_write_time:
            pytest.skip("the adapter does not record write times")
        stream = StreamId("orders", "o-2")
        before = time.time()
        await adapter.enqueue(self.queue(), stream, ["a"])
        after = time.time()
        async with self.receiver(adapter) as receiver:
            (container,) = await receiver.get_messages(10)
            (again,) = await receiver.read_from(container.token, 10) if adapter.is_rewindable \
                else (container,)
        # The server's clock (SQLite, Redis) may differ from ours by a little.
        assert before - 1.0 <= container.enqueued_at <= after + 1.0
        assert again.enqueued_at == container.enqueued_at

    async def test_get_messages_returns_enqueue_order_with_increasing_tokens(
        self, adapter: QueueAdapter
    ) -> None:
        stream = StreamId("s", 1)
        await self.enqueue_numbered(adapter, stream, 25)

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver, max_count=7)

        assert [c.events for c in batch] == [(n,) for n in range(25)]
        assert_token_order(batch)

    @pytest.mark.parametrize("max_count", [1, 3, 10])
    async def test_get_messages_respects_max_count(
        self, adapter: QueueAdapter, max_count: int
    ) -> None:
        await self.enqueue_numbered(adapter, StreamId("s", 1), 10)

        async with self.receiver(adapter) as receiver:
            first = await receiver.get_messages(max_count)
            rest = await self.read_all(receiver, max_count)

        assert len(first) == max_count
        assert [c.events[0] for c in first + rest] == list(range(10))

    async def test_get_messages_zero_max_count_returns_empty_list_and_keeps_containers(
        self, adapter: QueueAdapter
    ) -> None:
        await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])

        async with self.receiver(adapter) as receiver:
            assert await receiver.get_messages(0) == []
            assert [c.events for c in await receiver.get_messages(10)] == [("a",)]

    async def test_get_messages_negative_max_count_raises_value_error(
        self, adapter: QueueAdapter
    ) -> None:
        async with self.receiver(adapter) as receiver:
            with pytest.raises(ValueError):
                await receiver.get_messages(-1)

    async def test_get_messages_never_returns_a_container_twice(
        self, adapter: QueueAdapter
    ) -> None:
        stream = StreamId("s", 1)
        await self.enqueue_numbered(adapter, stream, 5)

        async with self.receiver(adapter) as receiver:
            first = await self.read_all(receiver, max_count=2)
            assert await receiver.get_messages(10) == []
            await adapter.enqueue(self.queue(), stream, ["late"])
            second = await self.read_all(receiver)

        assert [c.events[0] for c in first] == [0, 1, 2, 3, 4]
        assert [c.events for c in second] == [("late",)]
        assert_token_order(first + second)

    async def test_get_messages_tokens_keep_increasing_after_acknowledged_reads(
        self, adapter: QueueAdapter
    ) -> None:
        stream = StreamId("s", 1)
        async with self.receiver(adapter) as receiver:
            seen: list[BatchContainer] = []
            for round_ in range(3):
                await self.enqueue_numbered(adapter, stream, 2)
                batch = await self.read_all(receiver)
                await receiver.messages_delivered(batch)
                assert len(batch) == 2, round_
                seen.extend(batch)

        assert_token_order(seen)

    async def test_get_messages_several_streams_in_a_queue_keep_per_stream_order(
        self, adapter: QueueAdapter
    ) -> None:
        streams = [StreamId("a", 1), StreamId("a", "1"), StreamId("b", 1)]
        for n in range(12):
            await adapter.enqueue(self.queue(), streams[n % 3], [n])

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver, max_count=5)

        for i, stream in enumerate(streams):
            assert [c.events[0] for c in batch if c.stream_id == stream] == list(range(i, 12, 3))

    async def test_get_messages_queues_are_isolated(self, adapter: QueueAdapter) -> None:
        stream = StreamId("s", 1)
        for index in range(3):
            await adapter.enqueue(self.queue(index), stream, [f"q{index}"])
        await adapter.enqueue(QueueId(self.provider_name + "-other", 0), stream, ["other"])

        for index in range(3):
            async with self.receiver(adapter, self.queue(index)) as receiver:
                batch = await self.read_all(receiver)
            assert [c.events for c in batch] == [(f"q{index}",)]
        async with self.receiver(adapter, self.queue(3)) as receiver:
            assert await receiver.get_messages(10) == []

    async def test_get_messages_while_producers_enqueue_loses_nothing(
        self, adapter: QueueAdapter
    ) -> None:
        streams = [StreamId("live", i) for i in range(5)]
        seen: list[BatchContainer] = []
        async with self.receiver(adapter) as receiver, asyncio.timeout(WAIT):
            async with asyncio.TaskGroup() as tg:
                for stream in streams:
                    tg.create_task(self.enqueue_numbered(adapter, stream, 30))
                while len(seen) < 150:
                    batch = await receiver.get_messages(16)
                    await receiver.messages_delivered(batch)
                    seen.extend(batch)
                    await asyncio.sleep(0)  # let producers run; no timing involved
            assert await receiver.get_messages(10) == []

        assert_token_order(seen)
        for stream in streams:
            assert [c.events[0] for c in seen if c.stream_id == stream] == list(range(30))

    # -- messages_delivered --------------------------------------------------------------
    async def test_messages_delivered_containers_never_come_back(
        self, adapter: QueueAdapter
    ) -> None:
        await self.enqueue_numbered(adapter, StreamId("s", 1), 6)
        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            await receiver.messages_delivered(batch)
            assert await receiver.get_messages(10) == []

        async with self.receiver(adapter) as receiver:
            assert await receiver.get_messages(10) == []

    async def test_messages_delivered_twice_or_empty_is_harmless(
        self, adapter: QueueAdapter
    ) -> None:
        await self.enqueue_numbered(adapter, StreamId("s", 1), 3)
        async with self.receiver(adapter) as receiver:
            first = await receiver.get_messages(1)
            await receiver.messages_delivered(first)
            await receiver.messages_delivered(first)
            await receiver.messages_delivered([])

            rest = await self.read_all(receiver)

        assert [c.events[0] for c in rest] == [1, 2]

    async def test_messages_delivered_placeholders_without_events_acknowledge_the_originals(
        self, adapter: QueueAdapter
    ) -> None:
        stream = StreamId("s", 1)
        for n in range(5):
            await adapter.enqueue(self.queue(), stream, [n, f"event {n}"])
        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            placeholders = [BatchContainer(c.stream_id, c.token, (), 0) for c in batch[:3]]
            await receiver.messages_delivered([placeholders[1], placeholders[0]])
            await receiver.messages_delivered(placeholders[2:])
            assert await receiver.get_messages(10) == []
            if adapter.is_rewindable:
                assert await self.rewind_all(receiver, SequenceToken(0)) == batch[3:]

        if self.at_least_once or self.durable:
            async with self.receiver(adapter) as receiver:
                assert await self.read_all(receiver) == batch[3:]
