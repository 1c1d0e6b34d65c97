"""Grains of the cluster integration tests (``--app tests.integration.cluster_app``).

Results are plain values (ints, strs, dicts), so the test process calls these grains by type
name; ``info()`` says which process and which activation served a call.
"""

from __future__ import annotations

import os
import uuid

from orleanspy import Grain, placement

__all__ = ["Boom", "Relay", "Spot", "SpreadSpot"]


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
