"""messaging/frames.py: the one frame reader and validator."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from orleanspy.errors import ProtocolError, SerializationError
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import EXT_DATACLASS, EXT_TUPLE, Codec
from orleanspy.messaging.frames import (
    BadRequest,
    check_handshake,
    check_response,
    check_size,
    decode,
    decode_or_reject,
    raw_header,
    read_frame,
    request_message,
)
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Direction
from orleanspy.messaging.types import TypePolicy
from orleanspy.messaging.wire import PROTOCOL_VERSION

CODEC = Codec()


def test_frames_check_size_refuses_a_frame_above_the_limit() -> None:
    check_size(10, 10)
    with pytest.raises(ProtocolError, match="max_frame_size"):
        check_size(11, 10)


def test_frames_decode_maps_bad_msgpack_to_protocol_error() -> None:
    assert decode(CODEC, CODEC.packb([1, "a"])) == [1, "a"]
    with pytest.raises(ProtocolError, match="undecodable"):
        decode(CODEC, b"\xc1")


def test_frames_decode_keeps_serialization_error_for_a_value_nested_too_deeply() -> None:
    nested = msgpack.packb([1])
    for _ in range(100):
        nested = msgpack.packb(msgpack.ExtType(EXT_TUPLE, nested))
    payload = msgpack.packb([0, 7, msgpack.ExtType(EXT_TUPLE, nested)])
    with pytest.raises(SerializationError):
        decode(CODEC, payload)
    assert raw_header(payload) == (0, 7)
    missing = msgpack.packb(["no_such_module_here:Thing", {"a": 1}])
    unknown = msgpack.packb([0, 8, msgpack.ExtType(EXT_DATACLASS, missing)])
    assert decode(CODEC, unknown) == [0, 8, {"a": 1}]


def test_frames_raw_header_of_a_frame_without_an_id_is_none() -> None:
    assert raw_header(msgpack.packb({"v": 1})) is None
    assert raw_header(b"\xc1") is None


def test_frames_check_handshake() -> None:
    ok = {"v": PROTOCOL_VERSION, "cluster": "c", "secret": "s"}
    assert check_handshake(ok, "c", "s") is None
    assert check_handshake(ok, "c", None) is None
    assert "cluster id" in (check_handshake(ok, "other", None) or "")
    assert "secret" in (check_handshake({**ok, "secret": "x"}, "c", "s") or "")
    with pytest.raises(ProtocolError, match="protocol version"):
        check_handshake({"v": 99}, "c", None)
    with pytest.raises(ProtocolError):
        check_handshake([1, 2], "c", None)


def request(*, kind: int = 0, key: object = "k", chain: object = (), hops: int | None = None,
            from_client: object = False) -> list[object]:
    frame: list[object] = [kind, 5, "Counter", key, "add", [1], None, 2.5, list(chain)]
    if hops is not None:
        frame += [hops, from_client]
    return frame


def test_frames_request_message_builds_the_message() -> None:
    msg = request_message(request(), 9)
    assert (msg.direction, msg.target.type_name, msg.method, msg.args) == (
        Direction.REQUEST, "Counter", "add", [1]
    )
    assert msg.timeout == 2.5
    one_way = request_message(request(kind=1, hops=2), 11)
    assert one_way.direction is Direction.ONE_WAY
    assert one_way.hops == 2
    assert not one_way.flags & FLAG_FROM_CLIENT
    forwarded = request_message(request(hops=1, from_client=True), 11)
    assert forwarded.flags & FLAG_FROM_CLIENT


@pytest.mark.parametrize("frame", [
    request()[:8],
    [0, "5", "Counter", "k", "add", [1], None, 2.5, []],
    [0, 5, "Counter", "k", 3, [1], None, 2.5, []],
    [0, 5, "Counter", "k", "add", (1,), None, 2.5, []],
    [0, 5, "Counter", "k", "add", [1], [], 2.5, []],
])
def test_frames_request_message_refuses_a_malformed_frame(frame: list[object]) -> None:
    with pytest.raises(ProtocolError):
        request_message(frame, 9)


def test_frames_request_message_refuses_a_non_int_hop_count_or_origin() -> None:
    with pytest.raises(ProtocolError):
        request_message(request(hops="x"), 11)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError):
        request_message(request(hops=0, from_client=1), 11)
    with pytest.raises(ProtocolError):
        request_message(request(hops=0)[:10], 11)


def test_frames_request_message_reports_a_bad_chain_as_bad_request() -> None:
    with pytest.raises(BadRequest) as info:
        request_message(request(chain=[["T", "not an id", True]]), 9)
    assert isinstance(info.value.error, ValueError)


def test_frames_check_response() -> None:
    check_response([2, 1, True, "x"])
    for bad in ([2, 1, True], [0, 1, True, "x"], {"ok": True}):
        with pytest.raises(ProtocolError):
            check_response(bad)


async def test_frames_read_frame_reads_one_frame_and_refuses_an_oversized_one() -> None:
    reader = asyncio.StreamReader()
    payload = CODEC.packb({"ok": True})
    reader.feed_data(len(payload).to_bytes(4, "big") + payload)
    reader.feed_data((1 << 20).to_bytes(4, "big"))
    reader.feed_eof()
    assert await read_frame(reader, CODEC, 1024) == {"ok": True}
    with pytest.raises(ProtocolError, match="max_frame_size"):
        await read_frame(reader, CODEC, 1024)


def test_decode_or_reject_before_the_handshake_decodes_no_ext_value():
    """An unauthenticated peer's frame is plain msgpack: ext values (which would name types to
    resolve, or nest) come out as None and reach nothing in the codec."""
    codec = Codec(None, policy=TypePolicy())
    nested = msgpack.packb([1])
    for _ in range(500):
        nested = msgpack.packb(msgpack.ExtType(1, nested))
    hostile = msgpack.packb({"v": 1, "cluster": "dev", "x": msgpack.ExtType(1, nested)})
    refused: list[bytes] = []
    obj = decode_or_reject(codec, hostile, False, lambda p, e: bool(refused.append(p)))
    assert obj == {"v": 1, "cluster": "dev", "x": None}
    assert refused == []
    assert decode_or_reject(codec, codec.packb((1, 2)), True, lambda p, e: False) == (1, 2)


def test_frames_request_message_shares_one_grain_id_per_plain_key() -> None:
    """Requests for one grain name the very GrainId object the activation table holds."""
    first = request_message(request(), 9).target
    again = request_message(request(), 9).target
    assert first is again
    assert first == GrainId("Counter", "k")
    as_int = request_message([0, 6, "Counter", 7, "add", [], None, 2.5, []], 9).target
    as_text = request_message([0, 7, "Counter", "7", "add", [], None, 2.5, []], 9).target
    assert as_int != as_text and as_int.key == 7 and as_text.key == "7"


def test_frames_request_message_reports_a_bad_key_as_bad_request() -> None:
    for key in (True, 1.5, {"a": 1}, [1, None]):
        with pytest.raises(BadRequest):
            request_message([0, 5, "Counter", key, "add", [], None, 2.5, []], 9)
    tuple_key = request_message([0, 5, "Counter", ["a", 1], "add", [], None, 2.5, []], 9)
    assert tuple_key.target == GrainId("Counter", ("a", 1))

