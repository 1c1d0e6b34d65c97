"""GrainProxy: what a grain reference is at run time, a proxy whose attribute calls become
grain calls (caller → message).

A proxy class is generated once per grain class or grain interface with one real method per
grain method, so a call costs an ordinary method call plus the runtime's ``call``.
``GrainProxy`` is internal: code names the type of a reference ``GrainRef[G]``
(``orleanspy.grains.reference``), which ``make_reference`` returns.
"""

from __future__ import annotations

import uuid
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any, Final, Protocol, Self, TypeVar, cast, overload

from orleanspy.grains.interface import class_info
from orleanspy.grains.observer import OBSERVER_HUB_TYPE, OBSERVER_TYPE, observer_methods
from orleanspy.grains.reference import GrainRef
from orleanspy.grains.streamed import StreamedResponse
from orleanspy.ids import GrainId, GrainKey, normalize_key
from orleanspy.ids import grain_id as intern_grain_id
from orleanspy.messaging.codec import qualified_name
from orleanspy.messaging.message import FLAG_STREAMED

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["GrainProxy", "References", "RuntimeClient", "make_reference"]

G = TypeVar("G")
class RuntimeClient(Protocol):
    """What a reference needs from its runtime (a silo or a ClusterClient)."""

    async def call(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        timeout: float | None,
    ) -> Any: ...

    async def send_one_way(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
    ) -> None: ...


class GrainProxy:
    """A reference to a grain: ``await ref.method(...)`` calls it wherever it lives."""

    __slots__ = ("_class_name", "_grain_id", "_runtime", "_timeout")

    def __init__(
        self,
        runtime: RuntimeClient,
        grain_id: GrainId,
        class_name: str = "",
        timeout: float | None = None,
    ) -> None:
        self._runtime = runtime
        self._grain_id = grain_id
        self._class_name = class_name
        self._timeout = timeout

    @property
    def grain_id(self) -> GrainId:
        return self._grain_id

    @property
    def key(self) -> GrainKey:
        return self._grain_id.key

    def with_timeout(self, seconds: float) -> Self:
        """A copy of this reference whose calls time out after ``seconds``."""
        if seconds <= 0:
            raise ValueError(f"with_timeout({seconds}): the timeout must be > 0")
        return type(self)(self._runtime, self._grain_id, self._class_name, seconds)

    async def invoke(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a method by name (for tools and for classes not importable here)."""
        return await self._runtime.call(
            self._grain_id, method, args, kwargs or None, self._timeout
        )

    def invoke_streamed(self, method: str, *args: Any, **kwargs: Any) -> StreamedResponse:
        """Call an async generator method by name: an async iterator over its items."""
        return StreamedResponse(self._runtime, self._grain_id, method, args, kwargs or None,
                                self._timeout)

    async def invoke_one_way(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send a one-way call by name: returns once enqueued, without a result."""
        await self._runtime.send_one_way(self._grain_id, method, args, kwargs or None)

    def __grain_reference_state__(self) -> tuple[str, GrainId]:
        return self._class_name, self._grain_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GrainProxy) and other._grain_id == self._grain_id

    def __hash__(self) -> int:
        return hash(self._grain_id)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._grain_id}>"


def _call_method(name: str) -> Callable[..., Any]:
    # A plain function returning the runtime's coroutine: one coroutine per call, not two.
    def method(self: GrainProxy, *args: Any, **kwargs: Any) -> Any:
        return self._runtime.call(self._grain_id, name, args, kwargs or None, self._timeout)

    method.__name__ = method.__qualname__ = name
    return method


def _one_way_method(name: str) -> Callable[..., Any]:
    def method(self: GrainProxy, *args: Any, **kwargs: Any) -> Any:
        return self._runtime.send_one_way(self._grain_id, name, args, kwargs or None)

    method.__name__ = method.__qualname__ = name
    return method


def _streamed_method(name: str) -> Callable[..., Any]:
    def method(self: GrainProxy, *args: Any, **kwargs: Any) -> Any:
        return StreamedResponse(self._runtime, self._grain_id, name, args, kwargs or None,
                                self._timeout)

    method.__name__ = method.__qualname__ = name
    return method


def reference_class(cls: type) -> type[GrainProxy]:
    """The reference class of a grain class: one real method per grain method, generated on
    first use and kept with the class's metadata (``GrainClassInfo.reference``)."""
    info = class_info(cls)
    ref_cls = info.reference
    if ref_cls is None:
        ns: dict[str, Any] = {"__slots__": ()}
        for name, m in info.methods.items():
            if m.one_way:
                ns[name] = _one_way_method(name)
            elif m.flags & FLAG_STREAMED:
                ns[name] = _streamed_method(name)
            else:
                ns[name] = _call_method(name)
        ref_cls = info.reference = type(f"{cls.__name__}Reference", (GrainProxy,), ns)
    return cast("type[GrainProxy]", ref_cls)


