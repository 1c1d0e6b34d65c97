"""Grains shared by the typing test's modules (as a user's application would define them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from orleanspy import Grain, one_way, persistent_state, read_only
from tests.typing.interfaces import ICart

T = TypeVar("T")


@dataclass
class CounterState:
    value: int = 0


class Counter(Grain):
    state = persistent_state(CounterState)

    async def increment(self, by: int = 1) -> int:
        self.state.value.value += by
        return self.state.value.value

    @read_only
    async def get(self) -> int:
        return self.state.value.value

    @one_way
    async def reset(self) -> None:
        self.state.value.value = 0

    async def on_activate(self) -> None:
        self.sync_helper()

    def sync_helper(self) -> str:
        return "not callable through a reference"

    async def _private(self) -> None:
        return None


class Box(Grain, Generic[T]):
    async def put(self, item: T) -> None:
        self._item = item

    async def take(self) -> T:
        return self._item


class Doubler(Counter):
    async def double(self) -> int:
        return await self.increment(self.state.value.value)


class Cart(Grain, ICart):
    """Implements ``interfaces.ICart`` (and so serves its grain type, ``"Cart"``)."""

    def __init__(self) -> None:
        self._items: dict[str, int] = {}

    async def add(self, item: str, qty: int = 1) -> int:
        self._items[item] = self._items.get(item, 0) + qty
        return self._items[item]

    async def items(self) -> dict[str, int]:
        return dict(self._items)

    @one_way
    async def clear(self) -> None:
        self._items.clear()
