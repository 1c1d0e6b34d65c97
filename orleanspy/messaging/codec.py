"""msgpack encoding of values, with ext types for the Python types grains exchange.

Supported beyond msgpack's own types: tuple, set, frozenset, UUID, datetime, date, time,
timedelta, Decimal, Enum members, dataclass instances, GrainId and grain references.
Dataclasses, enums and exceptions are encoded by ``module:qualname`` and resolved on the
other side through the codec's ``TypePolicy`` (``messaging/types.py``: never an import, only
allowed classes); one that does not resolve arrives as a plain value (a dataclass as the dict
of its fields, an enum member as its value, an exception as ``RemoteGrainError``). Dataclass
fields travel by name, so adding a field with a default stays compatible. Nothing is ever
pickled.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import uuid
from collections.abc import Callable
from typing import Any, Final

import msgpack

from orleanspy.errors import RemoteGrainError, SerializationError
from orleanspy.ids import GrainId
from orleanspy.messaging.types import TypePolicy

__all__ = ["IMMUTABLE_TYPES", "Codec", "is_immutable", "pack_array", "qualified_name"]

def pack_array(items: list[bytes]) -> bytes:
    """The msgpack array of ``items``, each already encoded: what packing the decoded list
    would give, without decoding it."""
    n = len(items)
    if n < 16:
        header = bytes((0x90 | n,))
    elif n < 1 << 16:
        header = b"\xdc" + n.to_bytes(2, "big")
    else:
        header = b"\xdd" + n.to_bytes(4, "big")
    return header + b"".join(items)


EXT_TUPLE: Final = 1
EXT_UUID: Final = 2
EXT_DATETIME: Final = 3
EXT_DATE: Final = 4
EXT_TIME: Final = 5
EXT_TIMEDELTA: Final = 6
EXT_ENUM: Final = 7
EXT_DATACLASS: Final = 8
EXT_SET: Final = 9
EXT_FROZENSET: Final = 10
EXT_REFERENCE: Final = 11
EXT_DECIMAL: Final = 12
EXT_GRAIN_ID: Final = 13
EXT_EXCEPTION: Final = 14

#: How deeply ext values (tuples, sets, dataclasses, ...) may nest in one decoded value.
MAX_EXT_DEPTH: Final = 64
IMMUTABLE_TYPES: Final = frozenset({int, str, float, bool, type(None), bytes})
_IMMUTABLE_SCALARS: Final = IMMUTABLE_TYPES

_name_cache: dict[type, str] = {}
_dc_fields_cache: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def is_immutable(value: Any) -> bool:
    """True for values that need no copy to be shared between grains (scalars)."""
    return type(value) in _IMMUTABLE_SCALARS


def qualified_name(cls: type) -> str:
    name = _name_cache.get(cls)
    if name is None:
        name = f"{cls.__module__}:{cls.__qualname__}"
        _name_cache[cls] = name
    return name


def _dataclass_fields(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cached = _dc_fields_cache.get(cls)
    if cached is None:
        fields = dataclasses.fields(cls)
        cached = (
            tuple(f.name for f in fields if f.init),
            tuple(f.name for f in fields if not f.init),
        )
        _dc_fields_cache[cls] = cached
    return cached


class Codec:
    """Encodes and decodes values; ``reference_factory`` rebuilds grain references;
    ``policy`` decides which classes names resolve to (default: ``TypePolicy.local()``, for
    bytes this application wrote; every network boundary passes an allow-list policy)."""

    __slots__ = ("_depth", "_packer", "policy", "reference_factory")

    def __init__(
        self,
        reference_factory: Callable[[str, GrainId], Any] | None = None,
        *,
        policy: TypePolicy | None = None,
    ) -> None:
        self.reference_factory = reference_factory
        self._depth = 0
        self.policy = policy if policy is not None else TypePolicy.local()
        self._packer = msgpack.Packer(
            default=self._default, strict_types=True, use_bin_type=True, autoreset=True
        )

    # -- encode --------------------------------------------------------------------------
    def packb(self, obj: Any) -> bytes:
        try:
            return self._packer.pack(obj)  # type: ignore[no-any-return]
        except SerializationError:
            self._packer.reset()
            raise
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            self._packer.reset()
            raise SerializationError(f"cannot serialise with msgpack: {exc!r}") from exc

    def _nested(self, obj: Any) -> bytes:
        return msgpack.packb(obj, default=self._default, strict_types=True, use_bin_type=True)  # type: ignore[no-any-return]

    def _default(self, obj: Any) -> Any:
        t = type(obj)
        if t is tuple:
            return msgpack.ExtType(EXT_TUPLE, self._nested(list(obj)))
        if isinstance(obj, enum.Enum):
            return msgpack.ExtType(EXT_ENUM, self._nested([qualified_name(t), obj.value]))
        if t is uuid.UUID:
            return msgpack.ExtType(EXT_UUID, obj.bytes)
        if t is _dt.datetime:
            return msgpack.ExtType(EXT_DATETIME, obj.isoformat().encode())
        if t is _dt.date:
            return msgpack.ExtType(EXT_DATE, obj.isoformat().encode())
        if t is _dt.time:
            return msgpack.ExtType(EXT_TIME, obj.isoformat().encode())
        if t is _dt.timedelta:
            return msgpack.ExtType(
                EXT_TIMEDELTA, self._nested([obj.days, obj.seconds, obj.microseconds])
            )
        if t is decimal.Decimal:
            return msgpack.ExtType(EXT_DECIMAL, str(obj).encode())
        if t is set:
            return msgpack.ExtType(EXT_SET, self._nested(list(obj)))
        if t is frozenset:
            return msgpack.ExtType(EXT_FROZENSET, self._nested(list(obj)))
        if t is GrainId:
            return msgpack.ExtType(EXT_GRAIN_ID, self._nested([obj.type_name, obj.key]))
        ref_state = getattr(obj, "__grain_reference_state__", None)
        if ref_state is not None:
            cls_name, grain_id = ref_state()
            return msgpack.ExtType(
                EXT_REFERENCE, self._nested([cls_name, grain_id.type_name, grain_id.key])
            )
        if isinstance(obj, BaseException):
            args: Any = list(obj.args)
            try:
                self._nested(args)
            except (SerializationError, TypeError, ValueError, OverflowError):
                args = None
            return msgpack.ExtType(
                EXT_EXCEPTION, self._nested([qualified_name(t), args, str(obj)])
            )
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            init_names, other_names = _dataclass_fields(t)
            values = {name: getattr(obj, name) for name in init_names}
            for name in other_names:
                values[name] = getattr(obj, name)
            return msgpack.ExtType(EXT_DATACLASS, self._nested([qualified_name(t), values]))
        if isinstance(obj, dict):
            return dict(obj)
        if isinstance(obj, list):
            return list(obj)
        if isinstance(obj, (str, int, float, bytes)):
            if isinstance(obj, str):
                return str(obj)
            if isinstance(obj, bytes):
                return bytes(obj)
            return int(obj) if isinstance(obj, int) else float(obj)
        raise SerializationError(
            f"cannot serialise a value of type {t.__module__}.{t.__qualname__} with msgpack; "
            "use a dataclass, enum, tuple, list, dict or scalar (see docs/serialization.md)"
        )

    # -- decode --------------------------------------------------------------------------
    def unpackb(self, data: bytes | bytearray | memoryview) -> Any:
        try:
            return msgpack.unpackb(
                data, ext_hook=self._ext_hook, raw=False, strict_map_key=False, use_list=True
            )
        except RecursionError as exc:
            raise SerializationError("cannot decode: the value is nested too deeply") from exc

    def _ext_hook(self, code: int, data: bytes) -> Any:
        # Each ext value (tuple, set, dataclass, ...) is decoded by a nested msgpack call, and
        # every level costs a C unpacker frame on the thread's stack: bound the depth so that
        # a small hostile frame of nested ext values fails to decode instead of overflowing
        # the C stack (which no Python handler can catch).
        depth = self._depth
        if depth >= MAX_EXT_DEPTH:
            raise SerializationError(
                f"cannot decode: ext values (tuples, sets, dataclasses...) nested more than "
                f"{MAX_EXT_DEPTH} levels deep"
            )
        self._depth = depth + 1
        try:
            if code == EXT_TUPLE:
                return tuple(self.unpackb(data))
            if code == EXT_UUID:
                return uuid.UUID(bytes=data)
            if code == EXT_DATETIME:
                return _dt.datetime.fromisoformat(data.decode())
            if code == EXT_DATE:
                return _dt.date.fromisoformat(data.decode())
            if code == EXT_TIME:
                return _dt.time.fromisoformat(data.decode())
            if code == EXT_TIMEDELTA:
                d, s, us = self.unpackb(data)
                return _dt.timedelta(days=d, seconds=s, microseconds=us)
            if code == EXT_DECIMAL:
                return decimal.Decimal(data.decode())
            if code == EXT_SET:
                return set(self.unpackb(data))
            if code == EXT_FROZENSET:
                return frozenset(self.unpackb(data))
            if code == EXT_ENUM:
                name, value = self.unpackb(data)
                cls = self.policy.resolve(name)
                if cls is None or not issubclass(cls, enum.Enum):
                    return value
                return cls(value)
            if code == EXT_DATACLASS:
                name, values = self.unpackb(data)
                cls = self.policy.resolve(name)
                if cls is None or not dataclasses.is_dataclass(cls):
                    return values
                init_names, other_names = _dataclass_fields(cls)
                obj = cls(**{k: values[k] for k in init_names if k in values})
                for k in other_names:
                    if k in values:
                        object.__setattr__(obj, k, values[k])
                return obj
            if code == EXT_EXCEPTION:
                name, args, message = self.unpackb(data)
                cls = self.policy.resolve(name, exception=True)
                if cls is not None and issubclass(cls, BaseException) and args is not None:
                    try:
                        return cls(*args)
                    except Exception:
                        pass
                return RemoteGrainError(name.replace(":", "."), message, "")
            if code == EXT_GRAIN_ID:
                type_name, key = self.unpackb(data)
                return GrainId(type_name, key)
            if code == EXT_REFERENCE:
                cls_name, type_name, key = self.unpackb(data)
                grain_id = GrainId(type_name, key)
                if self.reference_factory is None:
                    return grain_id
                return self.reference_factory(cls_name, grain_id)
            return msgpack.ExtType(code, data)
        finally:
            self._depth = depth
