"""Correct use of grain references: passes ``mypy --strict`` with ``orleanspy.mypy_plugin``.

``make test`` type-checks this module; ``test_mypy_plugin.py`` also asserts it stays clean.
"""

from __future__ import annotations

from typing import Any, TypeVar

from orleanspy import ClusterClient, Grain, GrainRef, Silo
from orleanspy.streams import AsyncStream
from orleanspy.testing import TestCluster
from tests.typing.grains import Box, Counter, Doubler
from tests.typing.interfaces import ICart

C = TypeVar("C", bound=Counter)


class Caller(Grain):
    async def bump(self, key: str) -> int:
        counter: GrainRef[Counter] = self.get_grain(Counter, key)
        return await counter.increment(by=2)


async def calls(silo: Silo, client: ClusterClient, cluster: TestCluster) -> list[int]:
    ref = silo.get_grain(Counter, "a")
    results = [await ref.increment(), await ref.increment(5), await ref.get()]
    results.append(await ref.with_timeout(5).increment())
    results.append(await ref.with_timeout(0.5).with_timeout(2).get())
    await ref.reset()
    results.append(await ref.invoke("increment", 5))
    await ref.with_timeout(1).invoke_one_way("reset")
    results.append(await client.get_grain(Counter, 1).get())
    results.append(await cluster.get_grain(Doubler, "d").double())
    results.append(await cluster.get_grain(Doubler, "d").increment())
    return results


async def generic_grain(silo: Silo) -> str:
    box: GrainRef[Box[str]] = silo.get_grain(Box, "b")
    await box.put("hello")
    return await box.take()


async def bounded(ref: GrainRef[C]) -> int:
    return await ref.with_timeout(2).increment()


async def covariant(silo: Silo) -> GrainRef[Counter]:
    # A reference to a subclass is a reference to its base class.
    return silo.get_grain(Doubler, "d")


async def by_type_name(silo: Silo) -> Any:
    untyped = silo.get_grain("Counter", "a")
    return await untyped.with_timeout(1).anything_goes(1, 2)


class Publisher(Grain):
    """A grain's silo and stream providers are typed (with the plugin)."""

    async def publish(self, value: int) -> str:
        stream: AsyncStream[int] = self.get_stream_provider("s").get_stream("ns", "k", int)
        await stream.on_next(value)
        await stream.on_next_batch([value, value + 1])
        return f"{self.silo.name} at {self.silo.clock.monotonic():.0f}"


async def silo_streams(silo: Silo) -> None:
    stream = silo.get_stream_provider("s").get_stream("ns", 1, str)
    await stream.on_next("hello")


async def through_an_interface(silo: Silo, client: ClusterClient, cluster: TestCluster) -> int:
    # A grain interface types a reference without the grain class.
    cart: GrainRef[ICart] = client.get_grain(ICart, "alice")
    added = await cart.add("apple") + await cart.with_timeout(2).add("pear", qty=2)
    contents: dict[str, int] = await silo.get_grain(ICart, "alice").items()
    await cluster.get_grain(ICart, "bob").clear()
    return added + len(contents)


class Shopper(Grain):
    async def shop(self, key: str) -> int:
        return await self.get_grain(ICart, key).add("milk")


async def implementation_is_an_interface(silo: Silo) -> GrainRef[ICart]:
    # A reference to the implementing class is a reference to its interface.
    from tests.typing.grains import Cart

    return silo.get_grain(Cart, "c")
