"""Grain class metadata: method flags, class decorators and the per-class method table.

The method table is built once per class (``class_info(cls)``) and read on every call.

What a gateway client may call is decided here, once per method (``MethodInfo.client_ok``):
a method of a user's grain class is callable by clients unless the runtime calls it, that is
unless it is a runtime hook (``RUNTIME_HOOKS``: reminder ticks, every ``__orleanspy_*__``
method) or a stream handler. The stream handlers of a class are the callbacks the stream
delivery of ``Grain`` finds by name (``STREAM_CALLBACKS``: ``on_next``, ``on_next_batch``,
``on_error``, ``on_completed``), and every method marked ``@stream_handler`` in the class or
in a base (an override of a handler is a handler). A grain can only subscribe with methods
that are closed (``check_handler``), so no method the runtime delivers to is open. Nothing of
a class the runtime owns (a system target, or a class marked with ``runtime_grain``) is open
unless the class is marked ``client_endpoint`` (the stream publisher clients publish
through). Type names starting with ``orleanspy.`` are reserved for the runtime's classes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, TypeVar, cast

from orleanspy.errors import ConfigurationError
from orleanspy.grains.arguments import ArgumentChecker, argument_checker
from orleanspy.grains.grain import STREAM_CALLBACKS, Grain
from orleanspy.grains.grain_interface import (
    check_implementation,
    interfaces_of,
    is_grain_interface,
    served_type_names,
)
from orleanspy.grains.state import StateSpec
from orleanspy.messaging.message import (
    FLAG_ALWAYS_INTERLEAVE,
    FLAG_CANCELLABLE,
    FLAG_READ_ONLY,
    FLAG_STREAMED,
)

__all__ = [
    "CLIENT_EXTENSIONS",
    "RUNTIME_HOOKS",
    "RUNTIME_TYPE_PREFIX",
    "STREAM_CALLBACKS",
    "GrainClassInfo",
    "InterleavePredicate",
    "MethodInfo",
    "OverflowPolicy",
    "PlacementStrategy",
    "always_interleave",
    "call_chain_reentrant",
    "cancellable",
    "check_handler",
    "class_info",
    "client_endpoint",
    "collection_age",
    "grain_type",
    "mailbox",
    "may_interleave",
    "one_way",
    "placement",
    "read_only",
    "reentrant",
    "runtime_grain",
    "stateless_worker",
    "stream_handler",
]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

_INFO_ATTR: Final = "_orleanspy_class_info"
_HANDLER_ATTR: Final = "_orleanspy_stream_handler"
_PREDICATE_ATTR: Final = "_orleanspy_may_interleave"

#: A class's interleave predicate: ``(method, args, kwargs) -> may the request interleave?``
InterleavePredicate = Callable[[str, Sequence[Any], Mapping[str, Any]], bool]
# Methods of the Grain base that the runtime calls through the normal call path.
RUNTIME_EXTENSIONS: Final = frozenset(
    {"__orleanspy_stream_deliver__", "__orleanspy_stream_error__", "__orleanspy_stream_pull__",
     "__orleanspy_stream_close__"}
)
#: Runtime extensions a gateway client may call: the pulls of a streamed response (the
#: token that names the iteration is what allows them).
CLIENT_EXTENSIONS: Final = frozenset({"__orleanspy_stream_pull__", "__orleanspy_stream_close__"})
#: Methods only the runtime calls: never from a gateway client.
RUNTIME_HOOKS: Final = RUNTIME_EXTENSIONS | {"receive_reminder"}
#: Type names reserved for the runtime's own grain classes and system targets.
RUNTIME_TYPE_PREFIX: Final = "orleanspy."


class OverflowPolicy(StrEnum):
    """What a full mailbox does with a one-way message (requests always suspend the caller)."""

    SUSPEND = "suspend"
    REJECT = "reject"
    DROP_NEWEST = "drop_newest"
    DROP_OLDEST = "drop_oldest"


class PlacementStrategy(StrEnum):
    """Where a new activation of a class goes in a cluster (see ``orleanspy.cluster.placement``)."""

    PREFER_LOCAL = "prefer_local"
    RANDOM = "random"
    HASH_BASED = "hash_based"
    ACTIVATION_COUNT = "activation_count"


@dataclass(frozen=True, slots=True)
class MethodInfo:
    name: str
    always_interleave: bool
    read_only: bool
    one_way: bool
    flags: int
    #: a runtime hook (``RUNTIME_HOOKS``): dispatched for the runtime, never listed
    runtime: bool = False
    #: a gateway client may call it (neither a runtime hook nor a stream handler)
    client_ok: bool = True
    #: checks a client's arguments against the signature (``grains.arguments``)
    check: ArgumentChecker | None = field(default=None, compare=False, repr=False)


@dataclass(slots=True)
class GrainClassInfo:
    """Everything the runtime needs to know about a grain class, computed once."""

    cls: type
    type_name: str
    methods: dict[str, MethodInfo]
    reentrant: bool
    call_chain_reentrant: bool
    stateless_worker: bool
    max_local_workers: int | None
    mailbox_capacity: int | None
    overflow: OverflowPolicy
    collection_age: float | None
    states: dict[str, Any] = field(default_factory=dict)
    is_system_target: bool = False
    #: the runtime owns the class (a system target or ``runtime_grain``)
    runtime: bool = False
    placement: PlacementStrategy = PlacementStrategy.PREFER_LOCAL
    #: the class's ``@may_interleave`` predicate, None without one (``runtime.admission``)
    may_interleave: InterleavePredicate | None = field(default=None, compare=False)
    #: The generated reference class (``grains.proxy.reference_class``), made on first use.
    reference: type | None = field(default=None, compare=False, repr=False)

    @property
    def public_methods(self) -> list[str]:
        """The names of the methods a client may call, sorted (what listings show)."""
        return sorted(name for name, m in self.methods.items() if m.client_ok and not m.runtime)


def _mark(fn: F, attr: str) -> F:
    if not (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
        raise TypeError(f"@{attr.strip('_').removeprefix('orleanspy_')} needs an async def method")
    setattr(fn, attr, True)
    return fn


def always_interleave(fn: F) -> F:
    """The method may run while any other request is running on the activation."""
    return _mark(fn, "_orleanspy_always_interleave")


def cancellable(fn: F) -> F:
    """A running turn of the method is cancelled (``asyncio.CancelledError`` at its next
    await) when its caller gives up on it: the caller's task is cancelled, or the caller's
    deadline passes, on whichever silo the turn runs. Its own calls still in flight are
    cancelled with it. A method without it runs to its end whoever still waits for it (a
    request of any method that has not started yet never starts once its caller gave up)."""
    return _mark(fn, "_orleanspy_cancellable")


def may_interleave(fn: F) -> F:
    """Mark the class's interleave predicate, a ``@staticmethod`` or ``@classmethod``
    ``(method: str, args: Sequence, kwargs: Mapping) -> bool`` (either decorator order).

    Asked about a request (or one-way call) that finds the activation busy, before it is
    queued: True lets it run alongside the running requests, as if its method were
    ``@always_interleave``. Keep it quick and side-effect free; an exception it raises fails
    the request with that error.
    """
    target = getattr(fn, "__func__", fn)
    if not callable(target) or inspect.iscoroutinefunction(target):
        raise TypeError(
            "@may_interleave needs a plain (not async) function: "
            "def may_interleave(method, args, kwargs) -> bool"
        )
    setattr(target, _PREDICATE_ATTR, True)
    return fn


def _interleave_predicate(cls: type) -> InterleavePredicate | None:
    """The ``@may_interleave`` predicate of ``cls`` (the nearest class in the MRO that
    declares one), bound to the class; None without one."""
    for klass in cls.__mro__:
        marked = [
            (name, value) for name, value in vars(klass).items()
            if getattr(getattr(value, "__func__", value), _PREDICATE_ATTR, False)
        ]
        if not marked:
            continue
        where = f"{klass.__qualname__}.{marked[0][0]}"
        if len(marked) > 1:
            names = ", ".join(name for name, _ in marked)
            raise ConfigurationError(
                f"{klass.__qualname__} marks several @may_interleave predicates ({names}): "
                "keep one and combine the conditions in it"
            )
        name, value = marked[0]
        if not isinstance(value, (staticmethod, classmethod)):
            raise ConfigurationError(
                f"@may_interleave {where} is an instance method: make it a @staticmethod or "
                "@classmethod (it is asked before the request reaches the grain)"
            )
        return cast(InterleavePredicate, getattr(cls, name))
    return None


def read_only(fn: F) -> F:
    """The method does not change state: read-only calls interleave with each other."""
    return _mark(fn, "_orleanspy_read_only")


def one_way(fn: F) -> F:
    """Calls to the method return once the message is enqueued; no result, no error."""
    return _mark(fn, "_orleanspy_one_way")


def stream_handler(fn: F) -> F:
    """The method receives stream events (``stream.subscribe(self.method)``) or is called
    by the class's own delivery: only the runtime calls it, never a gateway client."""
    return _mark(fn, _HANDLER_ATTR)