class ObserverProxy(GrainProxy):
    """A reference to a client's observer (``grains.observer``): each method is a one-way
    call queued for the client (any attribute, for an untyped one)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return partial(_notify, self, name)


def _notify(ref: GrainProxy, name: str, *args: Any, **kwargs: Any) -> Any:
    client, _, observer_id = str(ref._grain_id.key).partition("/")
    return ref._runtime.send_one_way(GrainId(OBSERVER_HUB_TYPE, client), "notify",
                                     (observer_id, name, list(args), kwargs or None), None)


def _observer_method(name: str) -> Callable[..., Any]:
    def method(self: GrainProxy, *args: Any, **kwargs: Any) -> Any:
        return _notify(self, name, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


@lru_cache(maxsize=256)
def _observer_class(interface: type | None) -> type[ObserverProxy]:
    if interface is None:
        return ObserverProxy
    ns: dict[str, Any] = {"__slots__": ()}
    for name in observer_methods(interface):
        ns[name] = _observer_method(name)
    return type(f"{interface.__name__}Observer", (ObserverProxy,), ns)


class _DynamicReference(GrainProxy):
    """A reference to a grain type known only by name: any attribute is a method."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)

        async def method(*args: Any, **kwargs: Any) -> Any:
            return await self.invoke(name, *args, **kwargs)

        return method


@overload
def make_reference(
    runtime: RuntimeClient, grain_class: type[G], key: Any, grain_id: GrainId | None = None
) -> GrainRef[G]: ...
@overload
def make_reference(
    runtime: RuntimeClient, grain_class: str, key: Any, grain_id: GrainId | None = None
) -> GrainRef[Any]: ...
def make_reference(
    runtime: RuntimeClient, grain_class: type[Any] | str, key: Any, grain_id: GrainId | None = None
) -> GrainRef[Any]:
    """Build a reference; ``grain_class`` may be a class or a grain type name (untyped)."""
    ref: GrainProxy
    if grain_id is not None and grain_id.type_name == OBSERVER_TYPE:
        interface: type | None = grain_class if isinstance(grain_class, type) else None
        return cast("GrainRef[Any]", _observer_class(interface)(
            runtime, grain_id, qualified_name(interface) if interface is not None else ""))
    if isinstance(grain_class, str):
        gid = grain_id or GrainId(grain_class, normalize_key(key))
        ref = _DynamicReference(runtime, gid, "")
    elif isinstance(grain_class, type):
        info = class_info(grain_class)
        gid = grain_id or intern_grain_id(info.type_name, key)
        ref_cls = info.reference
        if ref_cls is None:
            ref_cls = reference_class(grain_class)
        ref = ref_cls(runtime, gid, qualified_name(grain_class))
    else:
        raise TypeError(f"get_grain() needs a grain class or type name, not {grain_class!r}")
    return cast("GrainRef[Any]", ref)  # a string: no subscription per call


_REFERENCES_MAX: Final = 65_536


class References:
    """The references one runtime hands out, by (grain class or type name, plain key).

    A reference is an immutable value, so ``get_grain`` made for every call (the usual way
    to call another grain) costs a dict lookup instead of a new object. Keys other than a
    str, int or UUID get a new reference each time. Bounded, cleared when full.

    ``on_new(cls)`` runs before the first reference to a grain class is made (a client
    allows the class's result types in its codec then).
    """

    __slots__ = ("_made", "_on_new", "_runtime")

    def __init__(
        self, runtime: RuntimeClient, on_new: Callable[[type], None] | None = None
    ) -> None:
        self._runtime = runtime
        self._on_new = on_new
        self._made: dict[tuple[type | str, Any], GrainRef[Any]] = {}

    def get(self, grain_class: type[Any] | str, key: Any) -> GrainRef[Any]:
        t = type(key)
        if t is str or t is int or t is uuid.UUID:  # never equal across types: safe to share
            parts = (grain_class, key)
            ref = self._made.get(parts)
            if ref is None:
                ref = self._make(grain_class, key)
                made = self._made
                if len(made) >= _REFERENCES_MAX:
                    made.clear()
                made[parts] = ref
            return ref
        return self._make(grain_class, key)

    def _make(self, grain_class: type[Any] | str, key: Any) -> GrainRef[Any]:
        if self._on_new is not None and isinstance(grain_class, type):
            self._on_new(grain_class)
        return make_reference(self._runtime, grain_class, key)
