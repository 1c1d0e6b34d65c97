"""Implicit subscriptions have handles: a grain finds its implicit subscription with
``get_subscriptions`` and resumes it from a checkpoint token (in ``on_activate`` or later);
it cannot unsubscribe it. A consumer that resumes from its checkpoint and ignores the tokens
at or before it (the pattern docs/streams.md recommends) gets every event once, in order:
the delivery that activated it, stale once it resumed, is refused."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions, StreamError, stream_handler
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.pubsub import PubSubRendezvous

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


#: CheckpointArchive's durable state per key: (checkpoint token, items), and the last item
#: whose state write succeeds (the writes after it are lost, as in a crash)
STORE: dict[str, tuple[Any, list[int]]] = {}
PERSIST_UP_TO = [0]


@implicit_subscription("cp")
class CheckpointArchive(Grain):
    """The checkpoint-only consumer: resumes from its checkpoint in ``on_activate`` and
    ignores the tokens at or before it."""

    async def on_activate(self) -> None:
        checkpoint, items = STORE.get(self.key, (None, []))
        self.checkpoint, self.items = checkpoint, list(items)
        if checkpoint is not None:
            stream = self.get_stream_provider("s").get_stream("cp", self.key)
            (handle,) = await stream.get_subscriptions()
            await handle.resume(self.on_next, checkpoint)

    async def on_next(self, item: int, token: Any) -> None:
        if self.checkpoint is not None and token <= self.checkpoint:
            return  # handled before the checkpoint
        self.items.append(item)
        self.checkpoint = token
        if item <= PERSIST_UP_TO[0]:
            STORE[self.key] = (token, list(self.items))
        arrived(f"cp-{self.key}", item).set()

    async def leave(self) -> None:
        self.deactivate_on_idle()


class Holder(Grain):
    """An explicit subscriber that keeps the stream's events cached until released."""

    async def join(self, key: str, namespace: str = "arch") -> None:
        await self.get_stream_provider("s").get_stream(namespace, key).subscribe(self.hold)

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
    STORE.clear()
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(), StreamProviderOptions(total_queues=1, pull_period=0.01))
    s = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
             grains=[Archive, CheckpointArchive, Holder], stream_providers={"s": provider})
    await s.start()
    yield s
    for event in RELEASE.values():
        event.set()
    await s.stop()


async def publish(silo: Silo, key: str, items: range, namespace: str = "arch") -> None:
    stream = silo.stream_providers["s"].get_stream(namespace, key)
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
    assert again == [6, 7, 8, 9, 10, 11]  # the delivery of 10 that activated it was refused


async def test_a_checkpoint_consumer_resumed_on_activation_gets_every_event_once_in_order(
    silo: Silo,
) -> None:
    """Each consumer handled 0..98 but its state writes after 90 were lost; it deactivates.
    Event 99 activates it; it resumes from its checkpoint (90). The delivery of 99 that
    activated it is refused: 91..98 come first, then 99, and the state holds 0..99."""
    keys = ["k0", "k1", "k2"]
    PERSIST_UP_TO[0] = 90
    for key in keys:
        RELEASE[key] = asyncio.Event()
        await silo.get_grain(Holder, key).join(key, "cp")  # keeps the events cached
        await publish(silo, key, range(99), "cp")
    for key in keys:
        await wait(f"cp-{key}", 98)
        await silo.get_grain(CheckpointArchive, key).leave()
    PERSIST_UP_TO[0] = 10**9
    for key in keys:
        await publish(silo, key, range(99, 100), "cp")
    for key in keys:
        await wait(f"cp-{key}", 99)
        _, items = STORE[key]
        assert items == list(range(100)), key  # 100 of 100, in order


async def test_an_agent_that_missed_a_resume_is_refused_and_serves_the_resumed_token(
    silo: Silo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rendezvous does not pass the resume on (as if the agent had not heard of it): the
    agent's next delivery lacks the resume's handshake, the grain refuses it, and the agent
    serves the subscription from the token the grain asked for."""
    RELEASE["h"] = asyncio.Event()
    await silo.get_grain(Holder, "h").join("d")
    await publish(silo, "d", range(10))
    await wait("first", 9)

    async def not_passed_on(self: Any, record: Any) -> None:
        return None

    monkeypatch.setattr(PubSubRendezvous, "resume_implicit", not_passed_on)
    await silo.get_grain(Archive, "d").rewind(TOKENS[5])
    await publish(silo, "d", range(10, 11))
    await wait("again", 10)
    assert [i for how, i in GOT if how == "again"] == [5, 6, 7, 8, 9, 10]
    assert 10 not in [i for how, i in GOT if how == "first"]
