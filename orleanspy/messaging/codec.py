"""msgpack encoding of values, with ext types for the Python types grains exchange.

Supported beyond msgpack's own types: tuple, set, frozenset, UUID, datetime, date, time,
timedelta, Decimal, Enum members, dataclass instances, GrainId, grain references and stream
events with their request context (``ContextEvent``).
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
import gc
import uuid
from collections.abc import Callable, Iterable
from sys import getsizeof
from typing import Any, Final

import msgpack

from orleanspy.errors import ProtocolError, RemoteGrainError, SerializationError
from orleanspy.ids import GrainId
from orleanspy.messaging.context_event import ContextEvent, valid_context
from orleanspy.messaging.types import TypePolicy

__all__ = [
    "DECODE_RATIO",
    "IMMUTABLE_TYPES",
    "MAX_BYTE_COST",
    "PEAK_RATIO",
    "UNCOUNTED_FRAME",
    "Codec",
    "DecodeBudget",
    "is_immutable",
    "pack_array",
    "qualified_name",
    "unpack_plain_bounded",
]

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
EXT_CONTEXT_EVENT: Final = 15

#: How deeply ext values (tuples, sets, dataclasses, ...) may nest in one decoded value.
MAX_EXT_DEPTH: Final = 64
#: A frame of n bytes from a peer decodes to at most ``DECODE_RATIO * n`` bytes of Python
#: objects (``DecodeBudget``), or to at most ``UNCOUNTED_FRAME * MAX_BYTE_COST`` bytes when
#: it is no longer than ``UNCOUNTED_FRAME`` (such frames are decoded without counting).
#: While it decodes, the item slots of the containers still open (8 bytes an item, each
#: item backed by a byte of the frame) come on top: the peak is within ``PEAK_RATIO * n``.
#: Decoding runs on the event loop, one frame at a time, so peaks do not add up.
DECODE_RATIO: Final = 32
PEAK_RATIO: Final = DECODE_RATIO + 8
UNCOUNTED_FRAME: Final = 256
#: The most one encoded byte can cost decoded, without counting: nested maps of one entry
#: each (2 bytes a level) cost 287 bytes a level; an empty set (ext, 3 bytes) 232; an
#: empty map (1 byte) 72. Nested array headers of an uncounted frame, each declaring as
#: many items as the frame has bytes, reserve at most 85 x 2 KiB while it decodes.
MAX_BYTE_COST: Final = 144
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


class DecodeBudget:
    """The bytes of Python objects one frame may decode to: ``DECODE_RATIO`` x its size.

    msgpack calls ``on_list`` / ``on_map`` for each array and map once its items are
    decoded, and the codec's counted ext hook calls ``on_value``: each charges the object's
    size as CPython reports it (``sys.getsizeof``, plus the allocator's rounding), and the
    items that are new objects (strings and bytes longer than one, ints outside the cached
    range, floats); containers and ext values inside were charged when they completed. Past
    the budget decoding stops with ``ProtocolError``, so the worst shapes (many empty
    arrays, maps, sets; many short strings) are cut off at the bound instead of growing to
    70-80 x the frame.
    """

    __slots__ = ("keys", "left", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.left = DECODE_RATIO * size
        self.keys: set[str] = set()  # the str map keys met (interned: one object each)

    def _spent(self) -> None:
        raise ProtocolError(
            f"a frame of {self.size} bytes decodes to more than {DECODE_RATIO} times its size "
            "(too many small containers, strings or ext values for its length); send such "
            "data as bytes, or in fewer, larger values"
        )

    def on_list(self, value: list[Any]) -> list[Any]:
        # the object (56 bytes) and its item array each rounded up to 16 bytes by pymalloc
        self.left -= getsizeof(value) + 8 + (len(value) & 1) * 8 + _items(value)
        if self.left < 0:
            self._spent()
        return value

    def on_map(self, value: dict[Any, Any]) -> dict[Any, Any]:
        cost = getsizeof(value) + 16 + _items(value.values())
        fresh = value.keys() - self.keys
        if fresh:
            for key in fresh:
                if type(key) is str:
                    # msgpack interns str keys: each distinct one is a single object, with a
                    # slot in the interpreter's table of interned strings (up to 72 bytes
                    # with its index and free room; the table keeps its size) and one in
                    # ``keys``; a key met again costs nothing more
                    self.keys.add(key)
                    cost += getsizeof(key) + 15 + 72 + 48
                else:
                    cost += _items((key,))
        self.left -= cost
        if self.left < 0:
            self._spent()
        return value

    def on_value(self, value: Any) -> None:
        """An ext value (tuple, set, dataclass, exception, reference, ...) was built."""
        t = type(value)
        if t is tuple or t in _CHARGED or value is None:
            return  # a tuple costs what the list it was built from was charged
        cost = getsizeof(value) + 16
        if t is msgpack.ExtType:
            cost += getsizeof(value.data)
        attrs = getattr(value, "__dict__", None)
        if attrs is not None:
            cost += getsizeof(attrs) + 16 + _items(attrs.values())
        if isinstance(value, BaseException):
            cost += 256  # its args tuple, traceback and notes slots
        self.left -= cost
        if self.left < 0:
            self._spent()


#: Values an ext value may decode to that cost nothing more: scalars (charged, when they
#: are objects of their own, with the container that holds them) and built-in containers
#: (charged by ``on_list`` / ``on_map``).
_CHARGED: Final = frozenset({bool, int, float, str, bytes, list, dict})


def _items(values: Iterable[Any]) -> int:
    """The bytes of the scalars in ``values`` that are objects of their own (not one of
    CPython's cached small ints, one-character strings or empty values)."""
    cost = 0
    for x in values:
        t = type(x)
        if t is str or t is bytes:
            if len(x) > 1 or (t is str and x > "\xff"):
                cost += getsizeof(x) + 15
        elif t is int:
            if not -5 <= x <= 256:
                cost += getsizeof(x) + 15
        elif t is float:
            cost += 32
    return cost


def _no_ext(code: int, data: bytes) -> Any:
    return None


def _backed(data: bytes | bytearray) -> None:
    """Raise unless every length ``data`` declares is backed by its bytes. msgpack allocates
    an array's item slots when it reads the header, so a frame of nested headers that each
    declare a frame's length of items would otherwise reserve that many slots per level
    before it fails; ``skip`` walks the structure without building anything. A frame with
    no header of more than 15 items needs no walk: its open containers reserve at most 15
    slots each, along one path no deeper than msgpack's nesting limit.

    Raises:
        ValueError: the frame ends before its declared items (or nests too deeply).
    """
    if not (b"\xdc" in data or b"\xdd" in data or b"\xde" in data or b"\xdf" in data):
        return
    unpacker = msgpack.Unpacker(max_buffer_size=len(data))
    unpacker.feed(data)
    try:
        unpacker.skip()
    except msgpack.OutOfData:
        raise ValueError("the frame ends before the items it declares") from None


def unpack_plain_bounded(data: bytes | bytearray) -> Any:
    """``data`` decoded as plain msgpack (ext values come out as None) within the decode
    bound (``DecodeBudget``): for frames of peers that have not authenticated, and frame
    headers that hold no ext value.

    Raises:
        ProtocolError: not decodable, or beyond the bound.
    """
    try:
        if len(data) <= UNCOUNTED_FRAME:
            return msgpack.unpackb(data, ext_hook=_no_ext, raw=False, strict_map_key=False)
        _backed(data)
        budget = DecodeBudget(len(data))
        collecting = gc.isenabled()
        gc.disable()  # see Codec.unpack_frame
        try:
            return msgpack.unpackb(data, ext_hook=_no_ext, raw=False, strict_map_key=False,
                                   list_hook=budget.on_list, object_hook=budget.on_map)
        finally:
            if collecting:
                gc.enable()
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError(f"undecodable msgpack frame ({exc.__class__.__name__})") from exc


class Codec:
    """Encodes and decodes values; ``reference_factory`` rebuilds grain references;
    ``policy`` decides which classes names resolve to (default: ``TypePolicy.local()``, for
    bytes this application wrote; every network boundary passes an allow-list policy);
    ``traceback_paths``: error tracebacks keep absolute file paths (default False)."""

    __slots__ = (
        "_budget", "_depth", "_packer", "policy", "reference_factory", "traceback_paths",
    )

    def __init__(
        self,
        reference_factory: Callable[[str, GrainId], Any] | None = None,
        *,
        policy: TypePolicy | None = None,
    ) -> None:
        self.reference_factory = reference_factory
        self._depth = 0
        self._budget: DecodeBudget | None = None
        #: Whether the tracebacks of the errors it encodes (``messaging/wire.py``) keep
        #: absolute file paths (``SiloOptions.traceback_paths``); else module-relative ones.
        self.traceback_paths = False
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
        if t is ContextEvent:
            return msgpack.ExtType(EXT_CONTEXT_EVENT, self._nested([obj.context, obj.item]))
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
        budget = self._budget
        try:
            if budget is None:
                return msgpack.unpackb(
                    data, ext_hook=self._ext_hook, raw=False, strict_map_key=False,
                    use_list=True,
                )
            if len(data) > UNCOUNTED_FRAME:
                _backed(data if type(data) is not memoryview else bytes(data))
            return msgpack.unpackb(
                data, ext_hook=self._counted_ext, raw=False, strict_map_key=False,
                use_list=True, list_hook=budget.on_list, object_hook=budget.on_map,
            )
        except RecursionError as exc:
            raise SerializationError("cannot decode: the value is nested too deeply") from exc

    def unpack_frame(self, data: bytes | bytearray) -> Any:
        """``unpackb`` of bytes a peer sent, within the decode bound: a frame longer than
        ``UNCOUNTED_FRAME`` decodes with a ``DecodeBudget`` of ``DECODE_RATIO`` x its size.

        Raises:
            ProtocolError: the frame decodes beyond the bound (close the connection).
            SerializationError: as ``unpackb``.
        """
        if len(data) <= UNCOUNTED_FRAME or self._budget is not None:
            return self.unpackb(data)
        self._budget = DecodeBudget(len(data))
        # Decoding builds no reference cycle, and a frame of many containers would run the
        # cycle collector over all of them again and again (most of the CPU it costs).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self.unpackb(data)
        finally:
            self._budget = None
            if collecting:
                gc.enable()

    def _counted_ext(self, code: int, data: bytes) -> Any:
        value = self._ext_hook(code, data)
        budget = self._budget
        if budget is not None:
            budget.on_value(value)
        return value

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
            if code == EXT_CONTEXT_EVENT:
                context, item = self.unpackb(data)
                return ContextEvent(item, valid_context(context))
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
