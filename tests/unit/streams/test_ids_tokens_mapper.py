"""StreamId, QueueId, SequenceToken and HashRingQueueMapper."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from orleanspy.errors import ConfigurationError
from orleanspy.messaging.codec import Codec
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.tokens import SequenceToken

REPO_ROOT = Path(__file__).resolve().parents[3]
UUID = uuid.UUID("12345678-1234-5678-1234-567812345678")
SAMPLE_STREAMS = [
    StreamId("orders", 1),
    StreamId("orders", "1"),
    StreamId("orders", UUID),
    StreamId("orders", str(UUID)),
    StreamId("a/b", "c"),
    StreamId("a", "b/c"),
    StreamId("ns ✓", "ключ"),
    StreamId("ns", -(2**63)),
    StreamId("ns", 2**64 - 1),
]


# -- StreamId ----------------------------------------------------------------------------


def test_stream_id_str_is_namespace_slash_key() -> None:
    assert str(StreamId("orders", 42)) == "orders/42"
    assert str(StreamId("orders", UUID)) == f"orders/{UUID}"


def test_stream_id_int_and_str_keys_are_different_streams() -> None:
    as_int, as_str = StreamId("ns", 1), StreamId("ns", "1")

    assert as_int != as_str
    assert as_int.canonical() != as_str.canonical()
    assert as_int.stable_hash() != as_str.stable_hash()


def test_stream_id_namespace_boundary_is_part_of_the_identity() -> None:
    first, second = StreamId("a/b", "c"), StreamId("a", "b/c")

    assert str(first) == str(second)
    assert first.canonical() != second.canonical()


def test_stream_id_equal_ids_have_equal_hashes() -> None:
    first, second = StreamId("ns", uuid.UUID(str(UUID))), StreamId("ns", UUID)

    assert first == second
    assert hash(first) == hash(second)
    assert first.stable_hash() == second.stable_hash()


def test_stream_id_stable_hash_is_32_bits() -> None:
    hashes = [s.stable_hash() for s in SAMPLE_STREAMS]

    assert all(0 <= h < 2**32 for h in hashes)
    assert len(set(hashes)) == len(hashes)


_PRINT_HASHES = """
import json, sys, uuid
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper
U = uuid.UUID("12345678-1234-5678-1234-567812345678")
streams = [
    StreamId("orders", 1), StreamId("orders", "1"), StreamId("orders", U),
    StreamId("orders", str(U)), StreamId("a/b", "c"), StreamId("a", "b/c"),
    StreamId("ns ✓", "ключ"), StreamId("ns", -(2**63)), StreamId("ns", 2**64 - 1),
]
mapper = HashRingQueueMapper(8, "p")
print(json.dumps([[s.stable_hash(), mapper.queue_for(s).index] for s in streams]))
"""


async def test_stream_id_stable_hash_and_queue_are_identical_in_another_process() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), *sys.path]),
        "PYTHONHASHSEED": "12345",  # a different str hash than this process's
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _PRINT_HASHES,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()

    mapper = HashRingQueueMapper(8, "p")
    expected = [[s.stable_hash(), mapper.queue_for(s).index] for s in SAMPLE_STREAMS]
    assert json.loads(out) == expected


@pytest.mark.parametrize(
    ("namespace", "key", "error"),
    [
        ("ns", True, TypeError),
        ("ns", 1.5, TypeError),
        ("ns", ("a", 1), TypeError),
        ("ns", None, TypeError),
        (b"ns", "k", TypeError),
        (None, "k", TypeError),
        ("", "k", ValueError),
        ("ns", 2**64, ValueError),
        ("ns", -(2**63) - 1, ValueError),
    ],
)
def test_stream_id_rejects_bad_namespace_or_key(
    namespace: object, key: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"StreamId\.(namespace|key)"):
        StreamId(namespace, key)  # type: ignore[arg-type]


def test_stream_id_is_immutable() -> None:
    stream = StreamId("ns", 1)

    with pytest.raises(AttributeError):
        stream.key = 2  # type: ignore[misc]


@pytest.mark.parametrize("stream", SAMPLE_STREAMS, ids=str)
def test_stream_id_round_trips_through_codec(stream: StreamId) -> None:
    codec = Codec()

    decoded = codec.unpackb(codec.packb(stream))

    assert decoded == stream
    assert type(decoded.key) is type(stream.key)


# -- QueueId -----------------------------------------------------------------------------


def test_queue_id_str_and_order() -> None:
    queues = [QueueId("b", 0), QueueId("a", 10), QueueId("a", 2)]

    assert str(QueueId("memory", 3)) == "memory-3"
    assert sorted(queues) == [QueueId("a", 2), QueueId("a", 10), QueueId("b", 0)]
    assert Codec().unpackb(Codec().packb(QueueId("a", 2))) == QueueId("a", 2)


@pytest.mark.parametrize(
    ("provider", "index", "error"),
    [
        ("", 0, ValueError),
        (None, 0, TypeError),
        ("p", -1, ValueError),
        ("p", "1", TypeError),
        ("p", True, TypeError),
    ],
)
def test_queue_id_rejects_bad_values(
    provider: object, index: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match=r"QueueId\."):
        QueueId(provider, index)  # type: ignore[arg-type]


# -- SequenceToken -----------------------------------------------------------------------


def test_sequence_token_orders_by_sequence_then_index() -> None:
    tokens = [SequenceToken(2, 0), SequenceToken(1, 5), SequenceToken(1), SequenceToken(10, 1)]

    assert sorted(tokens) == [
        SequenceToken(1, 0),
        SequenceToken(1, 5),
        SequenceToken(2, 0),
        SequenceToken(10, 1),
    ]
    assert SequenceToken(1, 5) < SequenceToken(2)
    assert SequenceToken(3) == SequenceToken(3, 0)
    assert max(tokens) == SequenceToken(10, 1)


def test_sequence_token_for_event_keeps_sequence() -> None:
    token = SequenceToken(7)

    assert token.for_event(3) == SequenceToken(7, 3)
    assert token.for_event(0) == token
    assert str(token.for_event(3)) == "7.3"


def test_sequence_token_round_trips_through_codec() -> None:
    codec = Codec()
    token = SequenceToken(2**62, 9)

    assert codec.unpackb(codec.packb(token)) == token
    assert codec.unpackb(codec.packb([token, token.for_event(1)])) == [
        token,
        SequenceToken(2**62, 1),
    ]


def test_batch_container_items_pair_events_with_their_tokens() -> None:
    container = BatchContainer(StreamId("ns", 1), SequenceToken(4), ("a", ("b",)), size=9)

    assert container.items() == [("a", SequenceToken(4, 0)), (("b",), SequenceToken(4, 1))]
    assert container.count == 2 and not container.is_encoded


def test_an_encoded_container_decodes_fresh_values_on_each_access() -> None:
    codec = Codec()
    payload = codec.packb([["a"], ("b",)])
    container = BatchContainer.encoded(StreamId("ns", 1), SequenceToken(4), payload, codec.unpackb)

    assert container.count == 2 and container.size == len(payload) and container.is_encoded
    assert container.items() == [(["a"], SequenceToken(4, 0)), (("b",), SequenceToken(4, 1))]
    first, second = container.values(), container.values()
    assert first == second and first[0] is not second[0]  # each delivery owns its values
    assert container == BatchContainer(StreamId("ns", 1), SequenceToken(4), (["a"], ("b",)),
                                       len(payload))


def test_an_encoded_container_that_is_not_an_array_is_refused() -> None:
    codec = Codec()
    with pytest.raises(ValueError, match="not a msgpack array"):
        BatchContainer.encoded(StreamId("ns", 1), SequenceToken(1), codec.packb({"a": 1}),
                               codec.unpackb)


# -- HashRingQueueMapper -----------------------------------------------------------------


class _FixedHash:
    """Stands in for a StreamId whose stable hash is known, to probe ring boundaries."""

    def __init__(self, value: int) -> None:
        self.value = value

    def stable_hash(self) -> int:
        return self.value


def test_mapper_lists_every_queue_of_its_provider() -> None:
    mapper = HashRingQueueMapper(total_queues=4, provider="mem")

    assert mapper.all_queues() == [QueueId("mem", i) for i in range(4)]
    assert mapper.total_queues == 4
    assert HashRingQueueMapper().all_queues() == [QueueId("default", i) for i in range(8)]


def test_mapper_ring_positions_follow_orleans_portions() -> None:
    mapper = HashRingQueueMapper(8, "p")
    portion = 2**32 // 8 + 1

    assert [mapper.ring_position(q) for q in mapper.all_queues()] == [portion * i for i in range(8)]
    with pytest.raises(ValueError):
        mapper.ring_position(QueueId("other", 0))


@pytest.mark.parametrize(
    ("hash_value", "index"),
    [
        (0, 0),
        (1, 1),
        (2**32 // 8 + 1, 1),
        (2**32 // 8 + 2, 2),
        (7 * (2**32 // 8 + 1), 7),
        (7 * (2**32 // 8 + 1) + 1, 0),
        (2**32 - 1, 0),
    ],
)
def test_mapper_takes_first_queue_at_or_after_the_hash_wrapping_to_zero(
    hash_value: int, index: int
) -> None:
    mapper = HashRingQueueMapper(8, "p")

    assert mapper.queue_for(_FixedHash(hash_value)) == QueueId("p", index)  # type: ignore[arg-type]


def test_mapper_single_queue_takes_every_stream() -> None:
    mapper = HashRingQueueMapper(1, "p")

    assert {mapper.queue_for(s) for s in SAMPLE_STREAMS} == {QueueId("p", 0)}
    assert mapper.queue_for(_FixedHash(2**32 - 1)) == QueueId("p", 0)  # type: ignore[arg-type]


def test_mapper_spreads_10000_streams_roughly_evenly_over_8_queues() -> None:
    mapper = HashRingQueueMapper(8, "p")

    counts = Counter(mapper.queue_for(StreamId("load", f"stream-{i}")).index for i in range(10_000))

    assert set(counts) == set(range(8))
    assert all(count > 500 for count in counts.values()), counts


def test_mapper_is_deterministic_and_depends_on_namespace() -> None:
    first, second = HashRingQueueMapper(8, "p"), HashRingQueueMapper(8, "p")
    streams = [StreamId(ns, i) for ns in ("a", "b") for i in range(200)]

    assert [first.queue_for(s) for s in streams] == [second.queue_for(s) for s in streams]
    moved = sum(
        first.queue_for(StreamId("a", i)) != first.queue_for(StreamId("b", i)) for i in range(200)
    )
    assert moved > 100


@pytest.mark.parametrize("total_queues", [0, -1, True, 2.0])
def test_mapper_rejects_bad_total_queues(total_queues: object) -> None:
    with pytest.raises(ConfigurationError, match=r"HashRingQueueMapper\.total_queues"):
        HashRingQueueMapper(total_queues)  # type: ignore[arg-type]


def test_mapper_rejects_empty_provider() -> None:
    with pytest.raises(ConfigurationError, match=r"HashRingQueueMapper\.provider"):
        HashRingQueueMapper(8, "")
