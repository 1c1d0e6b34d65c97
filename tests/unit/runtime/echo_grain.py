"""Echo: the grain the call-path tests (gateway requests, value copies, lost connections) share."""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain


class Echo(Grain):
    async def echo(self, x: Any) -> Any:
        return x

    async def ping(self) -> str:
        return "pong"

    async def hold(self) -> str:
        self.silo.probe.record("holding")
        await self.silo.probe.gate("hold").wait()
        return "held"

    async def recursive_late(self) -> Any:
        await asyncio.sleep(0)
        a: list[Any] = []
        a.append((a,))
        return a
