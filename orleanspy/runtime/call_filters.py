"""Call filters: code that runs around grain calls, per silo and per grain class.

An incoming filter runs in the callee's turn, before the method: ``async def f(call)``
inspects ``call`` (``GrainCall``: grain id, method, arguments, request context), rejects it
by raising (the caller receives the error), or runs the rest with ``await call.proceed()``
and returns (or replaces) its result. An outgoing filter runs in the caller, around a call
made from this silo, the same way. Filters run in order: the silo's, in registration order,
then the grain class's (``Grain.on_incoming_call`` / ``Grain.on_outgoing_call``).

System targets, runtime grains and runtime hooks (stream delivery, reminder ticks) pass
only through silo filters marked with ``system_filter``. With no filter registered, the turn
checks one attribute (``Activation.incoming`` is None: no filter and no async generator
method) and the call path one more (``Dispatcher.outgoing`` is None); nothing else runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Final

from orleanspy.grains.grain import Grain
from orleanspy.grains.interface import RUNTIME_HOOKS, GrainClassInfo
from orleanspy.grains.request_context import get_context
from orleanspy.ids import GrainId
from orleanspy.messaging.message import FLAG_STREAMED, Message
from orleanspy.runtime.streamed_calls import open_streamed

__all__ = ["CallFilter", "CallFilters", "GrainCall", "system_filter"]

CallFilter = Callable[["GrainCall"], Awaitable[Any]]
_SYSTEM_ATTR: Final = "_orleanspy_system_filter"


def system_filter(fn: CallFilter) -> CallFilter:
    """Mark a silo filter to run for system targets, runtime grains and runtime hooks too."""
    setattr(fn, _SYSTEM_ATTR, True)
    return fn


class GrainCall:
    """One grain call as a filter sees it. ``args`` and ``kwargs`` may be replaced before
    ``proceed``; ``grain`` is the callee (incoming) or the calling grain (outgoing, None
    outside a grain)."""

    __slots__ = ("_chain", "_index", "_invoke", "args", "grain", "grain_id", "kwargs",
                 "method")

    def __init__(self, grain_id: GrainId, method: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any] | None, grain: Any,
                 chain: tuple[CallFilter, ...],
                 invoke: Callable[[GrainCall], Awaitable[Any]]) -> None:
        self.grain_id = grain_id
        self.method = method
        self.args = args
        self.kwargs = kwargs
        self.grain = grain
        self._chain = chain
        self._index = 0
        self._invoke = invoke

    @property
    def context(self) -> dict[str, Any]:
        """A copy of the request context the call carries."""
        current = get_context()
        return dict(current) if current else {}

    async def proceed(self) -> Any:
        """Run the next filter, or the call itself after the last; its result."""
        i = self._index
        self._index = i + 1
        try:
            chain = self._chain
            if i < len(chain):
                return await chain[i](self)
            return await self._invoke(self)
        finally:
            self._index = i

    def __repr__(self) -> str:
        return f"<GrainCall {self.grain_id}.{self.method}>"


async def _invoke_method(call: GrainCall) -> Any:
    fn = getattr(call.grain, call.method)
    result = fn(*call.args, **call.kwargs) if call.kwargs else fn(*call.args)
    if inspect.isawaitable(result):
        return await result
    return result


def _grain_incoming(call: GrainCall) -> Awaitable[Any]:
    return call.grain.on_incoming_call(call)  # type: ignore[no-any-return]


def _grain_outgoing(call: GrainCall) -> Awaitable[Any]:
    return call.grain.on_outgoing_call(call)  # type: ignore[no-any-return]


def _check_filter(fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"call filter {fn!r} must be an async callable taking the call "
                        "(async def my_filter(call): return await call.proceed())")


class IncomingChains:
    """How an activation starts a turn that is not a plain method call: through its incoming
    chains (for its methods and for runtime hooks), and for an async generator method as a
    streamed response (``runtime.streamed_calls``). A class with neither has none, so its
    turns call the method directly."""

    __slots__ = ("filtered", "hooks", "methods")

    def __init__(self, methods: tuple[CallFilter, ...], hooks: tuple[CallFilter, ...]) -> None:
        self.methods = methods
        self.hooks = hooks
        self.filtered = bool(methods or hooks)

    def start(self, activation: Any, msg: Message) -> Awaitable[Any]:
        """The coroutine of ``msg``'s turn on ``activation``: the filters, then the method."""
        method = msg.method
        grain = activation.grain
        if self.filtered:
            hook = method in RUNTIME_HOOKS or method.startswith("__orleanspy_")
            chain = self.hooks if hook else self.methods
            coro: Any = GrainCall(activation.grain_id, method, tuple(msg.args), msg.kwargs,
                                  grain, chain, _invoke_method).proceed()
        elif msg.kwargs:
            coro = getattr(grain, method)(*msg.args, **msg.kwargs)
        else:
            coro = getattr(grain, method)(*msg.args)
        if msg.flags & FLAG_STREAMED:  # an async generator: its first items, a token
            coro = open_streamed(activation, msg, coro)
        return coro  # type: ignore[no-any-return]


class CallFilters:
    """A silo's filters, and the chains each grain class gets (computed once per class)."""

    __slots__ = ("_by_type", "_incoming", "_outgoing")

    def __init__(self) -> None:
        self._incoming: list[CallFilter] = []
        self._outgoing: list[CallFilter] = []
        self._by_type: dict[str, IncomingChains | None] = {}

    def add(self, fn: CallFilter, *, outgoing: bool = False) -> None:
        """Register a silo filter (before the silo starts: activations keep their chains)."""
        _check_filter(fn)
        (self._outgoing if outgoing else self._incoming).append(fn)
        self._by_type.clear()

    def incoming(self, info: GrainClassInfo) -> IncomingChains | None:
        """The incoming chains of a grain class, or None when no filter applies to it."""
        try:
            return self._by_type[info.type_name]
        except KeyError:
            pass
        system = tuple(f for f in self._incoming if getattr(f, _SYSTEM_ATTR, False))
        if info.runtime:
            methods = system
        else:
            methods = tuple(self._incoming)
            if getattr(info.cls, "on_incoming_call", None) is not Grain.on_incoming_call:
                methods += (_grain_incoming,)
        streamed = any(m.flags & FLAG_STREAMED for m in info.methods.values())
        chains = IncomingChains(methods, system) if methods or system or streamed else None
        self._by_type[info.type_name] = chains
        return chains

    def outgoing(self) -> tuple[CallFilter, ...]:
        """The silo's outgoing filters."""
        return tuple(self._outgoing)

    @staticmethod
    def grain_outgoing_class(cls: type) -> bool:
        """True if grain class ``cls`` filters its outgoing calls."""
        fn = getattr(cls, "on_outgoing_call", None)
        return fn is not None and fn is not Grain.on_outgoing_call

    @staticmethod
    def grain_outgoing(grain: Any) -> CallFilter | None:
        """The outgoing filter of a calling grain's class, or None."""
        fn = getattr(type(grain), "on_outgoing_call", None)
        if fn is None or fn is Grain.on_outgoing_call:
            return None
        return _grain_outgoing
