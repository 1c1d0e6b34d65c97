"""Identities: GrainId (cached hash), SiloAddress (interned). Immutable and slotted."""

from __future__ import annotations

import threading
import uuid
import weakref
from typing import Any, Final, TypeAlias, cast

__all__ = ["GrainId", "GrainKey", "SiloAddress", "grain_id", "normalize_key"]

GrainKey: TypeAlias = str | int | uuid.UUID | tuple["GrainKey", ...]

_SCALARS: Final = (str, int, uuid.UUID)


def normalize_key(key: Any) -> GrainKey:
    """Validate a grain key: str, int, UUID, or a (nested) tuple of those."""
    t = type(key)
    if t is str or t is int or t is uuid.UUID:
        return cast(GrainKey, key)
    if isinstance(key, bool):
        raise TypeError("a grain key cannot be a bool; use an int or a str")
    if isinstance(key, _SCALARS):
        return cast(GrainKey, key)
    if isinstance(key, (tuple, list)):
        return tuple(normalize_key(k) for k in key)
    raise TypeError(
        f"a grain key must be a str, int, UUID or a tuple of those, not {type(key).__name__}"
    )


def _key_text(key: GrainKey) -> str:
    if isinstance(key, tuple):
        return "(" + ",".join(_key_text(k) for k in key) + ")"
    return str(key)


def _canonical_key(key: GrainKey) -> str:
    if isinstance(key, tuple):
        return "t(" + ",".join(_canonical_key(k) for k in key) + ")"
    if isinstance(key, int):
        return f"i:{key}"
    if isinstance(key, uuid.UUID):
        return f"u:{key}"
    return "s:" + key.replace("\\", "\\\\").replace(",", "\\,").replace(")", "\\)")


class GrainId:
    """The identity of a grain: its type name and its key."""

    __slots__ = ("_hash", "key", "type_name")

    type_name: str
    key: GrainKey
    _hash: int

    def __init__(self, type_name: str, key: GrainKey) -> None:
        # The slots' own setters: a third of what object.__setattr__ costs (the class
        # refuses plain attribute assignment).
        _set_type_name(self, type_name)
        _set_key(self, key)
        _set_hash(self, hash((type_name, key)))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("GrainId is immutable")

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not GrainId:
            return NotImplemented
        return (
            self._hash == other._hash
            and self.type_name == other.type_name
            and self.key == other.key
        )

    def __repr__(self) -> str:
        return f"GrainId({self.type_name!r}, {self.key!r})"

    def __str__(self) -> str:
        return f"{self.type_name}/{_key_text(self.key)}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (GrainId, (self.type_name, self.key))

    def canonical(self) -> str:
        """A text form that tells ``1`` from ``"1"``: the key under which storage keeps a grain."""
        return f"{self.type_name}/{_canonical_key(self.key)}"


_set_type_name = GrainId.__dict__["type_name"].__set__
_set_key = GrainId.__dict__["key"].__set__
_set_hash = GrainId.__dict__["_hash"].__set__

# Grain ids of plain keys, by (type name, key): a reference made per call and a request
# decoded from a connection then cost a dict lookup, not a GrainId, and the activation table
# finds the very object it holds (no ``__eq__`` call). Bounded, cleared when full, so a peer
# naming ever new keys cannot grow it.
_grain_id_cache: dict[tuple[str, Any], GrainId] = {}
_GRAIN_ID_CACHE_MAX: Final = 65_536


def grain_id(type_name: str, key: Any) -> GrainId:
    """``GrainId(type_name, key)`` after ``normalize_key(key)``: the same object for the same
    str, int or UUID key (a pure function of its parts, so sharing it is safe)."""
    t = type(key)
    if t is str or t is int or t is uuid.UUID:  # never equal across types: safe to share
        parts = (type_name, key)
        gid = _grain_id_cache.get(parts)
        if gid is None:
            if len(_grain_id_cache) >= _GRAIN_ID_CACHE_MAX:
                _grain_id_cache.clear()
            gid = _grain_id_cache[parts] = GrainId(type_name, key)
        return gid
    return GrainId(type_name, normalize_key(key))


class SiloAddress:
    """Where a silo listens, plus a generation that tells restarts apart.

    Interned: while an address is referenced, every ``SiloAddress(host, port, generation)``
    of it is that one object, so equality and hashing are identity and cost no Python call
    (each routed call compares and looks up silos).
    """

    __slots__ = ("__weakref__", "generation", "host", "port")

    host: str
    port: int
    generation: int

    def __new__(cls, host: str, port: int, generation: int = 0) -> SiloAddress:
        parts = (host, port, generation)
        with _silo_address_lock:  # membership reads build addresses in worker threads
            obj = _silo_address_cache.get(parts)
            if obj is None:
                obj = object.__new__(cls)
                _set_host(obj, host)
                _set_port(obj, port)
                _set_generation(obj, generation)
                _silo_address_cache[parts] = obj
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("SiloAddress is immutable")

    def __repr__(self) -> str:
        return f"SiloAddress({self.host!r}, {self.port}, {self.generation})"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}@{self.generation}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (SiloAddress, (self.host, self.port, self.generation))


_set_host = SiloAddress.__dict__["host"].__set__
_set_port = SiloAddress.__dict__["port"].__set__
_set_generation = SiloAddress.__dict__["generation"].__set__
# The live addresses by (host, port, generation): one object per address (see SiloAddress).
# Weak: an address no one refers to any more leaves, so the table follows the cluster's size.
_silo_address_cache: weakref.WeakValueDictionary[tuple[Any, Any, Any], SiloAddress] = (
    weakref.WeakValueDictionary()
)
_silo_address_lock = threading.Lock()
