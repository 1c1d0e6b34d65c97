"""Grains hosted by the silo processes of the integration tests (``--app tests.integration.app``).

Results are plain JSON-like values (ints, strs, lists, dicts) so that the test process never
has to import this module: it calls these grains by type name.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field

from orleanspy import Grain, TickStatus, persistent_state

__all__ = [
    "Counter", "CounterState", "GrainFailure", "Inspector", "Stubborn", "Ticker", "TickerState",
]


class GrainFailure(Exception):
    """Raised on purpose by ``Counter.fail`` (its type is not importable by callers)."""


@dataclass
class CounterState:
    value: int = 0
    note: str = ""


@dataclass
class TickerState:
    ticks: int = 0
    pids: list[int] = field(default_factory=list)


class Counter(Grain):
    """A counter with durable state; ``info()`` tells which activation and process served."""

    state = persistent_state(CounterState)

    async def on_activate(self) -> None:
        self._tag = uuid.uuid4().hex

    async def add(self, n: int) -> int:
        """Add and write explicitly; returns once the write is durable."""
        self.state.value.value += n
        await self.state.write()
        return self.state.value.value

    async def set_unsaved(self, value: int, note: str = "") -> int:
        """Change the state without writing it (the runtime writes it on deactivation)."""
        self.state.value.value = value
        self.state.value.note = note
        return value

    async def get(self) -> int:
        return self.state.value.value

    async def info(self) -> dict[str, object]:
        return {
            "value": self.state.value.value,
            "note": self.state.value.note,
            "activation": self._tag,
            "pid": os.getpid(),
        }

    async def request_deactivation(self) -> None:
        self.deactivate_on_idle()

    async def echo(self, *args: object) -> list[object]:
        return list(args)

    async def fail(self, message: str) -> None:
        raise GrainFailure(message)

    async def fail_value(self, message: str) -> None:
        raise ValueError(message)


class Ticker(Grain):
    """Counts the ticks of a durable reminder and records which process ran each one."""

    state = persistent_state(TickerState)

    async def start(self, period: float) -> None:
        await self.register_reminder("tick", period, period)

    async def stop_ticking(self) -> bool:
        return await self.unregister_reminder("tick")

    async def receive_reminder(self, name: str, status: TickStatus) -> None:
        self.state.value.ticks += 1
        self.state.value.pids.append(os.getpid())
        await self.state.write()

    async def report(self) -> dict[str, object]:
        return {"ticks": self.state.value.ticks, "pids": list(self.state.value.pids)}


class Stubborn(Grain):
    """Once armed, its on_deactivate never returns: a graceful stop hangs on it."""

    async def arm(self) -> int:
        self._armed = True
        return os.getpid()

    async def on_deactivate(self, reason: object) -> None:
        if getattr(self, "_armed", False):
            await asyncio.Event().wait()


class Inspector(Grain):
    """Reports what the silo process rebuilt from a request, and what it has imported."""

    async def kind(self, value: object) -> str:
        return f"{type(value).__module__}.{type(value).__qualname__}"

    async def imported(self, module: str) -> bool:
        import sys

        return module in sys.modules
