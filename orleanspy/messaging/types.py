"""TypePolicy: which classes a value decoded from bytes may be rebuilt as.

Dataclasses, enums and exceptions travel by ``module:qualname``. Rebuilding one means
finding a class by a name a peer chose, so every codec resolves names through one policy:

* **Nothing is imported.** A name resolves only in a module already in ``sys.modules``, and
  the path to the class is looked up in the module's and classes' ``__dict__`` (``vars``),
  never with ``getattr``: no module ``__getattr__`` (lazy attributes that import), no
  descriptor, no metaclass hook runs.
* **Only allowed classes** (an allow-list policy, the one every network boundary uses —
  gateway, silo port, client): classes of orleanspy itself; every class of a module that
  defines a hosted grain class (or, on a client, a grain interface it made a reference to);
  the types reachable from those classes' method annotations and state dataclasses
  (arguments and return types, through ``list[...]``, ``X | None``, dataclass fields, ...);
  classes marked with ``orleanspy.serializable``; and, for exceptions only, the built-in
  exceptions and asyncio's.
* A **local** policy (``TypePolicy.local()``, the default of a bare ``Codec()``) is for bytes
  this application wrote itself (its stream queues, its reminder table): any class of an
  already imported module, still without importing or ``getattr``.

What does not resolve arrives as a plain value: a dataclass as the dict of its fields, an
enum member as its value, an exception as ``RemoteGrainError`` (message and remote traceback
kept). Each policy keeps its own cache, so a name resolved under one never leaks into another.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Iterable
from typing import Any, Final, TypeVar

__all__ = ["SAFE_EXCEPTION_MODULES", "TypePolicy", "serializable"]

C = TypeVar("C", bound=type)

#: Modules whose exception classes keep their type under every policy.
SAFE_EXCEPTION_MODULES: Final = frozenset({"builtins", "asyncio.exceptions"})
_MARK: Final = "_orleanspy_serializable"
_MAX_DEPTH: Final = 8


def serializable(cls: C) -> C:
    """Allow instances of ``cls`` (a dataclass, enum or exception) to be rebuilt from the
    wire under every policy, wherever it is defined."""
    setattr(cls, _MARK, True)
    return cls


def _own(module: str) -> bool:
    return module == "orleanspy" or module.startswith("orleanspy.")


class TypePolicy:
    """The classes names from bytes may resolve to (see module doc)."""

    __slots__ = ("_cache", "_modules", "_open", "_types")

    def __init__(self, *, open_modules: bool = False) -> None:
        self._open = open_modules
        self._modules: set[str] = set()
        self._types: dict[str, type] = {}
        self._cache: dict[str, type] = {}

    @classmethod
    def local(cls) -> TypePolicy:
        """A policy for bytes this application wrote: any already imported module."""
        return cls(open_modules=True)

    def __repr__(self) -> str:
        kind = "local" if self._open else "allow-list"
        return f"<TypePolicy {kind} modules={len(self._modules)} types={len(self._types)}>"

    # -- what is allowed -------------------------------------------------------------------
    def allow_module(self, module: str) -> None:
        """Allow every class defined in ``module``."""
        self._modules.add(module)

    def allow_type(self, cls: type) -> None:
        """Allow ``cls`` itself."""
        self._types[f"{cls.__module__}:{cls.__qualname__}"] = cls

    def allow_grain_class(self, cls: type, methods: Iterable[str],
                          extra: Iterable[type] = ()) -> None:
        """Allow what a grain class exchanges: its module (and its user base classes'),
        and every type reachable from the annotations of ``methods`` and from ``extra``
        (its state dataclasses)."""
        for klass in cls.__mro__:
            module = klass.__module__
            # typing: Protocol and Generic, the bases of a class that implements a grain interface
            if module not in ("builtins", "typing") and not _own(module):
                self.allow_module(module)
        found: set[type] = set()
        for name in methods:
            fn = cls.__dict__.get(name)
            if fn is None:
                fn = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
            for hint in _hints(fn):
                _reachable(hint, found, 0)
        for tp in extra:
            _reachable(tp, found, 0)
        for tp in found:
            self.allow_type(tp)

    def allows_module(self, module: str) -> bool:
        return self._open or module in self._modules or _own(module)

    # -- resolution ------------------------------------------------------------------------
    def resolve(self, name: str, *, exception: bool = False) -> type | None:
        """The allowed class named ``module:qualname``, or None (never imports)."""
        cls = self._cache.get(name)
        if cls is not None:
            return cls
        cls = self._types.get(name)
        if cls is None:
            cls = _find(name)
            if cls is None:
                return None
            module = name.partition(":")[0]
            if not (self.allows_module(module)
                    or (exception and module in SAFE_EXCEPTION_MODULES)
                    or cls.__dict__.get(_MARK) is True):
                return None
        self._cache[name] = cls
        return cls


def _find(name: str) -> type | None:
    """The class ``module:qualname`` in an already imported module, looked up through
    ``__dict__``s only."""
    module_name, sep, qualname = name.partition(":")
    if not sep or not qualname:
        return None
    obj: Any = sys.modules.get(module_name)
    if obj is None:
        return None
    for part in qualname.split("."):
        try:
            namespace = vars(obj)
        except TypeError:
            return None
        obj = namespace.get(part)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


def _hints(fn: Any) -> list[Any]:
    if fn is None:
        return []
    fn = getattr(fn, "__func__", fn)
    try:
        return list(typing.get_type_hints(fn).values())
    except Exception:  # one unresolvable forward reference: resolve the others one by one
        pass
    annotations = getattr(fn, "__annotations__", None) or {}
    namespace = getattr(fn, "__globals__", {})
    hints = []
    for annotation in annotations.values():
        if isinstance(annotation, str):
            try:  # the application's own annotation, evaluated as get_type_hints would
                annotation = eval(annotation, namespace)
            except Exception:
                continue
        hints.append(annotation)
    return hints


def _reachable(tp: Any, found: set[type], depth: int) -> None:
    if depth > _MAX_DEPTH:
        return
    args = typing.get_args(tp)
    if args or typing.get_origin(tp) is not None:
        for arg in args:
            _reachable(arg, found, depth + 1)
        return
    if not isinstance(tp, type) or tp in found or tp.__module__ == "builtins":
        return
    found.add(tp)
    if dataclasses.is_dataclass(tp):
        try:
            hints = typing.get_type_hints(tp)
        except Exception:
            hints = {f.name: f.type for f in dataclasses.fields(tp) if not isinstance(f.type, str)}
        for hint in hints.values():
            _reachable(hint, found, depth + 1)
