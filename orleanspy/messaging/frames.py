"""Frames: the one parser and validator of the length-prefixed msgpack frames on a socket.

Every connection (client -> gateway, silo <-> silo, a tool's query) reads its frames through
these functions, so the size limit, the decoding and the checks of a handshake, a request and
a response are written once:

* ``read_frame`` for a stream reader; ``FramedConnection`` splits a protocol's buffer with the
  same ``check_size``;
* ``decode`` turns a payload into a value: ``SerializationError`` when the msgpack is sound but
  a value cannot be rebuilt here (answer that one call), ``ProtocolError`` otherwise (close);
  a connection's hot path calls ``codec.unpackb`` itself and maps any other failure with
  ``undecodable``;
* ``raw_header`` reads ``(kind, id)`` of a frame whose values cannot be rebuilt;
* ``check_handshake`` / ``request_message`` / ``check_response`` validate decoded frames;
  ``request_message`` raises ``BadRequest`` for a well-formed request naming a bad key or
  call chain (answer it, keep the connection).

Layouts are documented in ``messaging/wire.py``.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Any, Final

import msgpack

from orleanspy.errors import ProtocolError, SerializationError
from orleanspy.ids import grain_id
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Direction, Message
from orleanspy.messaging.wire import PROTOCOL_VERSION, chain_entry

__all__ = [
    "GOAWAY",
    "ONE_WAY",
    "REJECTED",
    "REQUEST",
    "RESPONSE",
    "BadRequest",
    "check_handshake",
    "check_response",
    "check_size",
    "decode",
    "decode_or_reject",
    "raw_header",
    "read_frame",
    "request_message",
    "undecodable",
]

REQUEST: Final = 0
ONE_WAY: Final = 1
RESPONSE: Final = 2
#: ``[6]``, gateway -> client: "I am stopping; send new calls elsewhere" (the calls already
#: sent are still answered); client -> gateway: "understood, I send nothing more here".
GOAWAY: Final = 6


def check_size(size: int, limit: int) -> None:
    """Raise ProtocolError for a frame longer than ``limit`` bytes."""
    if size > limit:
        raise ProtocolError(
            f"frame of {size} bytes exceeds the maximum of {limit} bytes (max_frame_size)"
        )


async def read_frame(reader: asyncio.StreamReader, codec: Codec, limit: int) -> Any:
    """Read and decode one frame from ``reader``.

    Raises:
        ProtocolError: oversized or undecodable frame.
        asyncio.IncompleteReadError: the peer closed the connection.
    """
    size = int.from_bytes(await reader.readexactly(4), "big")
    check_size(size, limit)
    return decode(codec, await reader.readexactly(size))


class BadRequest(Exception):
    """A well-formed request whose key or call chain is invalid; ``error`` is the answer."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def undecodable(exc: Exception) -> ProtocolError:
    """The ProtocolError for a payload that is not decodable msgpack."""
    return ProtocolError(f"undecodable msgpack frame ({exc.__class__.__name__})")


def decode(codec: Codec, payload: bytes | bytearray) -> Any:
    """The value of one frame.

    Raises:
        SerializationError: well-formed msgpack holding a value this process cannot rebuild
            (a class whose module it lacks): the caller may answer that one call.
        ProtocolError: anything else undecodable: the caller closes the connection.
    """
    try:
        return codec.unpackb(payload)
    except SerializationError:
        raise
    except Exception as exc:
        raise undecodable(exc) from exc


REJECTED: Final = object()
"""``decode_or_reject``'s answer for a frame that was answered instead of decoded."""


