"""Checking a client's arguments against a grain method's signature and annotations, at the
silo, before the call runs: a wrong argument gets an error that names it, what the method
expects and what came, instead of failing somewhere inside the method.

Checked: the number and names of the arguments (``inspect.Signature.bind``), and each value
whose annotation is a plain type that the wire carries as itself, as ``isinstance`` does
except that a bool is not a number (``True`` is refused where an ``int`` or a ``float`` is
expected, unless the annotation names ``bool`` too): ``int``, ``float`` (an int is
accepted), ``str``, ``bytes``,
``bool``, ``list``, ``dict``, ``tuple`` (the wire carries tuples as lists), ``None``, and
``Optional``/``Union``/``Literal`` and parametrized ``list[...]``/``dict[...]`` of those (the
container only, not its items). Other annotations (classes, ``Any``, strings that do not
resolve) are not checked. Only calls from gateway clients are checked: grains and the silo's
own code are trusted as Python is.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable
from typing import Any, Final

__all__ = ["ArgumentChecker", "argument_checker"]

_PLAIN: Final[dict[Any, tuple[type, ...]]] = {
    int: (int,), float: (int, float), str: (str,), bytes: (bytes,), bool: (bool,),
    list: (list,), dict: (dict,), tuple: (list, tuple), type(None): (type(None),),
}
_Check = Callable[[Any], bool]
# A check: its predicate, the annotation's name, and the types an isinstance test takes
# (None: the predicate is needed, as for Literal).
_Spec = tuple[_Check, str, tuple[type, ...] | None]


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _check_of(annotation: Any) -> _Spec | None:
    """How to check ``annotation``, or None if it is not checked."""
    if annotation is None:
        annotation = type(None)
    plain = _PLAIN.get(annotation)
    if plain is not None:
        name = getattr(annotation, "__name__", "None")
        if int in plain:  # a bool is an int to isinstance, not to a grain method
            return ((lambda v, t=plain: isinstance(v, t) and type(v) is not bool), name, plain)
        return (lambda v, t=plain: isinstance(v, t)), name, plain
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        allowed = typing.get_args(annotation)
        return ((lambda v: any(v == a and type(v) is type(a) for a in allowed)),
                repr(annotation), None)
    if origin in (typing.Union, types.UnionType):
        parts = [_check_of(a) for a in typing.get_args(annotation)]
        if any(p is None for p in parts):
            return None
        specs = [p for p in parts if p is not None]
        checks = [p[0] for p in specs]
        union: tuple[type, ...] | None = tuple(t for p in specs for t in (p[2] or ()))
        if any(p[2] is None for p in specs):
            union = None
        return (lambda v: any(c(v) for c in checks)), " | ".join(p[1] for p in specs), union
    if origin in (list, dict, tuple):
        container = _check_of(origin)
        return (container[0], str(annotation), container[2]) if container is not None else None
    return None


class ArgumentChecker:
    """Checks the arguments of one method; ``__call__`` returns the problem, or None."""

    __slots__ = ("_bools", "_checks", "_fast", "_max", "_min", "_params", "_signature", "fast",
                 "name", "no_bools")

    def __init__(self, name: str, signature: inspect.Signature,
                 checks: dict[str, _Spec]) -> None:
        self.name = name
        self._signature = signature
        self._checks = checks
        params = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._params = [p.name for p in params]
        self._min = sum(1 for p in params if p.default is p.empty)
        var = any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values())
        self._max = len(params) if not var else -1
        # Positional calls that pass are told apart in one C loop: isinstance per argument.
        fast = [checks[p][2] if p in checks else (object,) for p in self._params]
        #: per positional parameter, the types an argument must be an instance of (None:
        #: a check needs the predicate); a caller may test ``all(map(isinstance, args,
        #: fast))`` (and, unless ``no_bools``, that no argument is a bool) for a full
        #: positional call instead of calling the checker
        self._fast: tuple[tuple[type, ...], ...] | None = None
        if not var and all(t is not None for t in fast):
            self._fast = tuple(t for t in fast if t is not None)
        #: the positions where isinstance would take a bool for a number
        self._bools = tuple(i for i, t in enumerate(fast)
                            if t is not None and int in t and bool not in t)
        #: the types of ``fast`` alone decide a call (no position where isinstance would take
        #: a bool for a number); otherwise a caller also tests ``bool not in map(type, args)``
        self.no_bools = not self._bools
        self.fast = self._fast

    def __call__(self, args: tuple[Any, ...] | list[Any],
                 kwargs: dict[str, Any] | None) -> str | None:
        checks = self._checks
        if not kwargs and self._min <= len(args) <= self._max:  # the usual call: positional
            fast = self._fast
            if fast is not None and all(map(isinstance, args, fast)) and (
                not self._bools or bool not in map(type, args)  # any bool: the full check
            ):
                return None
            for name, value in zip(self._params, args, strict=False):
                check = checks.get(name)
                if check is not None and not check[0](value):
                    return self._wrong(name, check[1], value)
            return None
        try:
            bound = self._signature.bind(*args, **(kwargs or {}))
        except TypeError as exc:
            return f"{exc} (it takes {self._text()})"
        for name, value in bound.arguments.items():
            check = checks.get(name)
            if check is not None and not check[0](value):
                return self._wrong(name, check[1], value)
        return None

    def _wrong(self, name: str, expected: str, value: Any) -> str:
        return (f"argument {name!r} must be {expected}, got {_describe(value)} "
                f"(it takes {self._text()})")

    def _text(self) -> str:
        return f"{self.name}{self._signature}"


def argument_checker(type_name: str, name: str, fn: Callable[..., Any]) -> ArgumentChecker | None:
    """The checker of method ``fn`` (unbound, ``self`` first), None if none of its
    parameters has an annotation to check (the number of arguments is then Python's own
    check, when the method is called)."""
    try:
        signature = inspect.signature(fn, eval_str=True)
    except (TypeError, ValueError):
        return None
    except Exception:  # an annotation that does not evaluate: show it as written
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return None
    params = list(signature.parameters.values())
    if params and params[0].name == "self":
        signature = signature.replace(parameters=params[1:])
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # a forward reference that does not resolve: arity only
        hints = {}
    checks: dict[str, _Spec] = {}
    for p in signature.parameters.values():
        if p.name in hints and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            check = _check_of(hints[p.name])
            if check is not None:
                checks[p.name] = check
    if not checks:
        return None
    return ArgumentChecker(f"{type_name}.{name}", signature, checks)
