"""A grain of the client failover test (``--app tests.integration.failover_app``, hosted
next to ``cluster_app``): a call that stays in flight for as long as asked."""

from __future__ import annotations

import asyncio
import os

from orleanspy import Grain, reentrant

__all__ = ["Sleeper"]


@reentrant
class Sleeper(Grain):
    """Placed on the silo of the gateway that first called it (prefer-local)."""

    async def pid(self) -> int:
        return os.getpid()

    async def nap(self, seconds: float) -> int:
        await asyncio.sleep(seconds)
        return os.getpid()
