"""Silo call filters from the config file: the ``[filters]`` table.

Example::

    [filters]
    incoming = ["myapp.filters:tenant_check"]   # run in the callee's turn, in this order
    outgoing = ["myapp.filters:audit"]          # run around the calls grains make

Each entry names an ``async def f(call)`` (``orleanspy.GrainCall``), or an object whose
``__call__`` is one, as ``module:function`` (``module:object.attribute`` for one inside a
class or object). The file is checked when it
is read (the table's keys and the form of each entry); the functions are imported when the
silo starts, after the app modules' folder is on the import path, and an entry that does
not import or is not an async function stops the start with an error naming it.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orleanspy import ConfigurationError

__all__ = ["FILTERS_KEY", "FilterSpecs", "parse_filters", "resolve_filters"]

FILTERS_KEY: Final = "filters"
_KINDS: Final = ("incoming", "outgoing")
_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


@dataclass(frozen=True, slots=True)
class FilterSpecs:
    """The ``module:function`` names of the silo's filters, and where each was written."""

    incoming: tuple[str, ...] = ()
    outgoing: tuple[str, ...] = ()
    where: str = ""

    def __bool__(self) -> bool:
        return bool(self.incoming or self.outgoing)


def parse_filters(table: object, label: str) -> FilterSpecs:
    """Check the ``[filters]`` table of the file ``label`` (raises ConfigurationError)."""
    if not isinstance(table, dict):
        raise ConfigurationError(
            f"{label}: key {FILTERS_KEY} must be a table ([{FILTERS_KEY}]) with incoming and "
            f"outgoing arrays, not {type(table).__name__}")
    found: dict[str, tuple[str, ...]] = {}
    for key, value in table.items():
        where = f"{label}: key {FILTERS_KEY}.{key}"
        if key not in _KINDS:
            raise ConfigurationError(f"{where} is unknown; known keys: incoming, outgoing")
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise ConfigurationError(
                f"{where} must be an array of \"module:function\" names, not {value!r}; "
                f'write e.g. {key} = ["myapp.filters:tenant_check"]')
        for spec in items:
            if not _SPEC.fullmatch(spec):
                raise ConfigurationError(
                    f"{where}: {spec!r} is not a \"module:function\" name; write the import "
                    "path of the module, a colon and the function's name, e.g. "
                    "myapp.filters:tenant_check")
        found[key] = tuple(items)
    return FilterSpecs(found.get("incoming", ()), found.get("outgoing", ()), label)


def resolve_filters(specs: FilterSpecs) -> tuple[list[Callable[..., Any]],
                                                  list[Callable[..., Any]]]:
    """Import the filters: (incoming, outgoing) functions (raises ConfigurationError)."""
    return (_resolve(specs.incoming, f"{specs.where}: key {FILTERS_KEY}.incoming"),
            _resolve(specs.outgoing, f"{specs.where}: key {FILTERS_KEY}.outgoing"))


def _resolve(names: Sequence[str], where: str) -> list[Callable[..., Any]]:
    out = []
    for spec in names:
        module_name, _, path = spec.partition(":")
        try:
            obj: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigurationError(
                f"{where}: {spec!r}: module {module_name} cannot be imported ({exc}); check "
                "the name and that it is on the import path (the working directory is)"
            ) from None
        except Exception as exc:  # the module itself failed: say so, not a traceback
            raise ConfigurationError(
                f"{where}: {spec!r}: importing module {module_name} failed: {exc!r}"
            ) from None
        for part in path.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise ConfigurationError(
                    f"{where}: {spec!r}: {module_name} has no {path}; name an async "
                    "function defined there") from None
        call = inspect.getattr_static(type(obj), "__call__", None)  # an async callable object
        if not (inspect.iscoroutinefunction(obj) or inspect.iscoroutinefunction(call)):
            raise ConfigurationError(
                f"{where}: {spec!r} is not an async function (a call filter is "
                "`async def f(call)`, awaiting call.proceed())")
        out.append(obj)
    return out
