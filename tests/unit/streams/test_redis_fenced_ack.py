"""With its leases on the same Redis server, a Redis queue deletes acknowledged entries only
while the queue's lease names the acknowledging silo: a silo paused past its lease cannot
delete what the queue's next owner still has to deliver."""

from __future__ import annotations

import pytest

from orleanspy.errors import LeaseLostError
from orleanspy.streams.adapters import RedisAdapterFactory
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.redis_leases import LeaseFence, RedisQueueLeaseStore

QUEUE = QueueId("s", 0)
STREAM = StreamId("ns", "k")


async def test_an_acknowledgement_after_the_lease_moved_is_refused_and_deletes_nothing(
    redis_url: str,
) -> None:
    leases = RedisQueueLeaseStore(redis_url, "c")
    adapter = RedisAdapterFactory(redis_url).create_adapter("s")
    await adapter.open()
    try:
        assert adapter.fence_with(leases.fence("A@1"))
        assert await leases.acquire(str(QUEUE), "A@1", 30.0)
        receiver = adapter.create_receiver(QUEUE)
        await receiver.initialize()
        for n in range(3):
            await adapter.enqueue(QUEUE, STREAM, [n])
        first = await receiver.get_messages(10)
        await receiver.messages_delivered(first)  # A holds the lease: deleted
        assert await adapter.pending_count(QUEUE) == 0

        for n in range(3, 5):
            await adapter.enqueue(QUEUE, STREAM, [n])
        second = await receiver.get_messages(10)
        # A was paused: its lease was declared dead and B owns the queue now.
        assert await leases.acquire(str(QUEUE), "B@2", 30.0, dead=["A@1"])
        with pytest.raises(LeaseLostError, match="A@1"):
            await receiver.messages_delivered(second)
        assert await adapter.pending_count(QUEUE) == 2  # kept for B to deliver
        await receiver.shutdown()
    finally:
        await adapter.close()
        await leases.close()


async def test_a_fence_on_another_server_is_not_used(redis_url: str) -> None:
    adapter = RedisAdapterFactory(redis_url).create_adapter("s")

    assert not adapter.fence_with(LeaseFence("redis://10.9.9.9:6379/0", "k", "A@1"))
    assert not adapter.fence_with(None)
