"""SiloTransport and SiloConnection on loopback: timeouts and the sweep run on the silo's clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from orleanspy.cluster.transport import SiloTransport
from orleanspy.errors import GrainCallTimeoutError
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.logging import get_logger
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.message import Direction, Message
from orleanspy.testing import FakeClock

WAIT = 5.0


class Pair:
    """Two transports on one fake clock; ``held`` keeps the requests ``b`` never answers."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.held: list[Message] = []
        self.arrived = asyncio.Event()
        self.a = self._transport(SiloAddress("127.0.0.1", 0, 1))
        self.b = self._transport(SiloAddress("127.0.0.1", 0, 2))

    def _transport(self, silo: SiloAddress) -> SiloTransport:
        return SiloTransport(
            silo, Codec(), get_logger("test"), cluster_id="t", secret=None, key=b"k" * 32,
            max_frame_size=1 << 20, default_timeout=10.0, deliver=self._hold,
            clock=self.clock,
        )

    def _hold(self, msg: Message, sender: SiloAddress | None) -> None:
        self.held.append(msg)
        self.arrived.set()

    async def start(self) -> None:
        for transport in (self.a, self.b):
            port = await transport.listen("127.0.0.1", 0)
            transport.set_address(SiloAddress("127.0.0.1", port, transport.silo.generation))


@pytest_asyncio.fixture
async def pair() -> AsyncIterator[Pair]:
    p = Pair(FakeClock())
    await p.start()
    yield p
    await p.a.close()
    await p.b.close()


async def test_transport_control_request_times_out_on_the_clock(pair: Pair) -> None:
    never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def hang() -> Any:
        return await never

    pair.b.handlers["hang"] = hang
    request = asyncio.create_task(pair.a.request(pair.b.silo, "hang", [], timeout=5.0))
    pair.a.handlers["ping"] = lambda: True
    assert await pair.b.request(pair.a.silo, "ping", []) is True  # connected both ways

    await pair.clock.run_for(4.0)
    assert not request.done()
    await pair.clock.run_for(1.5)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(WAIT):
            await request
    never.cancel()


async def test_transport_sweep_fails_an_unanswered_call_after_its_timeout(pair: Pair) -> None:
    outcome: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
    msg = Message(Direction.REQUEST, GrainId("T", "k"), "m", [], None, timeout=3.0)
    msg.reply = lambda ok, value: outcome.set_result((ok, value))
    pair.a.send_message(pair.b.silo, msg)
    async with asyncio.timeout(WAIT):
        await pair.arrived.wait()  # the request reached b, which never answers

    await pair.clock.run_for(3.0)  # the timeout passed, the grace not yet
    assert not outcome.done()
    await pair.clock.run_for(2.0)  # timeout + grace + the next sweep
    async with asyncio.timeout(WAIT):
        ok, value = await outcome
    assert not ok
    assert isinstance(value, GrainCallTimeoutError)
    assert pair.a.statistics().pending == 0


async def test_transport_writes_a_lone_request_at_once_and_coalesces_calls_in_flight(
    pair: Pair,
) -> None:
    """The one call in flight goes out in its own send (sequential calls keep one round trip);
    requests sent while others are in flight wait for the loop pass and go out together."""
    pair.a.handlers["ping"] = lambda: True
    pair.b.handlers["ping"] = lambda: True
    assert await pair.a.request(pair.b.silo, "ping", []) is True  # a's connection to b
    conn = pair.a._conns[pair.b.silo]
    writes: list[bytes] = []
    write = conn.transport.write
    conn.transport.write = lambda data: (writes.append(bytes(data)), write(data))  # type: ignore[method-assign]

    def request(key: str) -> Message:
        msg = Message(Direction.REQUEST, GrainId("T", key), "m", [], None, timeout=30.0)
        msg.reply = lambda ok, value: None
        return msg

    pair.a.send_message(pair.b.silo, request("first"))
    assert len(writes) == 1  # alone in flight: written in the call itself
    pair.a.send_message(pair.b.silo, request("second"))
    pair.a.send_message(pair.b.silo, request("third"))
    assert len(writes) == 1  # two more in flight: held for the end of the loop pass
    async with asyncio.timeout(WAIT):
        while len(pair.held) < 3:
            pair.arrived.clear()
            await pair.arrived.wait()
    assert len(writes) == 2  # the two went out in one write
    pair.a.send_message(pair.b.silo, request("fourth"))
    assert len(writes) == 2  # a later pass, three calls still in flight: not alone either
    async with asyncio.timeout(WAIT):
        while len(pair.held) < 4:
            pair.arrived.clear()
            await pair.arrived.wait()
    assert len(writes) == 3
    assert [m.target.key for m in pair.held] == ["first", "second", "third", "fourth"]


async def test_transport_quiesce_wakes_when_the_last_call_is_answered(pair: Pair) -> None:
    """A stopping silo waits for its calls in flight, both ways; the last answer wakes it at
    once (the clock stands still here: a waiting loop on it would never end)."""
    answered: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
    msg = Message(Direction.REQUEST, GrainId("T", "k"), "m", [], None, timeout=30.0)
    msg.reply = lambda ok, value: answered.set_result((ok, value))
    pair.a.send_message(pair.b.silo, msg)
    async with asyncio.timeout(WAIT):
        await pair.arrived.wait()
    waiting = [asyncio.create_task(t.quiesce(60.0)) for t in (pair.a, pair.b)]
    for _ in range(20):  # loop passes go by, the clock stands still: nothing ends them
        await asyncio.sleep(0)
    assert not any(task.done() for task in waiting)

    held = pair.held[0]
    assert held.reply is not None and held.body is not None  # the arguments still encoded
    held.reply(True, "done")
    async with asyncio.timeout(WAIT):
        assert await answered == (True, "done")
        await asyncio.gather(*waiting)
    assert pair.a.statistics().pending == 0


async def test_transport_quiesce_returns_at_once_with_nothing_in_flight(pair: Pair) -> None:
    async with asyncio.timeout(WAIT):
        await pair.a.quiesce(60.0)
