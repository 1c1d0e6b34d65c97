"""A gateway client's arguments are checked against the method's signature and plain
annotations before it runs: the error names the argument, what is expected and what came;
grains calling grains are not checked (trusted as Python is)."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from orleanspy import Grain, MessageRejectedError
from orleanspy.grains.arguments import argument_checker
from orleanspy.testing import TestCluster


class Shop(Grain):
    async def buy(self, item: str, qty: int, price: float = 1.0,
                  note: str | None = None) -> str:
        return f"{qty} {item}"

    async def mode(self, m: Literal["fast", "slow"], tags: list[str], extra: Any) -> str:
        return m

    async def loose(self, anything, *rest: int, **named: str) -> int:  # type: ignore[no-untyped-def]
        return len(rest)

    async def relay(self, qty: Any) -> str:
        return await self.get_grain(Shop, "other").buy("x", qty)  # type: ignore[no-any-return]


def check(method: str, *args: Any, **kwargs: Any) -> str | None:
    checker = argument_checker("Shop", method, getattr(Shop, method))
    assert checker is not None
    return checker(args, kwargs or None)


def test_good_calls_pass() -> None:
    assert check("buy", "pen", 3) is None
    assert check("buy", "pen", 3, 2) is None  # an int is a float
    assert check("buy", "pen", qty=3, note=None) is None
    assert check("mode", "fast", ["a"], object()) is None
    assert argument_checker("Shop", "loose", Shop.loose) is None  # only *rest, **named
    assert argument_checker("Shop", "relay", Shop.relay) is None  # nothing to check


def test_a_wrong_value_names_the_argument_and_the_signature() -> None:
    problem = check("buy", "pen", "3")
    assert problem is not None
    assert problem.startswith("argument 'qty' must be int, got str '3'")
    assert "Shop.buy(item: str, qty: int, price: float = 1.0, note: str | None = None)" \
        in problem
    assert "must be float, got str 'x'" in (check("buy", "pen", 1, "x") or "")
    assert "'note' must be str | None" in (check("buy", "pen", 1, note=5) or "")
    assert "'m' must be typing.Literal['fast', 'slow']" in (check("mode", "f", [], 0) or "")
    assert "'tags' must be list[str]" in (check("mode", "fast", "a", 0) or "")


def test_missing_and_extra_arguments_are_named() -> None:
    assert "missing a required argument: 'qty'" in (check("buy", "pen") or "")
    assert "too many positional arguments" in (check("buy", "a", 1, 2.0, None, 5) or "")
    assert "unexpected keyword argument 'colour'" in (check("buy", "a", 1, colour="r") or "")


async def test_a_client_is_refused_before_the_method_runs_and_a_grain_is_not() -> None:
    async with TestCluster(grains=[Shop]) as cluster:
        shop: Any = cluster.client.get_grain("Shop", "s")
        assert await shop.buy("pen", 2) == "2 pen"
        with pytest.raises(MessageRejectedError, match="argument 'qty' must be int"):
            await shop.buy("pen", "two")
        # grain-to-grain: no check, the value reaches the method as Python would pass it
        assert await shop.relay("two") == "two x"


class Flags(Grain):
    async def count(self, n: int, ratio: float, limit: int | None = None) -> int:
        return n

    async def switch(self, on: bool, level: int | bool) -> bool:
        return on


def test_a_bool_is_not_a_number() -> None:
    count = argument_checker("Flags", "count", Flags.count)
    assert count is not None
    assert count((1, 2.0), None) is None
    assert count((1, 2), None) is None
    assert "'n' must be int, got bool True" in (count((True, 2.0), None) or "")
    assert "'ratio' must be float, got bool False" in (count((1, False), None) or "")
    assert "'limit' must be int | None" in (count((1, 2.0, True), None) or "")
    assert "'n' must be int" in (count((), {"n": True, "ratio": 1.0}) or "")
    # the dispatcher's isinstance shortcut stays on, with a bool test where isinstance would
    # take a bool for a number
    assert count.fast is not None and not count.no_bools
    switch = argument_checker("Flags", "switch", Flags.switch)
    assert switch is not None
    assert switch((True, True), None) is None  # an annotation that names bool takes one
    assert switch((False, 3), None) is None
    assert switch.no_bools


async def test_a_client_cannot_pass_a_bool_as_an_int() -> None:
    async with TestCluster([Flags]) as cluster:
        ref = cluster.client.get_grain(Flags, "f")
        assert await ref.count(3, 1.0) == 3
        with pytest.raises(MessageRejectedError, match="'n' must be int, got bool True"):
            await ref.count(True, 1.0)
