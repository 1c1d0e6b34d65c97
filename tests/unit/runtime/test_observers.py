"""Observers in one process, through a real gateway: a client makes an observer reference
from a plain object, a grain keeps it in an ``ObserverManager`` and calls it back; calls run
on the object in order; a deleted observer gets nothing more; expired observers are
dropped; one client cannot reach another's observer hub.

Every wait is bounded; the calls' arrival is awaited as events, never slept for.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import pytest

from orleanspy import Grain, GrainInterface, MessageRejectedError, ObserverManager
from orleanspy.grains.observer import OBSERVER_HUB_TYPE
from orleanspy.ids import GrainId
from orleanspy.testing import TestCluster

WAIT = 5.0


class IChat(GrainInterface, Protocol):
    async def receive(self, text: str) -> None: ...


class Room(Grain):
    async def on_activate(self) -> None:
        self.members = ObserverManager(expiry=60.0, clock=self.silo.clock.monotonic)

    async def join(self, member: IChat) -> int:
        self.members.subscribe(member)
        return len(self.members)

    async def leave(self, member: IChat) -> None:
        self.members.unsubscribe(member)

    async def say(self, text: str) -> int:
        return await self.members.notify("receive", text)


class Listener:
    def __init__(self) -> None:
        self.heard: list[str] = []
        self.changed = asyncio.Event()

    async def receive(self, text: str) -> None:
        self.heard.append(text)
        self.changed.set()

    async def wait_for(self, count: int) -> list[str]:
        async with asyncio.timeout(WAIT):
            while len(self.heard) < count:
                self.changed.clear()
                await self.changed.wait()
        return self.heard


async def test_a_grain_calls_a_clients_observers_in_order():
    async with TestCluster(grains=[Room]) as cluster:
        client = cluster.client
        alice, bob = Listener(), Listener()
        room = client.get_grain(Room, "lobby")
        a = client.create_observer(alice, IChat)
        assert await room.join(a) == 1
        assert await room.join(client.create_observer(bob)) == 2  # untyped: any method
        assert await room.join(a) == 2  # subscribing again renews, does not add
        for i in range(50):
            assert await room.say(f"m{i}") == 2
        expected = [f"m{i}" for i in range(50)]
        assert await alice.wait_for(50) == expected
        assert await bob.wait_for(50) == expected

        await client.delete_observer(a)
        await room.say("after")
        assert await bob.wait_for(51) == [*expected, "after"]
        assert alice.heard == expected  # deleted: nothing more


async def test_observers_that_do_not_subscribe_again_expire():
    now = [0.0]
    members = ObserverManager(expiry=60.0, clock=lambda: now[0])
    heard: list[tuple[str, str]] = []

    class Member:
        def __init__(self, name: str) -> None:
            self.name = name

        async def receive(self, text: str) -> None:
            heard.append((self.name, text))

    a, b = Member("a"), Member("b")
    members.subscribe(a)
    now[0] = 30.0
    members.subscribe(b)
    now[0] = 59.0
    assert await members.notify("receive", "both") == 2
    now[0] = 60.0  # a subscribed 60 s ago: gone
    assert await members.notify("receive", "b only") == 1
    members.subscribe(a)  # back
    members.unsubscribe(b)
    assert list(members) == [a]
    assert heard == [("a", "both"), ("b", "both"), ("b", "b only")]


async def test_a_client_cannot_poll_another_clients_observer_hub():
    async with TestCluster(grains=[Room]) as cluster:
        other = GrainId(OBSERVER_HUB_TYPE, "client-someone-else")
        with pytest.raises(MessageRejectedError, match="belongs to another client"):
            await cluster.client.call(other, "poll", (0.0, 0), None, WAIT)


def test_observer_manager_needs_a_positive_expiry():
    with pytest.raises(ValueError, match="expiry"):
        ObserverManager(expiry=0, clock=lambda: 0.0)
    assert isinstance(ObserverManager(expiry=1, clock=lambda: 0.0).expiry, (int, float))


