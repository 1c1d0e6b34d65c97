"""The adapter suite's reliability clauses: unacknowledged containers return to the next
receiver (at-least-once adapters) and survive a reopen (durable adapters).
"""

from __future__ import annotations

from pathlib import Path

from orleanspy.streams.adapters.base import QueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing.stream_conformance.events import SampleEvent
from orleanspy.testing.stream_conformance.kit import QueueAdapterKit, assert_token_order

__all__ = ["ReliabilityClauses"]


class ReliabilityClauses(QueueAdapterKit):
    """What an adapter keeps of unacknowledged containers."""

    # -- at-least-once (adapters that keep unacknowledged containers) -------------------
    async def test_at_least_once_unacknowledged_containers_return_to_next_receiver(
        self, adapter: QueueAdapter
    ) -> None:
        self.require_at_least_once()
        await self.enqueue_numbered(adapter, StreamId("s", 1), 6)
        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            await receiver.messages_delivered(batch[:2])

        async with self.receiver(adapter) as receiver:
            again = await self.read_all(receiver, max_count=3)

        assert again == batch[2:]

    async def test_at_least_once_next_receiver_gets_read_and_unread_containers_in_order(
        self, adapter: QueueAdapter
    ) -> None:
        self.require_at_least_once()
        streams = [StreamId("s", 1), StreamId("t", "x")]
        for n in range(8):
            await adapter.enqueue(self.queue(), streams[n % 2], [n])
        async with self.receiver(adapter) as receiver:
            read = await receiver.get_messages(5)
            await receiver.messages_delivered([read[3], read[0]])  # out of order
            await adapter.enqueue(self.queue(), streams[0], ["late"])

        async with self.receiver(adapter) as receiver:
            again = await self.read_all(receiver, max_count=2)
            await receiver.messages_delivered(again[:2])

        assert [c.events[0] for c in again] == [1, 2, 4, 5, 6, 7, "late"]
        assert again[:3] == [read[1], read[2], read[4]]
        assert_token_order(again)
        async with self.receiver(adapter) as receiver:
            assert await self.read_all(receiver) == again[2:]

    async def test_at_least_once_rewind_on_next_receiver_sees_unacknowledged(
        self, adapter: QueueAdapter
    ) -> None:
        self.require_at_least_once()
        self.require_rewindable(adapter)
        await self.enqueue_numbered(adapter, StreamId("s", 1), 5)
        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)
            await receiver.messages_delivered(batch[:2])

        async with self.receiver(adapter) as receiver:
            assert await receiver.read_from(SequenceToken(0), 100) == batch[2:]
            assert await self.read_all(receiver) == batch[2:]

    # -- durability (durable adapters only) ----------------------------------------------

    async def test_durable_unacknowledged_containers_survive_reopen(
        self, adapter: QueueAdapter, tmp_path: Path
    ) -> None:
        self.require_durable()
        streams = [StreamId("s", 1), StreamId("t", "x")]
        for n in range(8):
            await adapter.enqueue(self.queue(n % 2), streams[n % 2], [n, SampleEvent(str(n))])
        async with self.receiver(adapter, self.queue(0)) as receiver:
            kept = await self.read_all(receiver)
            await receiver.messages_delivered(kept[:1])
        await adapter.close()

        reopened = (await self.make_factory(tmp_path)).create_adapter(self.provider_name)
        await reopened.open()
        try:
            async with self.receiver(reopened, self.queue(0)) as receiver:
                queue0 = await self.read_all(receiver)
            async with self.receiver(reopened, self.queue(1)) as receiver:
                queue1 = await self.read_all(receiver)
        finally:
            await reopened.close()

        assert queue0 == kept[1:]
        assert [c.events for c in queue1] == [(n, SampleEvent(str(n))) for n in (1, 3, 5, 7)]
        assert all(c.stream_id == streams[1] for c in queue1)

    async def test_durable_tokens_keep_increasing_after_reopen(
        self, adapter: QueueAdapter, tmp_path: Path
    ) -> None:
        self.require_durable()
        await self.enqueue_numbered(adapter, StreamId("s", 1), 3)
        async with self.receiver(adapter) as receiver:
            before = await self.read_all(receiver)
            await receiver.messages_delivered(before)
        await adapter.close()

        reopened = (await self.make_factory(tmp_path)).create_adapter(self.provider_name)
        await reopened.open()
        try:
            await self.enqueue_numbered(reopened, StreamId("s", 1), 3)
            async with self.receiver(reopened) as receiver:
                after = await self.read_all(receiver)
        finally:
            await reopened.close()

        assert [c.events[0] for c in after] == [0, 1, 2]
        assert min(c.token for c in after) > max(c.token for c in before)