def _is_stream_handler(cls: type, name: str) -> bool:
    """A stream callback name, or marked ``@stream_handler`` wherever the class or a base
    defines it."""
    if name in STREAM_CALLBACKS:
        return True
    return any(getattr(k.__dict__.get(name), _HANDLER_ATTR, False) for k in cls.__mro__)


def check_handler(grain: object, handler: object) -> None:
    """Refuse to subscribe with a method that a gateway client could call: the runtime
    would deliver events to a method that clients can call with forged events."""
    owner = getattr(handler, "__self__", None)
    if owner is not grain or not isinstance(owner, Grain):
        return
    name = getattr(handler, "__name__", "")
    method = class_info(type(owner)).methods.get(name)
    if method is not None and method.client_ok:
        raise TypeError(
            f"{type(owner).__qualname__}.{name} is callable by clients, so it cannot receive "
            f"stream events: mark it @stream_handler (orleanspy.stream_handler) so only the "
            "runtime calls it, or make it private (_" + name + ")"
        )


def reentrant(cls: C) -> C:
    """Every request of the class may interleave with every other."""
    cls._orleanspy_reentrant = True  # type: ignore[attr-defined]
    return cls


def call_chain_reentrant(cls: C) -> C:
    """A call chain that leaves this grain may call back into it (A→B→A proceeds)."""
    cls._orleanspy_call_chain_reentrant = True  # type: ignore[attr-defined]
    return cls


