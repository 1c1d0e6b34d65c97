"""SiloHost: what the silo's components read from the silo they serve.

The silo builder (``orleanspy.hosting.builder``) builds the catalog, the dispatcher, the
locator, the collector and the rest, hands each the objects it uses, and gives each the
silo as its host. What they read from the silo itself (its name, options, clock, logger,
loop, status) is this protocol, typed with lower layers only, so no component module
imports the silo. Everything is read on use, never while a component is being built (the
builder builds them before the silo takes them): the name and the logger change once the
cluster's transport knows the silo's port, and the loop is the one the silo started on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from structlog.typing import FilteringBoundLogger

from orleanspy._util.clock import Clock
from orleanspy.diagnostics import Diagnostics
from orleanspy.runtime.options import SiloOptions

__all__ = ["SiloHost"]


class SiloHost(Protocol):
    """The silo as its runtime components see it."""

    @property
    def name(self) -> str:
        """``host:port``; the subject of log lines and runtime events."""
        ...

    @property
    def options(self) -> SiloOptions: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def fence(self) -> Callable[[], bool] | None:
        """True while the silo must not serve (a cluster silo that cannot confirm it is
        still a member); None for a lone silo."""
        ...

    @property
    def diagnostics(self) -> Diagnostics: ...

    @property
    def log(self) -> FilteringBoundLogger: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop the silo started on (turns start eagerly on it)."""
        ...

    @property
    def started(self) -> bool: ...

    @property
    def stopping(self) -> bool: ...

    def track(self, task: asyncio.Task[Any]) -> None:
        """Own a background task until it finishes (the graceful stop waits for it)."""
        ...
