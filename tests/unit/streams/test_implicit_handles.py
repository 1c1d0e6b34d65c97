"""Implicit subscriptions have handles: a grain finds its implicit subscription with
``get_subscriptions`` and resumes it from a checkpoint token (in ``on_activate`` or later);
it cannot unsubscribe it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions, StreamError, stream_handler
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.provider import implicit_subscription

WAIT = 10.0
GOT: list[tuple[str, int]] = []
TOKENS: dict[int, Any] = {}
CHECKPOINT: dict[str, Any] = {}
ARRIVED: dict[tuple[str, int], asyncio.Event] = {}
RELEASE: dict[str, asyncio.Event] = {}


def arrived(how: str, item: int) -> asyncio.Event:
    return ARRIVED.setdefault((how, item), asyncio.Event())


@implicit_subscription("arch")
class Archive(Grain):
    async def on_activate(self) -> None:
        token = CHECKPOINT.get(self.key)
        if token is not None:  # resume from the checkpoint, as after a crash
            (handle,) = await self.stream().get_subscriptions()
            await handle.resume(self.again, token)

    def stream(self) -> Any:
        return self.get_stream_provider("s").get_stream("arch", self.key)

    async def on_next(self, item: int, token: Any) -> None:
        GOT.append(("first", item))
        TOKENS[item] = token
        arrived("first", item).set()

    @stream_handler
    async def again(self, item: int, token: Any) -> None:
        GOT.append(("again", item))
        arrived("again", item).set()

    async def handles(self) -> list[str]:
        return [h.sub_id for h in await self.stream().get_subscriptions()]

    async def rewind(self, token: Any) -> None:
        (handle,) = await self.stream().get_subscriptions()
        assert handle.implicit
        await handle.resume(self.again, token)

    async def try_unsubscribe(self) -> None:
        (handle,) = await self.stream().get_subscriptions()
        await handle.unsubscribe()

    async def leave(self) -> None:
        self.deactivate_on_idle()


class Holder(Grain):
    """An explicit subscriber that keeps the stream's events cached until released."""

    async def join(self, key: str) -> None:
        await self.get_stream_provider("s").get_stream("arch", key).subscribe(self.hold)

    @stream_handler
    async def hold(self, item: int, token: Any) -> None:
        await RELEASE[self.key].wait()


@pytest.fixture
async def silo() -> Any:
    GOT.clear()
    TOKENS.clear()
    CHECKPOINT.clear()
    ARRIVED.clear()
    RELEASE.clear()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(), StreamProviderOptions(total_queues=1, pull_period=0.01))
    s = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Archive, Holder],
             stream_providers={"s": provider})
    await s.start()
    yield s
    for event in RELEASE.values():
        event.set()
    await s.stop()


async def publish(silo: Silo, key: str, items: range) -> None:
    stream = silo.stream_providers["s"].get_stream("arch", key)
    for i in items:
        await stream.on_next(i)


async def wait(how: str, item: int) -> None:
    async with asyncio.timeout(WAIT):
        await arrived(how, item).wait()


async def test_an_implicit_subscription_is_listed_and_cannot_be_unsubscribed(silo: Silo) -> None:
    archive = silo.get_grain(Archive, "a")
    assert await archive.handles() == ["implicit:Archive"]
    with pytest.raises(StreamError, match="implicit"):
        await archive.try_unsubscribe()


async def test_an_implicit_subscription_resumes_from_a_checkpoint_token(silo: Silo) -> None:
    RELEASE["h"] = asyncio.Event()
    await silo.get_grain(Holder, "h").join("b")  # keeps the events cached
    await publish(silo, "b", range(10))
    await wait("first", 9)
    await silo.get_grain(Archive, "b").rewind(TOKENS[5])
    await wait("again", 9)
    assert [i for how, i in GOT if how == "again"] == [5, 6, 7, 8, 9]


async def test_a_reactivated_implicit_consumer_resumes_in_on_activate(silo: Silo) -> None:
    RELEASE["h"] = asyncio.Event()
    await silo.get_grain(Holder, "h").join("c")
    await publish(silo, "c", range(10))
    await wait("first", 9)
    CHECKPOINT["c"] = TOKENS[6]
    await silo.get_grain(Archive, "c").leave()
    await publish(silo, "c", range(10, 12))  # its delivery activates the grain again
    await wait("again", 11)
    again = [i for how, i in GOT if how == "again"]
    assert again[again.index(6):] == [6, 7, 8, 9, 10, 11]
