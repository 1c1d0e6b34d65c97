"""The NATS JetStream queue adapter against the conformance suite, plus its own clauses:
fencing by claim, acknowledged-prefix purging, configuration."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import ServerError

from orleanspy.errors import ConfigurationError, LeaseLostError, StreamError
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.adapters.nats import NatsAdapterFactory, NatsQueueAdapter
from orleanspy.streams.adapters.nats_link import NatsLink, Pull
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing.stream_conformance import QueueAdapterConformance

WAIT = 10.0
Q0 = QueueId("p", 0)


class TestNatsAdapterConformance(QueueAdapterConformance):
    at_least_once = True
    durable = True

    @pytest.fixture(autouse=True)
    def _nats(self, nats_url: str) -> None:
        self.url = nats_url  # NATS reachable (else skipped, or failed under CI)

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return NatsAdapterFactory(self.url)


async def _open(url: str, name: str = "p") -> NatsQueueAdapter:
    adapter = NatsAdapterFactory(url).create_adapter(name)
    await adapter.open()
    return adapter


async def test_nats_stale_receiver_cannot_acknowledge_after_the_queue_is_claimed(
    nats_url: str,
) -> None:
    adapter = await _open(nats_url)
    try:
        for n in range(4):
            await adapter.enqueue(Q0, StreamId("s", 1), [n])
        stale = adapter.create_receiver(Q0)
        await stale.initialize()
        read = await stale.get_messages(10)
        await stale.messages_delivered(read[:1])

        owner = adapter.create_receiver(Q0)  # the queue moved: its next owner claims it
        await owner.initialize()
        assert owner.epoch == stale.epoch + 1
        with pytest.raises(LeaseLostError):
            await stale.messages_delivered(read[1:])

        again = await owner.get_messages(10)
        assert [c.events[0] for c in again] == [1, 2, 3]
        assert [c.token for c in again] == [c.token for c in read[1:]]
        await owner.messages_delivered(again)
        assert await adapter.pending_count(Q0) == 0
        await owner.shutdown()
        await stale.shutdown()
    finally:
        await adapter.close()


async def test_nats_acknowledged_prefix_is_purged_from_the_stream(nats_url: str) -> None:
    adapter = await _open(nats_url)
    try:
        stream = StreamId("s", 1)
        await asyncio.gather(*(adapter.enqueue(Q0, stream, [n]) for n in range(600)))
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        batch = []
        async with asyncio.timeout(WAIT):
            while chunk := await receiver.get_messages(100):
                batch.extend(chunk)
        await receiver.messages_delivered(batch[:300])
        await receiver.messages_delivered(batch[301:])

        info = await adapter.link.js.stream_info(adapter.stream_name)
        assert info.state.messages <= 300  # the prefix up to the first kept one is gone
        assert await adapter.pending_count(Q0) == 1
        assert await receiver.read_from(SequenceToken(0), 10) == [batch[300]]
        await receiver.shutdown()
    finally:
        await adapter.close()


async def test_nats_enqueue_waits_for_the_server_and_coalesces_single_events(
    nats_url: str,
) -> None:
    adapter = await _open(nats_url)
    try:
        stream = StreamId("s", 1)
        send = adapter.sender(Q0, stream)
        await asyncio.gather(*(send([n]) for n in range(100)))
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        batch = await receiver.get_messages(1000)
        await receiver.shutdown()
    finally:
        await adapter.close()
    assert [e for c in batch for e in c.events] == list(range(100))
    assert len(batch) <= 2  # one round, or the first event and the rest


@pytest.mark.parametrize("url", ["redis://x", "nats://h:4222?prefix=a.b", "nats://h?prefix="])
def test_nats_factory_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigurationError):
        NatsAdapterFactory(url)


async def test_nats_receiver_replaces_a_lost_consumer_and_skips_nothing(nats_url: str) -> None:
    adapter = await _open(nats_url)
    try:
        stream = StreamId("s", 1)
        for n in range(6):
            await adapter.enqueue(Q0, stream, [n])
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        first = await receiver.get_messages(2)
        # the server forgets the receiver's consumer (as a restarted server does)
        for name in await adapter.link.js.consumers_info(adapter.stream_name):
            await adapter.link.js.delete_consumer(adapter.stream_name, name.name)
        with pytest.raises(Exception):  # noqa: B017 - whatever the server answers
            await receiver.get_messages(2)
        rest = await receiver.get_messages(10)
        await receiver.shutdown()
    finally:
        await adapter.close()
    assert [c.events[0] for c in first + rest] == list(range(6))


async def test_nats_pull_fails_rather_than_skip_a_message_lost_in_transit(
    nats_url: str,
) -> None:
    adapter = await _open(nats_url)
    try:
        for n in range(3):
            await adapter.enqueue(Q0, StreamId("s", 1), [n])
        pull = Pull(adapter.link, adapter.stream_name, adapter.subject(Q0))
        original = pull._on_msg
        seen: list[int] = []

        async def drop_second(msg: Any) -> None:
            seen.append(1)
            if len(seen) != 2:  # the second message never arrives
                await original(msg)

        pull._on_msg = drop_second  # type: ignore[method-assign]
        await pull.open(1)
        with pytest.raises(StreamError, match="consumer sequence 3 after 1"):
            await pull.fetch(3)
        await pull.close()
    finally:
        await adapter.close()


async def test_nats_token_at_a_time_is_the_first_container_written_since(nats_url: str) -> None:
    adapter = await _open(nats_url)
    try:
        for n in range(3):
            await adapter.enqueue(Q0, StreamId("s", 1), [n])
        receiver = adapter.create_receiver(Q0)
        await receiver.initialize()
        first, second, third = await receiver.get_messages(10)
        await receiver.shutdown()

        assert await adapter.token_at(Q0, 0.0) == first.token
        assert await adapter.token_at(Q0, second.enqueued_at - 1e-6) == second.token
        assert await adapter.token_at(Q0, third.enqueued_at + 1.0) is None
        assert await adapter.token_at(QueueId("p", 1), 0.0) is None
    finally:
        await adapter.close()


async def test_nats_open_tries_a_failed_create_again_and_a_failed_open_holds_no_connection(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 500 from the server while the stream or bucket is created (its store folder raced
    with the deletion of the account's last stream) is tried again; when every attempt fails,
    open() raises it and leaves no connection behind (a leak fails this test), and a later
    open() starts afresh."""
    real = NatsLink._ensure_stream_and_bucket
    failures = [2]

    async def flaky(self: NatsLink, *args: str) -> Any:
        if failures[0] > 0:
            failures[0] -= 1
            raise ServerError(code=500, err_code=10049,
                              description="error creating store for stream")
        return await real(self, *args)

    monkeypatch.setattr(NatsLink, "_ensure_stream_and_bucket", flaky)
    adapter = await _open(nats_url)
    try:
        await adapter.enqueue(Q0, StreamId("s", 1), [1])
        assert failures == [0]
    finally:
        await adapter.close()

    failures[0] = 3
    adapter = NatsAdapterFactory(nats_url).create_adapter("p")
    with pytest.raises(ServerError):
        await adapter.open()
    assert failures == [0] and adapter.link.nc is not None and adapter.link.nc.is_closed
    await adapter.open()  # the server is fine again
    try:
        await adapter.enqueue(Q0, StreamId("s", 1), [2])
    finally:
        await adapter.close()
