"""What crosses a queue: the suite's sample events (every kind of value the codec must rebuild
exactly, dataclasses and enums included) and the clauses that events and stream ids
round-trip through an adapter exactly, type for type.
"""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from dataclasses import dataclass
from typing import Any

from orleanspy.streams.adapters.base import QueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.testing.stream_conformance.kit import QueueAdapterKit

__all__ = [
    "ROUND_TRIP_EVENTS", "SAMPLE_UUID", "EventClauses", "SampleEvent", "SampleKind", "event_shape",
]


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


#: A fixed UUID the sample events and stream ids carry.
SAMPLE_UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")

#: Values of every kind an event may hold; each must come out of a queue as it went in.
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
    SAMPLE_UUID,
    SampleKind.DELETED,
    SampleEvent("nested", (1, 2), SampleKind.DELETED, SAMPLE_UUID),
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


class EventClauses(QueueAdapterKit):
    """Events and stream ids come out of a queue as they went in."""

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
            StreamId("s", SAMPLE_UUID),
            StreamId("s", str(SAMPLE_UUID)),
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
