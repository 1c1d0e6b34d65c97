"""Package attributes imported on first use (PEP 562).

A package's ``__init__`` names what it exports and the module each name lives in; importing
the package imports none of them. ``from orleanspy import Silo`` imports the silo's modules
then, and a process that uses one part (a Spark worker reading a stream, a CLI command that
only prints) does not pay for the others. Type checkers read the same names from the
package's ``if TYPE_CHECKING:`` imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package whose globals are ``namespace``:
    ``exports`` maps each exported name to the module that defines it. A name is imported
    once, then kept in the package's globals (later reads do not come here)."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
