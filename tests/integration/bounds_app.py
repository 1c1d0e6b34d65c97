"""Grains of the frame-bound and request-cap tests (``--app tests.integration.bounds_app``):
one whose calls wait until the test opens a gate (a grain slower than the test), and one that
answers at once (and raises, and opens the gate)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from orleanspy import Grain, always_interleave

__all__ = ["Gated", "Quick"]

#: Calls of ``Gated`` wait until it is set (``Quick.open_gate``): a grain slower than the test.
_gate = asyncio.Event()
_passed = [0]  # calls of ``Gated`` that went through the gate


class Gated(Grain):
    """Each call waits for the gate, then counts itself."""

    async def wait(self, n: int) -> int:
        await _gate.wait()
        _passed[0] += 1
        return n

    async def fail(self, n: int) -> None:
        await _gate.wait()
        _passed[0] += 1
        raise ValueError(f"gated failure {n}")

    @always_interleave
    async def leave(self) -> None:
        """Deactivate once the running call ends (the queued ones go to the next activation)."""
        self.deactivate_on_idle()


class Quick(Grain):
    async def ping(self, n: int) -> int:
        return n

    async def take(self, value: object) -> int:
        """Accept any value: the silo decodes it before the call runs."""
        return 0

    async def fail(self, message: str) -> None:
        raise ValueError(message)

    async def open_gate(self) -> None:
        _gate.set()

    async def passed(self) -> int:
        """Calls of ``Gated`` that went through the gate."""
        return _passed[0]

    async def where(self) -> str:
        """The name of the silo this activation lives on."""
        return str(self.silo.name)


async def latencies(client: Any, n: int) -> list[float]:
    """Seconds of each of ``n`` calls of ``Quick.ping`` from ``client``, one after another."""
    grain: Any = client.get_grain("Quick", "q")
    out = []
    for i in range(n):
        t = time.perf_counter()
        assert await grain.ping(i) == i
        out.append(time.perf_counter() - t)
    return out
