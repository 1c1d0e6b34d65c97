"""Grains of the operator's-view test (``--app tests.integration.ops_view_app``).

``Held`` subscribes implicitly to namespace ``held``: while a file ``hold-KEY`` exists in
the (shared) data dir, its delivery for stream ``held/KEY`` waits, so that stream's backlog
grows while the other streams of the queue flow. Each delivery appends ``KEY ITEM`` to
``held.txt``.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from orleanspy import Grain
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.tokens import SequenceToken

__all__ = ["Held"]


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


@implicit_subscription("held")
class Held(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        data_dir = self.silo.options.data_dir
        hold = os.path.join(data_dir, f"hold-{self.key}")
        # Another process (the test) releases it: there is no event to await.
        while await asyncio.to_thread(os.path.exists, hold):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await asyncio.to_thread(_append, os.path.join(data_dir, "held.txt"),
                                f"{self.key} {item}\n")
