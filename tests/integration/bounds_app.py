"""Grains of the frame-bound tests (``--app tests.integration.bounds_app``): a grain that
works slowly, one that answers at once, and one that raises."""

from __future__ import annotations

import asyncio

from orleanspy import Grain

__all__ = ["Quick", "Sluggish"]


class Sluggish(Grain):
    """Takes 20 ms per call: a flood of one-way calls fills its mailbox."""

    async def poke(self, n: int) -> None:
        await asyncio.sleep(0.02)


class Quick(Grain):
    async def ping(self, n: int) -> int:
        return n

    async def take(self, value: object) -> int:
        """Accept any value: the silo decodes it before the call runs."""
        return 0

    async def fail(self, message: str) -> None:
        raise ValueError(message)
