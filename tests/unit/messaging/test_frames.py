"""messaging/frames.py: every frame kind round-trips; the one reader refuses bad frames."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from orleanspy.errors import ProtocolError, SerializationError
from orleanspy.ids import GrainId
from orleanspy.messaging.bodies import Encoded, encode_body, open_body, read_value, reply_frame
from orleanspy.messaging.codec import EXT_DATACLASS, EXT_TUPLE, Codec
from orleanspy.messaging.frames import (
    CONTROL,
    CONTROL_ONE_WAY,
    DRAINED,
    DRAINED_FRAME,
    GOAWAY,
    GOAWAY_FRAME,
    KINDS,
    ONE_WAY,
    PROTOCOL_VERSION,
    RESPONSE,
    RESPONSE_HEAD,
    BadRequest,
    Cancel,
    Control,
    Request,
    Response,
    check_handshake,
    check_size,
    decode,
    decode_or_reject,
    raw_header,
    read_frame,
    unpack_plain,
)
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Direction
from orleanspy.messaging.types import TypePolicy

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


def request(*, one_way: bool = False, key: object = "k", chain: object = (), hops: int = 0,
            from_client: bool = False) -> Request:
    return Request(one_way, 5, "Counter", key, "add", None if one_way else 2.5, list(chain),
                   hops, from_client, encode_body(CODEC, (1,), {"by": 2}))


def roundtrip(data: bytes) -> list[object]:
    obj = decode(CODEC, data)
    assert type(obj) is list
    return obj


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_frames_every_kind_round_trips(kind: int) -> None:
    """Each kind encodes to a compact msgpack array (no field names on the wire) and decodes
    to the record it was made from."""
    record = KINDS[kind]
    if record is Request:
        sent: object = request(one_way=kind == ONE_WAY, key=("a", 1), chain=[["T/k", 3, True]],
                               hops=2, from_client=True)
        data = sent.encode(CODEC)  # type: ignore[attr-defined]
    elif record is Response:
        sent = Response(9, True, CODEC.packb({"x": (1, 2)}))
        data = sent.encode()  # type: ignore[attr-defined]
    elif record is Control:
        sent = Control(kind == CONTROL, 0 if kind == CONTROL_ONE_WAY else 4, "dir", [1, "a"])
        data = sent.encode(CODEC)  # type: ignore[attr-defined]
    elif record is Cancel:
        sent = Cancel(12)
        data = sent.encode()  # type: ignore[attr-defined]
    else:
        data = {DRAINED: DRAINED_FRAME, GOAWAY: GOAWAY_FRAME}[kind]
        assert roundtrip(data) == [kind]
        return
    obj = roundtrip(data)
    assert obj[0] == kind
    assert b"one_way" not in data and b"body" not in data
    assert record.decode(obj) == sent


def test_frames_request_message_keeps_the_body_encoded_until_it_is_opened() -> None:
    msg = request(from_client=True, hops=3).message()
    assert (msg.direction, msg.target.type_name, msg.method, msg.timeout, msg.hops) == (
        Direction.REQUEST, "Counter", "add", 2.5, 3
    )
    assert msg.flags & FLAG_FROM_CLIENT
    assert msg.args == () and msg.body is not None
    open_body(CODEC, msg)
    assert (msg.args, msg.kwargs, msg.body) == ([1], {"by": 2}, None)
    assert encode_body(CODEC, (), None) == msgpack.packb([[], None])
    bare = Request(False, 6, "Counter", "k", "get", 1.0, [], 0, False,
                   encode_body(CODEC, (), {})).message()
    open_body(CODEC, bare)
    assert (bare.args, bare.kwargs) == ([], None)
    one_way = request(one_way=True).message()
    assert one_way.direction is Direction.ONE_WAY
    assert not one_way.flags & FLAG_FROM_CLIENT


@pytest.mark.parametrize("frame", [
    [0, 5, "Counter", "k", "add", 2.5, [], 0, False],
    [0, "5", "Counter", "k", "add", 2.5, [], 0, False, b""],
    [0, 5, "Counter", "k", 3, 2.5, [], 0, False, b""],
    [0, 5, "Counter", "k", "add", "soon", [], 0, False, b""],
    [0, 5, "Counter", "k", "add", 2.5, [], "x", False, b""],
    [0, 5, "Counter", "k", "add", 2.5, [], 0, 1, b""],
    [0, 5, "Counter", "k", "add", 2.5, [], 0, False, [[1], None]],
])
def test_frames_request_decode_refuses_a_malformed_frame(frame: list[object]) -> None:
    with pytest.raises(ProtocolError, match="request frame"):
        Request.decode(frame)


@pytest.mark.parametrize("body", [b"\xc1", msgpack.packb([1, None]), msgpack.packb([[1]]),
                                  msgpack.packb([[1], [2]])])
def test_frames_open_body_refuses_a_malformed_body(body: bytes) -> None:
    msg = request().message()
    msg.body = body
    with pytest.raises(ProtocolError):
        open_body(CODEC, msg)


def test_frames_open_body_with_an_unknown_class_is_a_serialization_error() -> None:
    msg = request().message()
    missing = msgpack.packb(["no_such_module_here:Thing", {"a": 1}])
    msg.body = msgpack.packb([[msgpack.ExtType(EXT_DATACLASS, missing)], None])
    assert open_body(Codec(policy=TypePolicy()), msg) is None
    assert msg.args == [{"a": 1}]  # not an allowed class: a plain map
    nested = msgpack.packb([1])
    for _ in range(100):
        nested = msgpack.packb(msgpack.ExtType(EXT_TUPLE, nested))
    msg.body = msgpack.packb([[msgpack.ExtType(EXT_TUPLE, nested)], None])
    with pytest.raises(SerializationError, match="arguments"):
        open_body(CODEC, msg)


def test_frames_request_message_reports_a_bad_chain_as_bad_request() -> None:
    with pytest.raises(BadRequest) as info:
        request(chain=[["T", "not an id", True]]).message()
    assert isinstance(info.value.error, ValueError)


def test_frames_response_decode_refuses_a_malformed_frame() -> None:
    for bad in ([2, 1, True], [2, 1, True, "x"], [2, "1", True, b""], [2, 1, 1, b""]):
        with pytest.raises(ProtocolError, match="response frame"):
            Response.decode(bad)


def test_frames_control_decode_refuses_a_malformed_frame() -> None:
    for bad in ([3, 1, "op"], [3, 1, 2, []], [3, 1, "op", {}]):
        with pytest.raises(ProtocolError, match="control frame"):
            Control.decode(bad)


def test_frames_reply_values_and_errors_round_trip_and_encoded_ones_pass_untouched() -> None:
    frame = Response.decode(roundtrip(reply_frame(CODEC, 3, True, {"n": (1, 2)})))
    assert read_value(CODEC, frame.ok, frame.body) == (True, {"n": (1, 2)})
    failed = Response.decode(roundtrip(reply_frame(CODEC, 4, False, KeyError("gone"))))
    ok, error = read_value(CODEC, failed.ok, failed.body)
    assert not ok and isinstance(error, KeyError)
    for corr in (3, 300, 70_000, 2**40):
        data = reply_frame(CODEC, corr, True, {"n": (1, 2)})
        assert data.startswith(RESPONSE_HEAD)
        head = unpack_plain(data)  # no codec: the body stays bytes
        assert head == [RESPONSE, corr, True, frame.body]
        relayed = reply_frame(CODEC, 5, head[2], Encoded((head[3],)))
        assert Response.decode(roundtrip(relayed)) == Response(5, True, frame.body)
    assert not Control(True, 1, "x", []).encode(CODEC).startswith(RESPONSE_HEAD)
    with pytest.raises(ProtocolError, match="undecodable"):
        unpack_plain(RESPONSE_HEAD + b"\xc1")
    unencodable = Response.decode(roundtrip(reply_frame(CODEC, 6, True, object())))
    ok, error = read_value(CODEC, unencodable.ok, unencodable.body)
    assert not ok and isinstance(error, SerializationError)
    assert read_value(CODEC, True, b"\xc1")[0] is False


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
    first = request().message().target
    again = request().message().target
    assert first is again
    assert first == GrainId("Counter", "k")
    as_int = request(key=7).message().target
    as_text = request(key="7").message().target
    assert as_int != as_text and as_int.key == 7 and as_text.key == "7"


def test_frames_request_message_reports_a_bad_key_as_bad_request() -> None:
    for key in (True, 1.5, {"a": 1}, [1, None]):
        with pytest.raises(BadRequest):
            request(key=key).message()
    tuple_key = request(key=["a", 1]).message()
    assert tuple_key.target == GrainId("Counter", ("a", 1))


def test_frames_cancel_decode_refuses_a_malformed_frame() -> None:
    for bad in ([7], [7, "1"], [7, 1, 2], [7, 1.5]):
        with pytest.raises(ProtocolError, match="cancel frame"):
            Cancel.decode(bad)