def decode_or_reject(
    codec: Codec, payload: bytes | bytearray, ready: bool,
    reject_one: Callable[[bytes | bytearray, Exception], bool],
) -> Any:
    """The value of one frame on a connection that may answer a single bad request.

    Well-formed msgpack whose values this process cannot rebuild (an unknown dataclass, say)
    on a ready connection goes to ``reject_one(payload, error)``: if it answers that one
    request, the result is ``REJECTED`` and the connection stays open.

    Before the handshake (``ready`` false) nothing beyond plain msgpack is decoded: ext values
    (tuples, dataclasses, references, ...) come out as None, so an unauthenticated peer cannot
    reach the codec's type resolution at all.

    Raises:
        ProtocolError: anything else undecodable: the caller closes the connection.
    """
    if not ready:
        try:
            return msgpack.unpackb(payload, ext_hook=_no_ext, raw=False, strict_map_key=False)
        except Exception as exc:
            raise undecodable(exc) from exc
    try:
        return codec.unpackb(payload)
    except SerializationError as exc:
        if reject_one(payload, exc):
            return REJECTED
        raise ProtocolError(f"undecodable frame ({exc})") from exc
    except Exception as exc:
        raise undecodable(exc) from exc


def _no_ext(code: int, data: bytes) -> Any:
    return None


def raw_header(payload: bytes | bytearray) -> tuple[Any, int] | None:
    """``(kind, id)`` of a frame read without rebuilding its values, or None if it has none."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False, ext_hook=_no_ext)
    except Exception:
        return None
    if type(raw) is not list or len(raw) < 2 or type(raw[1]) is not int:
        return None
    return raw[0], raw[1]


def check_handshake(obj: Any, cluster_id: str, secret: str | None) -> str | None:
    """Check an opening handshake map: None if accepted, else why it is refused.

    Raises:
        ProtocolError: not a handshake of this protocol version (close without a reply).
    """
    if not isinstance(obj, dict) or obj.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(
            f"bad handshake: expected a map with protocol version {PROTOCOL_VERSION}"
        )
    if obj.get("cluster") != cluster_id:
        return f"wrong cluster id {obj.get('cluster')!r} (this silo serves another cluster)"
    if secret is not None and not hmac.compare_digest(
        str(obj.get("secret") or "").encode(), secret.encode()
    ):
        return "wrong or missing secret"
    return None


_REQUEST: Final = Direction.REQUEST
_ONE_WAY: Final = Direction.ONE_WAY


def request_message(obj: list[Any], size: int) -> Message:
    """Validate a request / one-way frame of ``size`` fields (9 from a client, 11 between
    silos: then the hop count and whether a gateway client sent it) and build its message
    (its id is ``obj[1]``).

    Raises:
        ProtocolError: the frame's shape or field types are wrong (close the connection).
        BadRequest: a well-formed frame naming a bad key or call chain (answer the request
            with ``BadRequest.error``, keep the connection).
    """
    if len(obj) != size:
        raise ProtocolError(f"a request frame must be a {size}-element msgpack array")
    type_name = obj[2]
    method = obj[4]
    args = obj[5]
    kwargs = obj[6]
    chain = obj[8]
    if (
        type(obj[1]) is not int
        or type(type_name) is not str
        or type(method) is not str
        or type(args) is not list
        or not (kwargs is None or type(kwargs) is dict)
        or type(chain) is not list
        or (size == 11 and (type(obj[9]) is not int or type(obj[10]) is not bool))
    ):
        raise ProtocolError("a request frame has fields of the wrong types")
    try:
        gid = grain_id(type_name, obj[3])
        entries = tuple(chain_entry(e) for e in chain) if chain else ()
    except Exception as exc:
        raise BadRequest(exc) from exc
    timeout = obj[7]
    if type(timeout) is not float and not isinstance(timeout, (int, float)):
        timeout = None
    msg = Message(_ONE_WAY if obj[0] == ONE_WAY else _REQUEST, gid, method, args, kwargs,
                  entries, 0, timeout)
    if size == 11:
        if obj[9]:
            msg.hops = obj[9]
        if obj[10]:
            msg.flags = FLAG_FROM_CLIENT
    return msg


def check_response(obj: Any) -> None:
    """Raise ProtocolError unless ``obj`` is a response frame ``[2, id, ok, value]``."""
    if type(obj) is not list or len(obj) != 4 or obj[0] != RESPONSE:
        raise ProtocolError("a response frame must be [2, id, ok, value]")