def stateless_worker(max_local: int | None = None) -> Callable[[C], C]:
    """Several activations per grain id on each silo, at most ``max_local`` (default: CPUs)."""
    if max_local is not None and max_local < 1:
        raise ConfigurationError(f"stateless_worker(max_local={max_local}): must be >= 1")

    def deco(cls: C) -> C:
        cls._orleanspy_stateless_worker = True  # type: ignore[attr-defined]
        cls._orleanspy_max_local_workers = max_local  # type: ignore[attr-defined]
        return cls

    return deco


def mailbox(
    capacity: int | None = None, overflow: OverflowPolicy | str = OverflowPolicy.SUSPEND
) -> Callable[[C], C]:
    """Bound the activation's mailbox and choose what one-way calls do when it is full."""
    if capacity is not None and capacity < 1:
        raise ConfigurationError(f"mailbox(capacity={capacity}): must be >= 1 (or None)")
    try:
        policy = OverflowPolicy(overflow)
    except ValueError:
        names = ", ".join(p.value for p in OverflowPolicy)
        raise ConfigurationError(
            f"mailbox(overflow={overflow!r}): unknown policy; use one of {names}"
        ) from None

    def deco(cls: C) -> C:
        cls._orleanspy_mailbox_capacity = capacity  # type: ignore[attr-defined]
        cls._orleanspy_overflow = policy  # type: ignore[attr-defined]
        return cls

    return deco


def collection_age(seconds: float) -> Callable[[C], C]:
    """Deactivate the class's activations after ``seconds`` without requests."""
    if seconds <= 0:
        raise ConfigurationError(f"collection_age({seconds}): must be > 0")

    def deco(cls: C) -> C:
        cls._orleanspy_collection_age = float(seconds)  # type: ignore[attr-defined]
        return cls

    return deco


def placement(strategy: PlacementStrategy | str) -> Callable[[C], C]:
    """Choose where new activations of the class go in a cluster: ``"prefer_local"`` (the
    default), ``"random"``, ``"hash_based"`` or ``"activation_count"``."""
    try:
        chosen = PlacementStrategy(strategy)
    except ValueError:
        names = ", ".join(p.value for p in PlacementStrategy)
        raise ConfigurationError(
            f"placement({strategy!r}): unknown strategy; use one of {names}"
        ) from None

    def deco(cls: C) -> C:
        cls._orleanspy_placement = chosen  # type: ignore[attr-defined]
        return cls

    return deco


def runtime_grain(cls: C) -> C:
    """The runtime owns the class: messages from gateway clients never reach it."""
    cls._orleanspy_runtime = True  # type: ignore[attr-defined]
    return cls


def client_endpoint(cls: C) -> C:
    """A runtime class whose public methods gateway clients may call (their hooks stay
    closed)."""
    cls._orleanspy_client_endpoint = True  # type: ignore[attr-defined]
    return cls


