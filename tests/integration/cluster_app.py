"""Grains of the cluster integration tests (``--app tests.integration.cluster_app``).

Results are plain values (ints, strs, dicts), so the test process calls these grains by type
name; ``info()`` says which process and which activation served a call.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from orleanspy import Grain, placement
from orleanspy.streams import implicit_subscription

__all__ = ["Boom", "Fussy", "Listener", "Relay", "Spot", "SpreadSpot", "Ticker"]


class Boom(Exception):
    """Raised on purpose by ``Spot.explode``."""


class Spot(Grain):
    """A counter that tells where it runs."""

    async def on_activate(self) -> None:
        self.hits = 0
        self.tag = uuid.uuid4().hex

    async def hit(self) -> int:
        self.hits += 1
        return self.hits

    async def info(self) -> dict[str, object]:
        return {"pid": os.getpid(), "activation": self.tag, "hits": self.hits,
                "silo": self.silo.name}

    async def explode(self, text: str) -> None:
        raise Boom(text)

    async def bad_value(self, text: str) -> None:
        raise ValueError(text)


@placement("hash_based")
class SpreadSpot(Spot):
    """The same grain, placed by hash: every caller picks the same silo."""


class Relay(Grain):
    """Calls a Spot from inside a grain (grain-to-grain, possibly across silos)."""

    async def info_of(self, key: str) -> dict[str, object]:
        info: dict[str, object] = await self.get_grain(Spot, key).info()
        return {"relay_pid": os.getpid(), **info}

    async def explode_via(self, key: str) -> str:
        try:
            await self.get_grain(Spot, key).explode("inner")
        except Boom as exc:
            return f"caught {type(exc).__name__}: {exc}"
        return "not raised"


class Ticker(Grain):
    """Holds a durable reminder (a minute apart: it is listed, not waited for)."""

    async def remind(self) -> None:
        await self.register_reminder("tick", due=60.0, period=60.0)

    async def receive_reminder(self, name: str, status: Any) -> None:
        pass


@implicit_subscription("feed")
class Listener(Grain):
    """Counts the events of stream ``feed/KEY`` (implicitly subscribed); ``publish`` puts
    ``n`` events on the stream of provider ``s``."""

    async def on_activate(self) -> None:
        self.seen = 0

    async def on_next(self, item: Any, token: Any) -> None:
        self.seen += 1

    async def publish(self, n: int) -> None:
        stream = self.get_stream_provider("s").get_stream("feed", self.key)
        for i in range(n):
            await stream.on_next(i)

    async def count(self) -> int:
        return self.seen


@implicit_subscription("fussy")
class Fussy(Grain):
    """A consumer of stream ``fussy/KEY`` whose handler fails until ``heal``."""

    async def on_activate(self) -> None:
        self.seen: list[Any] = []
        self.healthy = False

    async def on_next(self, item: Any, token: Any) -> None:
        if not self.healthy:
            raise RuntimeError("not ready for events yet")
        self.seen.append(item)

    async def publish(self, item: Any) -> None:
        await self.get_stream_provider("s").get_stream("fussy", self.key).on_next(item)

    async def heal(self) -> None:
        self.healthy = True

    async def received(self) -> list[Any]:
        return self.seen
