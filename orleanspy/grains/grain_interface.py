"""Grain interfaces: the methods a caller sees, declared apart from the grain class.

A grain interface lists a grain type's callable methods and their types, with no
implementation, so a client process can hold typed references without importing the
module that implements the grain::

    @grain_type("Cart")                      # the grain type it addresses (default: "ICart")
    class ICart(GrainInterface, Protocol):
        async def add(self, item: str, qty: int = 1) -> int: ...
        async def total(self) -> int: ...

    cart = client.get_grain(ICart, "alice")  # GrainRef[ICart]: typed by the mypy plugin

The grain class declares that it implements the interface by subclassing it and serves the
interface's grain type (it takes that type name unless it names the same one itself)::

    class CartGrain(Grain, ICart):
        async def add(self, item: str, qty: int = 1) -> int: ...
        async def total(self) -> int: ...

``check_implementation`` (run when a silo registers a grain class, through ``class_info``)
refuses a class that misses an interface method, implements one as a plain ``def``, cannot
take every call the interface's signature allows, disagrees on ``@one_way``, or names
another grain type: the error names the class, the interface, each method and the fix.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Final, Protocol

from orleanspy.errors import ConfigurationError

__all__ = [
    "GrainInterface",
    "check_implementation",
    "interface_methods",
    "interfaces_of",
    "is_grain_interface",
    "served_type_names",
]

_TYPE_NAME_ATTR: Final = "_orleanspy_type_name"
_ONE_WAY_ATTR: Final = "_orleanspy_one_way"
_POSITIONAL: Final = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_BY_NAME: Final = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_EMPTY: Final = inspect.Parameter.empty


class GrainInterface(Protocol):
    """Base of grain interfaces: ``class ICart(GrainInterface, Protocol)`` with ``async def``
    methods whose bodies are ``...``.

    ``get_grain(ICart, key)`` addresses the grain type the interface names with
    ``@grain_type(name)`` (default: the interface's class name). Mark a method ``@one_way``
    on the interface when callers should not wait for it; the implementation must agree.
    """

    #: Marks the interfaces and their implementations for type checkers (a protocol with no
    #: member would match every class).
    _orleanspy_grain_interface: ClassVar[bool] = True


def is_grain_interface(cls: object) -> bool:
    """True for a class declared ``class I(GrainInterface, Protocol)`` (not for the classes
    that implement it)."""
    return (
        isinstance(cls, type)
        and cls is not GrainInterface
        and GrainInterface in cls.__mro__
        and bool(cls.__dict__.get("_is_protocol", False))
    )


def interfaces_of(cls: type) -> list[type]:
    """The grain interfaces a class implements (its own bases' and theirs), nearest first."""
    return [k for k in cls.__mro__[1:] if is_grain_interface(k)]


def _declared(cls: type) -> list[type]:
    """The grain interfaces among the class's own bases."""
    return [b for b in cls.__bases__ if is_grain_interface(b)]


def _interface_type_name(iface: type) -> str:
    name = iface.__dict__.get(_TYPE_NAME_ATTR)
    return name if isinstance(name, str) else iface.__qualname__


def served_type_names(cls: type) -> list[str]:
    """The grain type names a grain class serves through the interfaces it declares (its own
    bases), without repeats; an interface's own type name for an interface."""
    if is_grain_interface(cls):
        return [_interface_type_name(cls)]
    return list(dict.fromkeys(_interface_type_name(i) for i in _declared(cls)))


def _is_async(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def interface_methods(iface: type) -> dict[str, Callable[..., Any]]:
    """The ``async def`` methods an interface declares (async generators, which stream their
    items, included), its base interfaces' included."""
    methods: dict[str, Callable[..., Any]] = {}
    for klass in reversed([k for k in iface.__mro__ if is_grain_interface(k)]):
        methods.update({name: fn for name, fn in vars(klass).items()
                        if not name.startswith("_") and _is_async(fn)})
    return methods


def _owner(cls: type, name: str) -> type | None:
    return next((k for k in cls.__mro__ if name in k.__dict__), None)


class _Source(str):
    """An annotation kept as written (``from __future__ import annotations``): shown bare."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


def _signature_text(name: str, fn: Callable[..., Any]) -> str:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return f"async def {name}(...)"
    params = [p.replace(annotation=_Source(p.annotation)) if isinstance(p.annotation, str)
              else p for p in sig.parameters.values()]
    ret = sig.return_annotation
    sig = sig.replace(parameters=params,
                      return_annotation=_Source(ret) if isinstance(ret, str) else ret)
    return f"async def {name}{sig}"


def _parameter_problems(declared: inspect.Signature, given: inspect.Signature) -> Iterator[str]:
    """What a call the interface allows would fail on (parameters after ``self``)."""
    want = list(declared.parameters.values())[1:]
    have = list(given.parameters.values())[1:]
    var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in have)
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in have)
    positional = [p for p in have if p.kind in _POSITIONAL]
    by_name = {p.name: p for p in have if p.kind in _BY_NAME}
    used: set[str] = set()
    for index, p in enumerate(want):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            if not var_pos:
                yield f"it takes no *{p.name}"
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            if not var_kw:
                yield f"it takes no **{p.name}"
            continue
        match: inspect.Parameter | None = None
        if p.kind in _POSITIONAL:
            match = positional[index] if index < len(positional) else None
            if match is None and not var_pos:
                yield f"it takes no positional parameter {index + 1} ({p.name})"
                continue
            if (match is not None and p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                    and (match.name != p.name or match.kind not in _BY_NAME)):
                yield f"parameter {index + 1} is {match.name!r}, the interface's is {p.name!r}"
                continue
        else:  # keyword-only
            match = by_name.get(p.name)
            if match is None and not var_kw:
                yield f"it takes no parameter {p.name!r}"
                continue
        if match is not None:
            used.add(match.name)
            if p.default is not _EMPTY and match.default is _EMPTY:
                yield f"parameter {p.name!r} has a default in the interface but not here"
    for p in have:
        if (p.name not in used and p.kind in (*_POSITIONAL, inspect.Parameter.KEYWORD_ONLY)
                and p.default is _EMPTY):
            yield f"it requires {p.name!r}, which the interface does not pass"


def _method_problem(cls: type, name: str, declared: Callable[..., Any]) -> str | None:
    owner = _owner(cls, name)
    if owner is None or is_grain_interface(owner):
        return f"{cls.__name__} does not define it"
    fn = owner.__dict__[name]
    if not _is_async(fn):
        return f"{owner.__name__}.{name} is not an async def method"
    if inspect.isasyncgenfunction(declared) != inspect.isasyncgenfunction(fn):
        kind = "is" if inspect.isasyncgenfunction(declared) else "is not"
        return (f"the interface's {name} {kind} an async generator (a streamed response) "
                "and the grain's disagrees")
    if bool(getattr(declared, _ONE_WAY_ATTR, False)) != bool(getattr(fn, _ONE_WAY_ATTR, False)):
        marked = "is" if getattr(declared, _ONE_WAY_ATTR, False) else "is not"
        return f"the interface's {name} {marked} @one_way and the grain's disagrees"
    try:
        want, have = inspect.signature(declared), inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    problems = list(_parameter_problems(want, have))
    return "; ".join(problems) if problems else None


def check_implementation(cls: type) -> None:
    """Raise ``ConfigurationError`` unless ``cls`` implements every grain interface it
    declares and serves a single grain type name (see the module's docstring)."""
    where = f"grain class {cls.__module__}.{cls.__qualname__}"
    served = served_type_names(cls)
    own = cls.__dict__.get(_TYPE_NAME_ATTR)
    if len(served) > 1:
        raise ConfigurationError(
            f"{where} implements grain interfaces of several grain types ({', '.join(served)}); "
            "a grain class serves one: give those interfaces the same @grain_type(...) or "
            "implement them in separate grain classes"
        )
    if served and isinstance(own, str) and own != served[0]:
        raise ConfigurationError(
            f"{where} is named {own!r} but implements grain interfaces of grain type "
            f"{served[0]!r}: remove its @grain_type({own!r}) or name the interfaces' type "
            f"@grain_type({own!r})"
        )
    problems = [
        f"{where} does not implement grain interface {iface.__name__}: method {name}: "
        f"{problem}; define it in {cls.__name__} as {_signature_text(name, declared)} "
        "(the interface's signature)"
        for iface in interfaces_of(cls)
        for name, declared in interface_methods(iface).items()
        if (problem := _method_problem(cls, name, declared)) is not None
    ]
    if problems:
        raise ConfigurationError("\n".join(problems))
