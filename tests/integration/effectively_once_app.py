"""Grains of the effectively-once kill -9 test (``--app tests.integration.effectively_once_app``).

``ExactSink`` subscribes implicitly to namespace ``numbers`` and is effectively-once: each
event is appended to its persistent state, which is written (etag-checked, with the event's
token) before the handler returns. The test reads the stored states: every number once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orleanspy import Grain, persistent_state
from orleanspy.streams import effectively_once
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.tokens import SequenceToken

__all__ = ["Applied", "ExactSink"]


@dataclass
class Applied:
    numbers: list[int] = field(default_factory=list)


@effectively_once
@implicit_subscription("numbers")
class ExactSink(Grain):
    state = persistent_state(Applied)

    async def on_next(self, item: Any, token: SequenceToken) -> None:
        self.state.value.numbers.append(item)
        await self.state.write()
