"""Frames: every kind of frame on a socket, its fields, and the one parser and validator.

Frame: 4-byte big-endian length N, then N bytes of msgpack. The first frames of a connection
are maps (the handshakes, below); every later frame is a compact msgpack array whose first
item is its kind. Each kind is one record here (``encode`` writes it, ``decode`` checks and
reads it); client, gateway and silo connections use nothing else:

=================  ============================================================================
kind               array
=================  ============================================================================
``Request``        ``[0 | 1, id, type_name, key, method, timeout, chain, hops, from_client,
                   body(, context)]`` (1: one-way; below)
``Response``       ``[2, id, ok, body]``; ``body`` is the msgpack of the value, or of an error
                   map ``{"type", "args", "message", "tb"}`` (``messaging/wire.py``)
``Control``        ``[3 | 4, id, op, args]``: a silo's control request (answered with a
                   ``Response``), or a control one-way (4, id 0)
``DRAINED``        ``[5]``: "I have nothing pending on this connection" (silo connections)
``GOAWAY``         ``[6]``, gateway -> client: "I am stopping; send new calls elsewhere" (the
                   calls already sent are still answered); client -> gateway: "understood"
``Cancel``         ``[7, id]``: the caller of request ``id`` (sent on this connection) gave up:
                   not started, it never runs; running a ``@cancellable`` method, it is
                   cancelled; routed on, the cancel follows it
=================  ============================================================================

Arguments and results travel as a ``body`` of bytes inside the frame (``messaging/bodies.py``),
so a silo that only routes a request or a reply reads the header (target, id, flags, timeout)
and forwards the body untouched.

Handshakes (maps): client -> gateway ``{"v", "cluster", "secret", "client", "key"}`` (the
client's id and the key that proves it, ``messaging/client_identity.py``), answered
``{"v", "ok": true, "silo"}`` or ``{"v", "ok": false, "error"}``; the silo port's
challenge-response is described in ``cluster/handshake.py``.

Reading: ``read_frame`` for a stream reader; ``FramedConnection`` splits a protocol's buffer
with the same ``check_size``; ``decode`` / ``decode_or_reject`` turn a payload into a value:
``SerializationError`` when the msgpack is sound but a value cannot be rebuilt here (answer
that one call), ``ProtocolError`` otherwise (close this connection only). ``Request.to_message``
raises ``BadRequest`` for a well-formed request naming a bad key or call chain (answer it).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import msgpack

from orleanspy.errors import ProtocolError, SerializationError
from orleanspy.ids import GrainId, grain_id
from orleanspy.messaging.codec import UNCOUNTED_FRAME, Codec, unpack_plain_bounded
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Direction, Message
from orleanspy.messaging.wire import chain_entry

__all__ = [
    "CANCEL",
    "CONTROL",
    "CONTROL_ONE_WAY",
    "DRAINED",
    "GOAWAY",
    "KINDS",
    "ONE_WAY",
    "PROTOCOL_VERSION",
    "REJECTED",
    "REQUEST",
    "RESPONSE",
    "RESPONSE_HEAD",
    "BadRequest",
    "Cancel",
    "Control",
    "Request",
    "Response",
    "check_handshake",
    "check_size",
    "decode",
    "decode_or_reject",
    "raw_header",
    "read_frame",
    "undecodable",
    "unpack_plain",
]

#: The version a handshake names; a peer naming another is refused.
PROTOCOL_VERSION: Final = 4

REQUEST: Final = 0
ONE_WAY: Final = 1
RESPONSE: Final = 2
CONTROL: Final = 3
CONTROL_ONE_WAY: Final = 4
DRAINED: Final = 5
GOAWAY: Final = 6
CANCEL: Final = 7

_REQUEST: Final = Direction.REQUEST
_ONE_WAY: Final = Direction.ONE_WAY
_plain_packb: Final[Callable[[Any], bytes]] = msgpack.Packer(use_bin_type=True, autoreset=True).pack


def unpack_plain(payload: bytes | bytearray) -> Any:
    """A frame decoded as plain msgpack, no ext value resolved (a response's header).

    Raises:
        ProtocolError: not decodable.
    """
    return unpack_plain_bounded(payload)


class BadRequest(Exception):
    """A well-formed request whose key or call chain is invalid; ``error`` is the answer."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


# -- the records -----------------------------------------------------------------------------
# Each record is the declaration of its kind. The hot paths (a call through a connection) use
# its static ``pack`` / ``check`` / ``to_message`` on plain lists, which are what ``encode``
# and ``decode`` run too: no record object is built per call.
class Request(NamedTuple):
    """``[0 | 1, id, type_name, key, method, timeout, chain, hops, from_client, body]``,
    then ``context`` (the request context map, ``grains.request_context``) if not empty.

    ``timeout``: the seconds the caller has left (None for a one-way); ``chain``: the call
    chain, ``[type name, activation id, reentrant]`` each; ``hops``: times forwarded between
    silos; ``from_client``: a gateway client sent it (only methods open to clients may run
    it; a gateway sets it whatever the client says); ``body``: ``encode_body(args, kwargs)``.
    """

    one_way: bool
    id: int
    type_name: str
    key: Any
    method: str
    timeout: float | None
    chain: list[Any]
    hops: int
    from_client: bool
    body: bytes
    context: dict[str, Any] | None = None

    @staticmethod
    def pack(codec: Codec, one_way: bool, corr: int, type_name: str, key: Any, method: str,
             timeout: float | None, chain: list[Any], hops: int, from_client: bool,
             body: bytes, context: dict[str, Any] | None = None) -> bytes:
        """The frame of these fields. With a str or int key the header holds no ext value
        (the body is bytes already), so plain msgpack writes it without the codec."""
        frame = [ONE_WAY if one_way else REQUEST, corr, type_name, key, method, timeout, chain,
                 hops, from_client, body]
        if context:
            frame.append(context)
        if type(key) is str or type(key) is int:
            try:
                return _plain_packb(frame)
            except (OverflowError, TypeError, ValueError):
                pass  # an int beyond 64 bits, say: the codec says why it cannot be sent
        return codec.packb(frame)

    @staticmethod
    def check(obj: list[Any]) -> None:
        """Raise ProtocolError unless ``obj`` (a decoded frame of kind 0 or 1) has this
        record's shape and field types."""
        if len(obj) != 10 and (len(obj) != 11 or type(obj[10]) is not dict):
            raise ProtocolError("a request frame must be [kind, id, type, key, method, "
                                "timeout, chain, hops, from_client, body(, context map)]")
        timeout = obj[5]
        if (
            type(obj[1]) is not int
            or type(obj[2]) is not str
            or type(obj[4]) is not str
            or not (timeout is None or type(timeout) is float or type(timeout) is int)
            or type(obj[6]) is not list
            or type(obj[7]) is not int
            or type(obj[8]) is not bool
            or type(obj[9]) is not bytes
        ):
            raise ProtocolError("a request frame has fields of the wrong types")

    @staticmethod
    def to_message(obj: list[Any], gid: GrainId | None = None) -> Message:
        """The message of a checked request frame (``check``), its body still encoded
        (``open_body`` decodes it); ``gid``: its grain's id, if made already.

        Raises:
            BadRequest: the key or the call chain is invalid (answer it, keep serving).
        """
        try:
            if gid is None:
                gid = grain_id(obj[2], obj[3])
            chain = obj[6]
            entries = tuple(chain_entry(e) for e in chain) if chain else ()
        except Exception as exc:
            raise BadRequest(exc) from exc
        msg = Message(_ONE_WAY if obj[0] == ONE_WAY else _REQUEST, gid, obj[4], (), None,
                      entries, FLAG_FROM_CLIENT if obj[8] else 0, obj[5] or None)
        msg.body = obj[9]
        msg.rc = obj[10] if len(obj) > 10 else None
        if obj[7]:
            msg.hops = obj[7]
        return msg

    def encode(self, codec: Codec) -> bytes:
        return Request.pack(codec, *self)

    @classmethod
    def decode(cls, obj: list[Any]) -> Request:
        """The record of a decoded frame of kind 0 or 1 (ProtocolError if malformed)."""
        Request.check(obj)
        return cls(obj[0] == ONE_WAY, *obj[1:])

    def message(self) -> Message:
        """``to_message`` of this request."""
        return Request.to_message([ONE_WAY if self.one_way else REQUEST, *self[1:]])


class Response(NamedTuple):
    """``[2, id, ok, body]``: the outcome of request ``id`` (``value_body``).

    Its header holds no ext value, so plain msgpack reads it (``unpack``) without the
    codec; a silo that only routes the call sends ``ok`` and ``body`` on as they came, under
    its own caller's id (``Encoded``)."""

    id: int
    ok: bool
    body: bytes

    @staticmethod
    def pack(corr: int, ok: bool, body: bytes) -> bytes:
        return _plain_packb([RESPONSE, corr, ok, body])

    @staticmethod
    def check(obj: list[Any]) -> None:
        """Raise ProtocolError unless ``obj`` is ``[2, id, ok, body]``."""
        if (len(obj) != 4 or obj[0] != RESPONSE or type(obj[1]) is not int
                or type(obj[2]) is not bool or type(obj[3]) is not bytes):
            raise ProtocolError("a response frame must be [2, id, ok, body]")

    def encode(self) -> bytes:
        return Response.pack(*self)

    @classmethod
    def decode(cls, obj: list[Any]) -> Response:
        """The record of a decoded response frame (ProtocolError if malformed)."""
        Response.check(obj)
        return cls(obj[1], obj[2], obj[3])


class Control(NamedTuple):
    """``[3 | 4, id, op, args]``: control request ``op`` (``answer``: reply with a
    ``Response``), or a control one-way (id 0)."""

    answer: bool
    id: int
    op: str
    args: list[Any]

    def encode(self, codec: Codec) -> bytes:
        return codec.packb([CONTROL if self.answer else CONTROL_ONE_WAY, self.id, self.op,
                            self.args])

    @classmethod
    def decode(cls, obj: list[Any]) -> Control:
        """Raises ProtocolError unless ``obj`` is ``[3|4, id, op, args]``."""
        if (len(obj) != 4 or type(obj[1]) is not int or type(obj[2]) is not str
                or type(obj[3]) is not list):
            raise ProtocolError("a control frame must be [3|4, id, op, args]")
        return cls(obj[0] == CONTROL, obj[1], obj[2], obj[3])


class Cancel(NamedTuple):
    """``[7, id]``: the caller of request ``id``, sent on this connection, gave up on it."""

    id: int

    @staticmethod
    def pack(corr: int) -> bytes:
        return _plain_packb([CANCEL, corr])

    def encode(self) -> bytes:
        return Cancel.pack(self.id)

    @classmethod
    def decode(cls, obj: list[Any]) -> Cancel:
        """Raises ProtocolError unless ``obj`` is ``[7, id]``."""
        if len(obj) != 2 or type(obj[1]) is not int:
            raise ProtocolError("a cancel frame must be [7, id]")
        return cls(obj[1])


#: A response frame's first two bytes: a 4-element array, kind 2.
RESPONSE_HEAD: Final = bytes((0x94, RESPONSE))

#: The frames of a kind that has no field, as sent.
DRAINED_FRAME: Final = _plain_packb([DRAINED])
GOAWAY_FRAME: Final = _plain_packb([GOAWAY])

#: Every kind: its number, and the record that encodes and decodes it (None: no field).
KINDS: Final[dict[int, type[Any] | None]] = {
    REQUEST: Request, ONE_WAY: Request, RESPONSE: Response, CONTROL: Control,
    CONTROL_ONE_WAY: Control, DRAINED: None, GOAWAY: None, CANCEL: Cancel,
}


# -- reading ---------------------------------------------------------------------------------
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
        return codec.unpack_frame(payload)
    except (SerializationError, ProtocolError):
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

    Well-formed msgpack whose values this process cannot rebuild (an unknown dataclass in a
    key, say) on a ready connection goes to ``reject_one(payload, error)``: if it answers
    that one request, the result is ``REJECTED`` and the connection stays open.

    Before the handshake (``ready`` false) nothing beyond plain msgpack is decoded: ext values
    (tuples, dataclasses, references, ...) come out as None, so an unauthenticated peer cannot
    reach the codec's type resolution at all.

    Raises:
        ProtocolError: anything else undecodable: the caller closes the connection.
    """
    if not ready:
        return unpack_plain_bounded(payload)
    try:
        if len(payload) <= UNCOUNTED_FRAME:  # (what unpack_frame does, a call less)
            return codec.unpackb(payload)
        return codec.unpack_frame(payload)
    except SerializationError as exc:
        if reject_one(payload, exc):
            return REJECTED
        raise ProtocolError(f"undecodable frame ({exc})") from exc
    except ProtocolError:
        raise
    except Exception as exc:
        raise undecodable(exc) from exc


def raw_header(payload: bytes | bytearray) -> tuple[Any, int] | None:
    """``(kind, id)`` of a frame read without rebuilding its values, or None if it has none."""
    try:
        raw = unpack_plain_bounded(payload)
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
