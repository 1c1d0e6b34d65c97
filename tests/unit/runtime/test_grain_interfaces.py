"""Grain interfaces: references typed by an interface reach the grain class that implements it,
and a silo refuses a class that does not implement what it declares."""

from __future__ import annotations

import asyncio
from typing import Protocol

import pytest

from orleanspy import (
    ConfigurationError,
    Grain,
    GrainInterface,
    Silo,
    SiloOptions,
    grain_type,
    one_way,
)
from orleanspy.grains.grain_interface import interfaces_of, is_grain_interface
from orleanspy.grains.interface import class_info

WAIT = 5.0


@grain_type("Cart")
class ICart(GrainInterface, Protocol):
    async def add(self, item: str, qty: int = 1) -> int: ...

    async def items(self) -> dict[str, int]: ...

    @one_way
    async def note(self, text: str) -> None: ...


class IAudited(GrainInterface, Protocol):
    """No @grain_type: its grain type is its class name."""

    async def audit(self) -> list[str]: ...


class CartGrain(Grain, ICart):
    def __init__(self) -> None:
        self.contents: dict[str, int] = {}
        self.notes: list[str] = []

    async def add(self, item: str, qty: int = 1, *, gift: bool = False) -> int:
        self.contents[item] = self.contents.get(item, 0) + qty
        return self.contents[item]

    async def items(self) -> dict[str, int]:
        return dict(self.contents)

    @one_way
    async def note(self, text: str) -> None:
        self.notes.append(text)
        self.silo.probe.record(("note", text))

    async def fill_through(self, other: str) -> int:
        """Calls another cart through the interface, from inside a grain."""
        return await self.get_grain(ICart, other).add("from " + str(self.key))


class AuditedGrain(Grain, IAudited):
    async def audit(self) -> list[str]:
        return [str(self.key)]


def silo_refusal(*grains: type) -> str:
    with pytest.raises(ConfigurationError) as caught:
        Silo(SiloOptions(gateway_port=None), grains=grains)
    return str(caught.value)


# -- declaring ----------------------------------------------------------------------------
def test_grain_interfaces_are_told_from_their_implementations():
    assert is_grain_interface(ICart)
    assert not is_grain_interface(CartGrain)
    assert not is_grain_interface(GrainInterface)
    assert interfaces_of(CartGrain) == [ICart]


def test_grain_interfaces_name_the_implementation_s_grain_type():
    assert class_info(CartGrain).type_name == "Cart"
    assert class_info(ICart).type_name == "Cart"
    assert class_info(AuditedGrain).type_name == "IAudited"


# -- calling ------------------------------------------------------------------------------
async def test_grain_interfaces_route_silo_references_to_the_implementation(make_silo):
    silo = await make_silo(CartGrain)
    cart = silo.get_grain(ICart, "alice")

    async with asyncio.timeout(WAIT):
        assert await cart.add("apple") == 1
        assert await cart.add("apple", 2) == 3
        assert await silo.get_grain(CartGrain, "alice").items() == {"apple": 3}

    assert len(silo.catalog) == 1


async def test_grain_interfaces_send_one_way_methods_one_way(make_silo, probe):
    silo = await make_silo(CartGrain)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(ICart, "a").note("hello") is None
        await probe.wait_logged(("note", "hello"))


async def test_grain_interfaces_from_inside_a_grain(make_silo):
    silo = await make_silo(CartGrain)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(CartGrain, "a").fill_through("b") == 1
        assert await silo.get_grain(ICart, "b").items() == {"from a": 1}


async def test_grain_interfaces_through_a_gateway_client(make_cluster):
    cluster = await make_cluster(CartGrain, AuditedGrain)
    cart = cluster.client.get_grain(ICart, "bob")

    async with asyncio.timeout(WAIT):
        assert await cart.add("pear", qty=4) == 4
        assert await cart.with_timeout(WAIT).items() == {"pear": 4}
        assert await cluster.client.get_grain(IAudited, "x").audit() == ["x"]
        assert await cluster.get_grain(CartGrain, "bob").items() == {"pear": 4}


