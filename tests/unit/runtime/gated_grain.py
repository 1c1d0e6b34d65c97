"""Gated: a grain whose turns wait at probe gates, for the carried-turn tests."""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy import Grain

WAIT = 5.0


async def outcome(task: asyncio.Task[Any]) -> Any:
    """The task's result, or the exception it ended with (bounded by ``WAIT``)."""
    async with asyncio.timeout(WAIT):
        try:
            return await task
        except BaseException as exc:  # the outcome is the subject
            return exc


class Gated(Grain):
    """Non-reentrant; awaits probe gates and records what it reaches."""

    def __init__(self) -> None:
        self.done: list[str] = []

    async def wait_gate(self, tag: str) -> str:
        self.silo.probe.record(("waiting", tag))
        await self.silo.probe.gate(tag).wait()
        self.done.append(tag)
        self.silo.probe.record(("done", tag))
        return tag

    async def finished(self) -> list[str]:
        return list(self.done)
