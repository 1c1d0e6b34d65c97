"""Bodies: a request's arguments and a reply's value as bytes inside a frame.

Arguments and results travel as a ``body`` of bytes inside a frame (``messaging/frames.py``),
so a silo that only routes a request or a reply reads the header and forwards the body
untouched; only the silo that runs the grain decodes the arguments (``open_body``, with its
type policy), and only the caller decodes the result (``read_value``). A reply still in its
bytes travels through a silo as ``Encoded``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import msgpack

from orleanspy.errors import ProtocolError, SerializationError
from orleanspy.messaging.codec import UNCOUNTED_FRAME, Codec
from orleanspy.messaging.frames import RESPONSE, undecodable
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Message
from orleanspy.messaging.wire import decode_error, encode_error

__all__ = [
    "EMPTY_BODY",
    "Encoded",
    "encode_body",
    "open_body",
    "read_value",
    "reply_frame",
    "value_body",
]

_plain_packb: Final[Callable[[Any], bytes]] = msgpack.Packer(use_bin_type=True, autoreset=True).pack


class Encoded(tuple[bytes]):
    """``(body,)``: a reply value still in the bytes another silo sent (a ``Response``
    body), forwarded untouched by a silo that only routes the call (made without a Python
    call, ``Encoded((body,))``)."""

    __slots__ = ()

    @property
    def body(self) -> bytes:
        return self[0]


#: The body of a call without arguments: ``[[], None]``.
EMPTY_BODY: Final = _plain_packb([[], None])


def encode_body(codec: Codec, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any] | None
                ) -> bytes:
    """The body of a request: the msgpack of ``[args, kwargs]``.

    Raises:
        SerializationError: an argument cannot be encoded.
    """
    if not args and not kwargs:
        return EMPTY_BODY
    return codec.packb([list(args), kwargs])


def open_body(codec: Codec, msg: Message) -> None:
    """Decode the body of ``msg`` into its arguments, with ``codec``'s type policy (the silo
    that runs the grain calls this, once). A client's arguments decode within the frame
    bound (``DecodeBudget``); a silo's, proven by the cluster key, as plain msgpack.

    Raises:
        SerializationError: a value cannot be rebuilt here (answer that one call).
        ProtocolError: the body is not ``[list, map | None]`` msgpack.
    """
    body = msg.body
    assert body is not None
    msg.body = None
    if body == EMPTY_BODY:
        msg.args = []
        msg.kwargs = None
        return
    try:
        value = (codec.unpackb(body)
                 if len(body) <= UNCOUNTED_FRAME or not msg.flags & FLAG_FROM_CLIENT
                 else codec.unpack_frame(body))
    except (SerializationError, ProtocolError) as exc:
        raise type(exc)(f"the silo cannot decode this request's arguments: {exc}") from exc
    except Exception as exc:
        raise undecodable(exc) from exc
    if (type(value) is not list or len(value) != 2 or type(value[0]) is not list
            or not (value[1] is None or type(value[1]) is dict)):
        raise ProtocolError("a request body must be [args, kwargs | None]")
    msg.args = value[0]
    msg.kwargs = value[1]


def value_body(codec: Codec, ok: bool, value: Any) -> tuple[bool, bytes]:
    """``(ok, body)`` of a reply: an unencodable result becomes an encoded error."""
    try:
        if ok:
            try:
                return True, codec.packb(value)
            except SerializationError as exc:
                return False, codec.packb(encode_error(codec, exc))
        return False, codec.packb(encode_error(codec, value))
    except Exception as exc:  # even the error does not encode: say so plainly
        return False, codec.packb({
            "type": "orleanspy.errors:InternalError", "args": None,
            "message": f"the reply could not be encoded: {exc!r}", "tb": "",
        })


def reply_frame(codec: Codec, corr: int, ok: bool, value: Any) -> bytes:
    """The ``Response`` frame answering ``corr`` with ``value`` (an ``Encoded`` value is
    forwarded as it is)."""
    if type(value) is Encoded:
        return _plain_packb([RESPONSE, corr, ok, value[0]])
    if ok:
        try:
            return _plain_packb([RESPONSE, corr, True, codec.packb(value)])
        except SerializationError:
            pass  # value_body answers the error
    ok, body = value_body(codec, ok, value)
    return _plain_packb([RESPONSE, corr, ok, body])


def read_value(codec: Codec, ok: bool, body: bytes) -> tuple[bool, Any]:
    """``(ok, value)`` of a reply body; a body that cannot be decoded here fails that call
    only (``(False, SerializationError | ProtocolError)``). Replies come from silos (a
    client's cluster, or a peer proven by the cluster key): plain msgpack, no frame bound."""
    try:
        value = codec.unpackb(body)
    except SerializationError as exc:
        return False, SerializationError(f"the result cannot be decoded here: {exc}")
    except ProtocolError as exc:
        return False, exc
    except Exception as exc:
        return False, undecodable(exc)
    if ok:
        return True, value
    return False, decode_error(value, codec.policy)