async def test_grain_interfaces_reject_a_method_the_interface_lacks(make_cluster):
    cluster = await make_cluster(CartGrain)
    cart = cluster.client.get_grain(ICart, "c")

    with pytest.raises(AttributeError):
        _ = cart.fill_through  # not part of ICart: the reference has no such method


# -- what a silo refuses ------------------------------------------------------------------
def test_grain_interfaces_silo_refuses_a_missing_method():
    class Partial(Grain, ICart):
        async def add(self, item: str, qty: int = 1) -> int:
            return qty

        @one_way
        async def note(self, text: str) -> None: ...

    message = silo_refusal(Partial)

    assert "does not implement grain interface ICart" in message
    assert "method items: Partial does not define it" in message
    assert "define it in Partial as async def items(self) -> dict[str, int]" in message


def test_grain_interfaces_silo_names_every_problem_at_once():
    class Sketch(Grain, ICart):
        async def add(self, item: str) -> int:
            return 1

    lines = silo_refusal(Sketch).splitlines()

    assert [line.split(": ")[1] for line in lines] == ["method add", "method items",
                                                       "method note"]


def test_grain_interfaces_silo_refuses_a_plain_def():
    class Sync(Grain, IAudited):
        def audit(self) -> list[str]:  # type: ignore[override]
            return []

    message = silo_refusal(Sync)

    assert "grain interface IAudited: method audit: " in message
    assert "is not an async def method" in message


@pytest.mark.parametrize(
    ("signature", "problem"),
    [
        ("self, name: str, qty: int = 1", "parameter 1 is 'name', the interface's is 'item'"),
        ("self, item: str", "it takes no positional parameter 2 (qty)"),
        ("self, item: str, qty: int", "parameter 'qty' has a default in the interface"),
        ("self, item: str, qty: int = 1, *, who: str",
         "it requires 'who', which the interface does not pass"),
    ],
)
def test_grain_interfaces_silo_refuses_an_incompatible_signature(signature, problem):
    namespace: dict[str, object] = {}
    exec(f"async def add({signature}) -> int:\n    return 0", namespace)
    body = {"add": namespace["add"], "items": CartGrain.items, "note": CartGrain.note}
    bad = type("BadCart", (Grain, ICart), body)

    message = silo_refusal(bad)

    assert "method add: " in message
    assert problem in message
    assert "async def add(self, item: str, qty: int = 1) -> int" in message


def test_grain_interfaces_silo_refuses_a_one_way_mismatch():
    class Waits(Grain, ICart):
        async def add(self, item: str, qty: int = 1) -> int:
            return qty

        async def items(self) -> dict[str, int]:
            return {}

        async def note(self, text: str) -> None: ...

    message = silo_refusal(Waits)

    assert "method note: the interface's note is @one_way and the grain's disagrees" in message


def test_grain_interfaces_silo_refuses_another_type_name():
    body = {"add": CartGrain.add, "items": CartGrain.items, "note": CartGrain.note}
    renamed = grain_type("Basket")(type("Renamed", (Grain, ICart), body))
    twice = type("Twice", (Grain, ICart, IAudited), {**body, "audit": AuditedGrain.audit})

    assert "is named 'Basket' but implements grain interfaces of grain type 'Cart'" in (
        silo_refusal(renamed)
    )
    assert "implements grain interfaces of several grain types (Cart, IAudited)" in (
        silo_refusal(twice)
    )


def test_grain_interfaces_accept_their_own_type_name_and_extra_optional_parameters():
    # CartGrain.add takes a keyword-only ``gift`` with a default: still an implementation.
    body = {"add": CartGrain.add, "items": CartGrain.items, "note": CartGrain.note}
    same = grain_type("Cart")(type("Same", (Grain, ICart), body))

    assert class_info(same).type_name == "Cart"
