"""Values on the wire: errors as msgpack maps and call-chain entries.

The frames that carry them (their kinds and fields) are declared in ``messaging/frames.py``.
An error travels as ``{"type", "args", "message", "tb"}`` and is rebuilt as the same type
where the receiver's type policy allows it, else as ``RemoteGrainError``.
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from typing import Any

from orleanspy.errors import RemoteGrainError, SerializationError
from orleanspy.messaging.codec import Codec, qualified_name
from orleanspy.messaging.types import TypePolicy

__all__ = ["chain_entry", "decode_error", "encode_error", "relative_path"]


def encode_error(codec: Codec, exc: BaseException) -> dict[str, Any]:
    """An exception as a msgpack-able map: type, args (if serialisable), message, traceback
    (its file paths relative to the import path, unless ``codec.traceback_paths``)."""
    te = traceback.TracebackException(type(exc), exc, exc.__traceback__, compact=True)
    if not codec.traceback_paths:
        _strip_paths(te, set())
    tb = "".join(te.format())
    args: Any = list(exc.args)
    try:
        codec.packb(args)
    except SerializationError:
        args = None
    return {"type": qualified_name(type(exc)), "args": args, "message": str(exc), "tb": tb}


def _strip_paths(te: traceback.TracebackException, seen: set[int]) -> None:
    """Make the file names of ``te`` (and of its causes, contexts and group members)
    relative: a reader of the traceback learns modules, lines and functions, not where the
    silo's files lie on its disk."""
    if id(te) in seen:
        return
    seen.add(id(te))
    for frame in te.stack:
        frame.filename = relative_path(frame.filename)
    if getattr(te, "filename", None) is not None:  # a SyntaxError's file
        te.filename = relative_path(te.filename)
    for other in (te.__cause__, te.__context__, *(getattr(te, "exceptions", None) or ())):
        if other is not None:
            _strip_paths(other, seen)


@functools.lru_cache(maxsize=1024)
def relative_path(filename: str) -> str:
    """``filename`` relative to the longest ``sys.path`` entry that holds it (so
    ``orleanspy/runtime/turns.py``, ``myapp/grains.py``); its base name when none does."""
    if not os.path.isabs(filename):
        return filename
    best = ""
    for entry in sys.path:
        root = os.path.abspath(entry or os.curdir).rstrip(os.sep) + os.sep
        if filename.startswith(root) and len(root) > len(best):
            best = root
    return filename[len(best):] if best else os.path.basename(filename)


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