def grain_type(name: str) -> Callable[[C], C]:
    """Give the class a stable type name (default: its ``__qualname__``). On a grain interface:
    the grain type its references address (``grains.grain_interface``)."""
    if not name or "/" in name:
        raise ConfigurationError(f"grain_type({name!r}): must be non-empty without '/'")

    def deco(cls: C) -> C:
        cls._orleanspy_type_name = name  # type: ignore[attr-defined]
        return cls

    return deco


def type_name_of(cls: type) -> str:
    """The class's ``@grain_type`` name, else the grain type of the grain interfaces it
    declares (``grains.grain_interface``), else its ``__qualname__``."""
    name = cls.__dict__.get("_orleanspy_type_name")
    if isinstance(name, str):
        return name
    served = served_type_names(cls)
    return served[0] if len(served) == 1 else cls.__qualname__


def _is_async_method(fn: object) -> bool:
    """An ``async def`` method: a coroutine function, or an async generator (its calls
    stream their items back, ``runtime.streamed_calls``)."""
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _build(cls: type) -> GrainClassInfo:
    if not is_grain_interface(cls) and interfaces_of(cls):
        check_implementation(cls)
    base_names = set(dir(Grain))
    system_target = bool(getattr(cls, "_orleanspy_system_target", False))
    runtime = system_target or bool(cls.__dict__.get("_orleanspy_runtime", False))
    open_to_clients = not runtime or bool(cls.__dict__.get("_orleanspy_client_endpoint", False))
    methods: dict[str, MethodInfo] = {}
    for name, fn in inspect.getmembers(cls, _is_async_method):
        if name in RUNTIME_EXTENSIONS:
            pass
        elif name.startswith("_") or (name in base_names and name != "receive_reminder"):
            continue
        ai = bool(getattr(fn, "_orleanspy_always_interleave", False))
        ro = bool(getattr(fn, "_orleanspy_read_only", False))
        flags = (FLAG_ALWAYS_INTERLEAVE if ai else 0) | (FLAG_READ_ONLY if ro else 0)
        if getattr(fn, "_orleanspy_cancellable", False):
            flags |= FLAG_CANCELLABLE
        streamed = inspect.isasyncgenfunction(fn)
        if streamed:
            flags |= FLAG_STREAMED
        ow = bool(getattr(fn, "_orleanspy_one_way", False))
        if ow and streamed:
            raise ConfigurationError(
                f"{cls.__qualname__}.{name} is an async generator (a streamed response) "
                "marked @one_way: a one-way call has no response to stream; drop @one_way")
        hook = name in RUNTIME_HOOKS or name.startswith("__orleanspy_")
        client_ok = open_to_clients and (
            name in CLIENT_EXTENSIONS if hook else not _is_stream_handler(cls, name))
        check = argument_checker(type_name_of(cls), name, fn) if client_ok else None
        methods[name] = MethodInfo(name, ai, ro, ow, flags, hook, client_ok, check)
    states = {
        name: value
        for klass in reversed(cls.__mro__)
        for name, value in vars(klass).items()
        if isinstance(value, StateSpec)
    }
    return GrainClassInfo(
        cls=cls,
        type_name=type_name_of(cls),
        methods=methods,
        reentrant=bool(getattr(cls, "_orleanspy_reentrant", False)),
        call_chain_reentrant=bool(getattr(cls, "_orleanspy_call_chain_reentrant", False)),
        stateless_worker=bool(getattr(cls, "_orleanspy_stateless_worker", False)),
        max_local_workers=getattr(cls, "_orleanspy_max_local_workers", None),
        mailbox_capacity=getattr(cls, "_orleanspy_mailbox_capacity", None),
        overflow=getattr(cls, "_orleanspy_overflow", OverflowPolicy.SUSPEND),
        collection_age=getattr(cls, "_orleanspy_collection_age", None),
        states=states,
        is_system_target=system_target,
        runtime=runtime,
        placement=getattr(cls, "_orleanspy_placement", PlacementStrategy.PREFER_LOCAL),
        may_interleave=_interleave_predicate(cls),
    )


def class_info(cls: type) -> GrainClassInfo:
    """The cached metadata of a grain class."""
    info = cls.__dict__.get(_INFO_ATTR)
    if info is None:
        info = _build(cls)
        setattr(cls, _INFO_ATTR, info)
    return cast(GrainClassInfo, info)
