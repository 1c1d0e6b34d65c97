"""Values on the wire: errors as msgpack maps and call-chain entries.

The frames that carry them (their kinds and fields) are declared in ``messaging/frames.py``.
An error travels as ``{"type", "args", "message", "tb"}`` and is rebuilt as the same type
where the receiver's type policy allows it, else as ``RemoteGrainError``.
"""

from __future__ import annotations

import traceback
from typing import Any

from orleanspy.errors import RemoteGrainError, SerializationError
from orleanspy.messaging.codec import Codec, qualified_name
from orleanspy.messaging.types import TypePolicy

__all__ = ["chain_entry", "decode_error", "encode_error"]


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
