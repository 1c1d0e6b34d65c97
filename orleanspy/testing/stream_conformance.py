"""Conformance suite for queue adapters: every clause of ``orleanspy.streams.adapters.base``.

Subclass ``QueueAdapterConformance`` in a test module and implement ``make_factory``; pytest
then checks the adapter contract (the producer side (1)->(2) and the receiver side (2)->(3) of
the stream data path)::

    from orleanspy.testing.stream_conformance import QueueAdapterConformance

    class TestMyAdapter(QueueAdapterConformance):
        at_least_once = True  # unacknowledged containers return to the next receiver
        durable = True  # ... also after the adapter is reopened on the same storage

        async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
            return MyAdapterFactory(str(tmp_path / "queues.db"))

``make_factory`` may be called more than once with the same ``tmp_path``: the durable clauses
reopen the adapter on the same storage. The rewind clauses (``read_from``) run for adapters
whose ``is_rewindable`` is True; for the others the suite checks that ``read_from`` raises
``NotImplementedError``. The suite needs pytest and pytest-asyncio.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import datetime as dt
import enum
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from orleanspy.errors import SerializationError
from orleanspy.streams.adapters.base import (
    BatchContainer,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
)
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["QueueAdapterConformance", "SampleEvent", "SampleKind", "event_shape"]

# Upper bound for anything the suite awaits: a hang fails fast.
_WAIT = 10.0


class SampleKind(enum.Enum):
    """An enum that events of the suite carry (importable, so the Codec can rebuild it)."""

    CREATED = "created"
    DELETED = "deleted"


@dataclass(frozen=True)
class SampleEvent:
    """A dataclass event of the suite (importable, so the Codec can rebuild it)."""

    name: str
    values: tuple[int, ...] = ()
    kind: SampleKind = SampleKind.CREATED
    ref: uuid.UUID | None = None


_UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")

ROUND_TRIP_EVENTS: tuple[Any, ...] = (
    None,
    True,
    0,
    -(2**63),
    2**64 - 1,
    1.25,
    "",
    "text ✓",
    b"\x00\xff" * 3,
    [1, [2, "3"]],
    (1, (2, "3"), ()),
    {"a": [1, 2], "b": {"c": None}, 1: "int key"},
    _UUID,
    SampleKind.DELETED,
    SampleEvent("nested", (1, 2), SampleKind.DELETED, _UUID),
    [SampleEvent("in a list"), {"t": (SampleEvent("in a tuple"),)}],
    dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=dt.UTC),
    frozenset({1, 2}),
)


def event_shape(value: Any) -> Any:
    """A value together with the type of each of its parts, for exact round-trip checks."""
    if isinstance(value, (list, tuple)):
        return (type(value), tuple(event_shape(v) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((event_shape(k), event_shape(v)) for k, v in value.items()))
    return (type(value), value)


def _assert_token_order(batch: Sequence[BatchContainer]) -> None:
    tokens = [c.token for c in batch]
    assert all(a < b for a, b in itertools.pairwise(tokens)), tokens
    assert all(t.index == 0 for t in tokens), tokens


class QueueAdapterConformance(abc.ABC):
    """Every clause of the queue adapter contract. Subclass and implement ``make_factory``.

    Set ``at_least_once = True`` for adapters that keep unacknowledged containers for the
    next receiver of the queue (in this process), and ``durable = True`` for adapters that
    keep them across a reopen of the adapter (a restart of the process); ``durable`` implies
    ``at_least_once``. The clauses of a property the adapter lacks are skipped.
    """

    pytestmark = pytest.mark.asyncio

    provider_name = "conformance"
    at_least_once = False
    durable = False
    #: The adapter stamps each container with its write time (``enqueued_at``); set False
    #: for one that cannot (its containers carry 0.0, and no latency is measured from them).
    records_write_time = True

    @abc.abstractmethod
    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        """Return a factory (``tmp_path`` is a fresh directory for files, the same per test)."""

    @pytest_asyncio.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[QueueAdapter]:
        adapter = (await self.make_factory(tmp_path)).create_adapter(self.provider_name)
        await adapter.open()
        try:
            yield adapter
        finally:
            await adapter.close()

    # -- helpers -------------------------------------------------------------------------
    def queue(self, index: int = 0) -> QueueId:
        return QueueId(self.provider_name, index)

    @contextlib.asynccontextmanager
    async def receiver(
        self, adapter: QueueAdapter, queue: QueueId | None = None
    ) -> AsyncIterator[QueueAdapterReceiver]:
        receiver = adapter.create_receiver(queue or self.queue())
        await receiver.initialize()
        try:
            yield receiver
        finally:
            await receiver.shutdown()

    async def read_all(
        self, receiver: QueueAdapterReceiver, max_count: int = 1000
    ) -> list[BatchContainer]:
        """Read until the queue gives ``[]``; each read returns at most ``max_count``."""
        batch: list[BatchContainer] = []
        async with asyncio.timeout(_WAIT):
            while chunk := await receiver.get_messages(max_count):
                assert len(chunk) <= max_count
                batch.extend(chunk)
        return batch

    async def enqueue_numbered(
        self, adapter: QueueAdapter, stream: StreamId, count: int, queue: QueueId | None = None
    ) -> None:
        for n in range(count):
            await adapter.enqueue(queue or self.queue(), stream, [n])

    async def rewind_all(
        self,
        receiver: QueueAdapterReceiver,
        token: SequenceToken,
        stream_id: StreamId | None = None,
        max_count: int = 1000,
    ) -> list[BatchContainer]:
        """Page through ``read_from`` from ``token`` until it gives ``[]``."""
        batch: list[BatchContainer] = []
        async with asyncio.timeout(_WAIT):
            while chunk := await receiver.read_from(token, max_count, stream_id):
                assert len(chunk) <= max_count
                batch.extend(chunk)
                token = SequenceToken(chunk[-1].token.sequence + 1)
        return batch

    def require_durable(self) -> None:
        if not self.durable:
            pytest.skip("the adapter is not durable")

    def require_at_least_once(self) -> None:
        if not (self.at_least_once or self.durable):
            pytest.skip("the adapter does not keep unacknowledged containers")

    def require_rewindable(self, adapter: QueueAdapter) -> None:
        if not adapter.is_rewindable:
            pytest.skip("the adapter is not rewindable")

    # -- adapter -------------------------------------------------------------------------
    async def test_adapter_name_is_provider_name(self, adapter: QueueAdapter) -> None:
        assert adapter.name == self.provider_name

    async def test_adapter_is_rewindable_is_bool(self, adapter: QueueAdapter) -> None:
        assert isinstance(adapter.is_rewindable, bool)

    async def test_adapter_open_and_close_are_idempotent(self, adapter: QueueAdapter) -> None:
        await adapter.open()
        await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])
        await adapter.close()
        await adapter.close()

    async def test_adapter_enqueue_after_close_raises_runtime_error(
        self, adapter: QueueAdapter
    ) -> None:
        await adapter.close()

        with pytest.raises(RuntimeError):
            await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])
        with pytest.raises(RuntimeError):
            adapter.create_receiver(self.queue())

    async def test_adapter_enqueue_before_open_raises_runtime_error(self, tmp_path: Path) -> None:
        adapter = (await self.make_factory(tmp_path)).create_adapter(self.provider_name)
        try:
            with pytest.raises(RuntimeError):
                await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])
            with pytest.raises(RuntimeError):
                adapter.create_receiver(self.queue())
        finally:
            await adapter.close()

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
        _assert_token_order(batch)

    async def test_enqueue_concurrent_producers_keep_per_stream_order(
        self, adapter: QueueAdapter
    ) -> None:
        streams = [StreamId("producer", f"p{i}") for i in range(10)]
        async with asyncio.TaskGroup() as tg:
            for stream in streams:
                tg.create_task(self.enqueue_numbered(adapter, stream, 20))

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver, max_count=37)

        _assert_token_order(batch)
        for stream in streams:
            assert [c.events[0] for c in batch if c.stream_id == stream] == list(range(20))
        assert len(batch) == 200

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
        _assert_token_order(batch)

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
        _assert_token_order(first + second)

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

        _assert_token_order(seen)

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
        async with self.receiver(adapter) as receiver, asyncio.timeout(_WAIT):
            async with asyncio.TaskGroup() as tg:
                for stream in streams:
                    tg.create_task(self.enqueue_numbered(adapter, stream, 30))
                while len(seen) < 150:
                    batch = await receiver.get_messages(16)
                    await receiver.messages_delivered(batch)
                    seen.extend(batch)
                    await asyncio.sleep(0)  # let producers run; no timing involved
            assert await receiver.get_messages(10) == []

        _assert_token_order(seen)
        for stream in streams:
            assert [c.events[0] for c in seen if c.stream_id == stream] == list(range(30))

    # -- events and identities -----------------------------------------------------------
    async def test_events_round_trip_exactly(self, adapter: QueueAdapter) -> None:
        await adapter.enqueue(self.queue(), StreamId("s", 1), list(ROUND_TRIP_EVENTS))

        async with self.receiver(adapter) as receiver:
            (container,) = await receiver.get_messages(10)

        assert event_shape(container.events) == event_shape(ROUND_TRIP_EVENTS)

    async def test_stream_ids_round_trip_exactly(self, adapter: QueueAdapter) -> None:
        streams = [
            StreamId("s", 1),
            StreamId("s", "1"),
            StreamId("s", -(2**63)),
            StreamId("s", ""),
            StreamId("s", _UUID),
            StreamId("s", str(_UUID)),
            StreamId("namespace ✓", "ключ"),
        ]
        for stream in streams:
            await adapter.enqueue(self.queue(), stream, [str(stream)])

        async with self.receiver(adapter) as receiver:
            batch = await self.read_all(receiver)

        assert [(c.stream_id, type(c.stream_id.key)) for c in batch] == [
            (s, type(s.key)) for s in streams
        ]

    async def test_container_size_grows_with_payload(self, adapter: QueueAdapter) -> None:
        stream = StreamId("s", 1)
        await adapter.enqueue(self.queue(), stream, ["x"])
        await adapter.enqueue(self.queue(), stream, ["x" * 10_000])

        async with self.receiver(adapter) as receiver:
            small, large = await receiver.get_messages(10)

        assert 0 < small.size < large.size
        assert large.size >= 10_000

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
        _assert_token_order(again)

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
        streams = [StreamId("a", 1), StreamId("a", "1"), StreamId("b", 1), StreamId("a", _UUID)]
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

        async with self.receiver(adapter) as receiver, asyncio.timeout(_WAIT):
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
            asyncio.timeout(_WAIT),
            asyncio.TaskGroup() as tg,
        ):
            for stream in streams:
                tg.create_task(self.enqueue_numbered(adapter, stream, 25))
            while len(seen) < 100:
                batch = await receiver.get_messages(7)
                seen.extend(batch)
                again = await receiver.read_from(SequenceToken(0), 1000)
                assert again[: len(seen)] == seen
                _assert_token_order(again)
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

    # -- receiver lifecycle --------------------------------------------------------------
    async def test_receiver_calls_before_initialize_raise_runtime_error(
        self, adapter: QueueAdapter
    ) -> None:
        receiver = adapter.create_receiver(self.queue())
        try:
            with pytest.raises(RuntimeError):
                await receiver.get_messages(10)
            with pytest.raises(RuntimeError):
                await receiver.messages_delivered([])
        finally:
            await receiver.shutdown()

    async def test_receiver_calls_after_shutdown_raise_runtime_error(
        self, adapter: QueueAdapter
    ) -> None:
        receiver = adapter.create_receiver(self.queue())
        await receiver.initialize()
        await receiver.shutdown()

        with pytest.raises(RuntimeError):
            await receiver.get_messages(10)
        with pytest.raises(RuntimeError):
            await receiver.messages_delivered([])

    async def test_receiver_shutdown_is_idempotent(self, adapter: QueueAdapter) -> None:
        receiver = adapter.create_receiver(self.queue())
        await receiver.initialize()

        await receiver.shutdown()
        await receiver.shutdown()
        await asyncio.gather(receiver.shutdown(), receiver.shutdown())

    async def test_receiver_shutdown_waits_for_read_in_flight(self, adapter: QueueAdapter) -> None:
        await self.enqueue_numbered(adapter, StreamId("s", 1), 3)
        receiver = adapter.create_receiver(self.queue())
        await receiver.initialize()
        finished: list[str] = []

        async with asyncio.timeout(_WAIT):
            # Tasks start in creation order: the read is under way when shutdown begins.
            read = asyncio.create_task(receiver.get_messages(10))
            read.add_done_callback(lambda _: finished.append("read"))
            stop = asyncio.create_task(receiver.shutdown())
            stop.add_done_callback(lambda _: finished.append("shutdown"))
            await asyncio.gather(read, stop)

        assert finished == ["read", "shutdown"]
        assert [c.events[0] for c in read.result()] == [0, 1, 2]

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
        _assert_token_order(again)
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
