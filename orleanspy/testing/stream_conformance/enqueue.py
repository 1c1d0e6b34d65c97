"""The adapter suite's producer clauses: ``enqueue`` validates, copies, and lands each batch
exactly once in per-stream order, also under concurrent producers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy.errors import SerializationError
from orleanspy.streams.adapters.base import QueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.testing.stream_conformance.kit import QueueAdapterKit, assert_token_order

__all__ = ["EnqueueClauses"]


class EnqueueClauses(QueueAdapterKit):
    """The producer side: enqueue."""

    # -- enqueue -------------------------------------------------------------------------
    async def test_enqueue_unserialisable_event_raises_and_enqueues_nothing(
        self, adapter: QueueAdapter
    ) -> None:
        with pytest.raises(SerializationError):
            await adapter.enqueue(self.queue(), StreamId("s", 1), ["fine", object()])

        async with self.receiver(adapter) as receiver:
            assert await receiver.get_messages(10) == []

    async def test_enqueue_empty_batch_raises_value_error(self, adapter: QueueAdapter) -> None:
        with pytest.raises(ValueError):
            await adapter.enqueue(self.queue(), StreamId("s", 1), [])

    async def test_enqueue_copies_events(self, adapter: QueueAdapter) -> None:
        event: dict[str, Any] = {"items": [1, 2]}
        await adapter.enqueue(self.queue(), StreamId("s", 1), [event])
        event["items"].append(3)

        async with self.receiver(adapter) as receiver:
            (container,) = await receiver.get_messages(10)

        assert container.events == ({"items": [1, 2]},)

    async def test_enqueue_concurrent_calls_all_land_exactly_once(
        self, adapter: QueueAdapter
    ) -> None:
        streams = [StreamId("s", i) for i in range(4)]
        await asyncio.gather(
            *(adapter.enqueue(self.queue(), streams[n % 4], [n]) for n in range(200))
        )

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver, max_count=64)

        assert sorted(c.events[0] for c in batch) == list(range(200))
        assert all(c.stream_id == streams[c.events[0] % 4] for c in batch)
        assert_token_order(batch)

    async def test_enqueue_concurrent_producers_keep_per_stream_order(
        self, adapter: QueueAdapter
    ) -> None:
        streams = [StreamId("producer", f"p{i}") for i in range(10)]
        async with asyncio.TaskGroup() as tg:
            for stream in streams:
                tg.create_task(self.enqueue_numbered(adapter, stream, 20))

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver, max_count=37)

        assert_token_order(batch)
        for stream in streams:
            assert [c.events[0] for c in batch if c.stream_id == stream] == list(range(20))
        assert len(batch) == 200
