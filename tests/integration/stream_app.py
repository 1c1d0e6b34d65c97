"""Grains of the stream durability tests: an implicit subscriber that logs every event.

Each delivery is appended to ``received.txt`` in the silo's data dir (one ``write`` per
event, so what was delivered survives a kill -9 of the silo).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from orleanspy import Grain
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.tokens import SequenceToken


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)


@implicit_subscription("numbers")
class NumberSink(Grain):
    async def on_next(self, item: Any, token: SequenceToken) -> None:
        path = os.path.join(self.silo.options.data_dir, "received.txt")
        await asyncio.to_thread(_append, path, f"{self.key} {item}\n")
