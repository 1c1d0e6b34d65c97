"""Grain interfaces shared by the typing test's modules: what a client imports instead of the
grain classes (``grains.py`` implements them)."""

from __future__ import annotations

from typing import Protocol

from orleanspy import GrainInterface, grain_type, one_way


@grain_type("Cart")
class ICart(GrainInterface, Protocol):
    async def add(self, item: str, qty: int = 1) -> int: ...

    async def items(self) -> dict[str, int]: ...

    @one_way
    async def clear(self) -> None: ...
