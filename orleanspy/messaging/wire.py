"""The wire format: length-prefixed msgpack frames, the handshake, requests and responses.

Frame: 4-byte big-endian length N, then N bytes of msgpack. Frames on a connection:

* handshake (client → silo): ``{"v": 1, "cluster": str, "secret": str|None, "client": str}``
* handshake reply: ``{"v": 1, "ok": true, "silo": str}`` or ``{"ok": false, "error": str}``
* request: ``[0 | 1, id, type_name, key, method, args, kwargs|None, timeout|None, chain]``
  (0 = request, 1 = one-way)
* response: ``[2, id, ok, value]``; an error value is ``{"type", "args", "message", "tb"}``
"""

from __future__ import annotations

import traceback
from typing import Any, Final

from orleanspy.errors import RemoteGrainError, SerializationError
from orleanspy.messaging.codec import Codec, qualified_name
from orleanspy.messaging.types import TypePolicy

__all__ = [
    "HEADER",
    "PROTOCOL_VERSION",
    "chain_entry",
    "decode_error",
    "encode_error",
    "frame",
    "response_payload",
]

PROTOCOL_VERSION: Final = 1
HEADER: Final = 4


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def encode_error(codec: Codec, exc: BaseException) -> dict[str, Any]:
    """An exception as a msgpack-able map: type, args (if serialisable), message, traceback."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    args: Any = list(exc.args)
    try:
        codec.packb(args)
    except SerializationError:
        args = None
    return {"type": qualified_name(type(exc)), "args": args, "message": str(exc), "tb": tb}


def decode_error(value: Any, policy: TypePolicy) -> BaseException:
    """Rebuild an exception: the same type where ``policy`` (the codec's) allows it, else
    ``RemoteGrainError`` (with the message and the remote traceback)."""
    if not isinstance(value, dict):
        return RemoteGrainError("unknown", repr(value), "")
    type_name = str(value.get("type", "unknown"))
    message = str(value.get("message", ""))
    tb = str(value.get("tb", ""))
    cls = policy.resolve(type_name, exception=True)
    args = value.get("args")
    if cls is not None and issubclass(cls, BaseException) and args is not None:
        try:
            exc = cls(*args)
        except Exception:
            exc = None
        if exc is not None:
            exc.add_note("remote traceback:\n" + tb.rstrip())
            exc.remote_traceback = tb  # type: ignore[attr-defined]
            return exc
    return RemoteGrainError(type_name.replace(":", "."), message, tb)


def chain_entry(entry: Any) -> tuple[str, int, bool]:
    """One decoded call-chain entry ``[type name, activation id, reentrant]``, checked."""
    if (
        type(entry) is not list
        or len(entry) != 3
        or type(entry[0]) is not str
        or type(entry[1]) is not int
        or type(entry[2]) is not bool
    ):
        raise ValueError(f"bad call-chain entry {entry!r}: expected [str, int, bool]")
    return (entry[0], entry[1], entry[2])


def response_payload(codec: Codec, corr: int, ok: bool, value: Any) -> bytes:
    """``[2, corr, ok, value]``; an unencodable result becomes an encoded error."""
    try:
        if ok:
            try:
                return codec.packb([2, corr, True, value])
            except SerializationError as exc:
                return codec.packb([2, corr, False, encode_error(codec, exc)])
        return codec.packb([2, corr, False, encode_error(codec, value)])
    except Exception as exc:  # even the error does not encode: say so plainly
        return codec.packb([2, corr, False, {
            "type": "orleanspy.errors:InternalError", "args": None,
            "message": f"the reply could not be encoded: {exc!r}", "tb": "",
        }])
