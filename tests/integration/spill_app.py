"""Grains of the spill durability test (tests/integration/test_stream_spill_durability.py).

Implicit subscribers on three streams of one queue: ``SpillFastSink`` (namespace ``fast``)
and ``SpillIdleSink`` (``idle``) take every event at once; ``SpillSlowSink`` (``slow``)
takes the events below ``BLOCK_AT`` and refuses the others (the agent retries them) until
the file ``gate`` exists in the silo's data dir. Each delivery is appended to
``fast.txt`` / ``slow.txt`` / ``idle.txt`` in the data dir as ``KEY ITEM SEQUENCE`` (one
``write`` per event, so what was delivered survives a kill -9 of the silo).
``SpillProbe`` reports the stream agents' statistics to the test.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from orleanspy import Grain
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.tokens import SequenceToken

BLOCK_AT = 20
GATE = "gate"


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


async def _record(grain: Grain, name: str, item: Any, token: SequenceToken) -> None:
    path = os.path.join(grain.silo.options.data_dir, name)
    await asyncio.to_thread(_append, path, f"{grain.key} {item} {token.sequence}\n")


@implicit_subscription("slow")
class SpillSlowSink(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        gate = os.path.join(self.silo.options.data_dir, GATE)
        if item >= BLOCK_AT and not await asyncio.to_thread(os.path.exists, gate):
            raise RuntimeError(f"gate closed: {item} is refused for now")  # retried
        await _record(self, "slow.txt", item, token)


@implicit_subscription("fast")
class SpillFastSink(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        await _record(self, "fast.txt", item, token)


@implicit_subscription("idle")
class SpillIdleSink(Grain):
    """Caught up early: it waits for newer events, so the agent spills the slow one."""

    async def on_next(self, item: Any, token: SequenceToken) -> None:
        await _record(self, "idle.txt", item, token)


class SpillProbe(Grain):
    async def agents(self, provider: str) -> list[dict[str, int]]:
        """Per pulling agent: subscriptions spilled now, cache size and bound, containers read."""
        return [
            {"spilled": s.spilled, "cache_size": s.cache_size, "cache_max": s.cache_max,
             "read": s.read}
            for s in self.silo.statistics().streams[provider]
        ]
