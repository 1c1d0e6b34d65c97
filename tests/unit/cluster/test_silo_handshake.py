"""The silo port's handshake: both ends prove the cluster key, the claim is checked against
membership, tools are read-only, and unauthenticated peers are bounded."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest
import pytest_asyncio

from orleanspy.cluster.connection import TOOL_OPERATIONS, same_host, silo_key
from orleanspy.cluster.query import query_silo
from orleanspy.cluster.transport import SiloTransport, encode_silo
from orleanspy.errors import MessageRejectedError, SiloUnavailableError
from orleanspy.ids import SiloAddress
from orleanspy.logging import get_logger
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.frames import PROTOCOL_VERSION, REQUEST
from orleanspy.messaging.message import Message
from orleanspy.testing import FakeClock

WAIT = 5.0
KEY = silo_key(b"the cluster key of these tests")


class Cluster:
    """Transports on one fake clock; ``members`` is what their membership check accepts."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.members: set[SiloAddress] = set()
        self.transports: list[SiloTransport] = []

    async def transport(self, key: bytes | None = KEY, *, member: bool = True,
                        generation: int = 1, **kwargs: Any) -> SiloTransport:
        t = SiloTransport(
            SiloAddress("127.0.0.1", 0, generation), Codec(), get_logger("test"),
            cluster_id="t", secret="client-secret", key=key, max_frame_size=1 << 20,
            default_timeout=10.0, deliver=self._deliver, clock=self.clock,
            verify_peer=self._verify, **kwargs,
        )
        port = await t.listen("127.0.0.1", 0)
        t.set_address(SiloAddress("127.0.0.1", port, generation))
        t.handlers["ping"] = lambda: "pong"
        t.handlers["status"] = lambda: {"silo": str(t.silo)}
        t.handlers["dir"] = lambda *args: "changed"
        if member:
            self.members.add(t.silo)
        self.transports.append(t)
        return t

    async def _verify(self, silo: SiloAddress) -> str | None:
        return None if silo in self.members else f"silo {silo} is not a member"

    def _deliver(self, msg: Message, sender: SiloAddress | None) -> None:
        if msg.reply is not None:
            msg.reply(True, "delivered")

    async def close(self) -> None:
        for t in self.transports:
            await t.close()


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[Cluster]:
    c = Cluster()
    yield c
    await c.close()


async def raw_exchange(port: int, *frames: Any, read: int = 1) -> list[Any]:
    """Send msgpack ``frames`` to the silo port, read ``read`` frames back (fewer if it
    closes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    out: list[Any] = []
    try:
        async with asyncio.timeout(WAIT):
            for obj in frames:
                data = msgpack.packb(obj)
                writer.write(len(data).to_bytes(4, "big") + data)
            await writer.drain()
            for _ in range(read):
                try:
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    out.append(msgpack.unpackb(await reader.readexactly(size)))
                except asyncio.IncompleteReadError:
                    break
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return out


async def test_silos_holding_the_key_connect_and_call(cluster: Cluster) -> None:
    a, b = await cluster.transport(), await cluster.transport(generation=2)
    async with asyncio.timeout(WAIT):
        assert await a.request(b.silo, "ping", []) == "pong"
        assert await b.request(a.silo, "ping", []) == "pong"


async def test_a_silo_with_another_key_is_refused_both_ways(cluster: Cluster) -> None:
    a = await cluster.transport()
    intruder = await cluster.transport(key=silo_key(b"some other key"), generation=2)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SiloUnavailableError, match="cluster key"):
            await intruder.request(a.silo, "ping", [])
        with pytest.raises(SiloUnavailableError, match="cluster key"):
            await a.request(intruder.silo, "ping", [])


async def test_a_claim_membership_does_not_list_is_refused(cluster: Cluster) -> None:
    a = await cluster.transport()
    stranger = await cluster.transport(member=False, generation=2)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SiloUnavailableError, match="not a member"):
            await stranger.request(a.silo, "ping", [])


async def test_a_claim_of_another_silo_without_the_key_is_refused(cluster: Cluster) -> None:
    a, b = await cluster.transport(), await cluster.transport(generation=2)
    # The attacker knows the client secret and b's address, not the cluster key.
    hello = {"v": PROTOCOL_VERSION,
             "cluster": "t", "secret": "client-secret", "silo": encode_silo(b.silo),
             "to": encode_silo(a.silo), "nonce": os.urandom(32)}
    challenge, verdict = await raw_exchange(
        a.port, hello, {"v": PROTOCOL_VERSION, "proof": os.urandom(32)}, read=2
    )
    assert isinstance(challenge["challenge"], bytes)
    assert verdict["ok"] is False
    assert "cluster key" in verdict["error"]
    assert not any(conn.peer_silo == b.silo for conn in a._all)  # nothing was registered
    async with asyncio.timeout(WAIT):
        assert await a.request(b.silo, "ping", []) == "pong"


async def test_a_hello_without_a_nonce_is_refused(cluster: Cluster) -> None:
    a, b = await cluster.transport(), await cluster.transport(generation=2)
    hello = {"v": PROTOCOL_VERSION,
             "cluster": "t", "silo": encode_silo(b.silo), "to": encode_silo(a.silo)}
    (verdict,) = await raw_exchange(a.port, hello)
    assert verdict["ok"] is False
    assert "nonce" in verdict["error"]


async def test_a_tool_may_ask_status_and_nothing_else(cluster: Cluster) -> None:
    a = await cluster.transport()
    async with asyncio.timeout(WAIT):
        status = await query_silo("127.0.0.1", a.port, "status", [], cluster_id="t",
                                  secret="client-secret", clock=cluster.clock)
        assert status == {"silo": str(a.silo)}
        for op in ("dir", "ping", "gossip", "probe"):
            assert op not in TOOL_OPERATIONS
            with pytest.raises(MessageRejectedError, match="read-only"):
                await query_silo("127.0.0.1", a.port, op, [], cluster_id="t",
                                 secret="client-secret", clock=cluster.clock)
        with pytest.raises(SiloUnavailableError, match="secret"):
            await query_silo("127.0.0.1", a.port, "status", [], cluster_id="t",
                             secret="wrong", clock=cluster.clock)


async def test_a_tool_may_not_send_grain_requests(cluster: Cluster) -> None:
    a = await cluster.transport()
    hello = {"v": PROTOCOL_VERSION,
             "cluster": "t", "secret": "client-secret", "silo": None, "to": None}
    request = [REQUEST, 1, "Counter", "k", "add", 5.0, [], 0, False,
               msgpack.packb([[1], None])]
    replies = await raw_exchange(a.port, hello, request, read=2)
    assert replies[0]["ok"] is True
    assert len(replies) == 1  # the connection was closed instead of answering


async def test_a_silo_without_a_key_accepts_only_tools(cluster: Cluster) -> None:
    keyless = await cluster.transport(key=None)
    other = await cluster.transport(generation=2)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SiloUnavailableError, match="no cluster key"):
            await other.request(keyless.silo, "ping", [])
        with pytest.raises(SiloUnavailableError, match="no cluster key"):
            await keyless.request(other.silo, "ping", [])


async def test_an_idle_connection_is_closed_at_the_handshake_deadline(cluster: Cluster) -> None:
    a = await cluster.transport(handshake_timeout=3.0)
    assert a.guard is not None
    accepted = asyncio.Event()
    admit = a.guard.admit

    def admit_and_tell(conn: Any) -> None:
        admit(conn)
        accepted.set()

    a.guard.admit = admit_and_tell  # type: ignore[method-assign]
    reader, writer = await asyncio.open_connection("127.0.0.1", a.port)
    try:
        async with asyncio.timeout(WAIT):
            await accepted.wait()
        await cluster.clock.run_for(2.9)
        assert a.guard.pending == 1
        await cluster.clock.run_for(0.2)
        async with asyncio.timeout(WAIT):
            assert await reader.read() == b""  # closed by the silo
        assert a.guard.timed_out == 1
    finally:
        writer.close()


async def test_a_large_frame_before_the_handshake_closes_at_its_header(cluster: Cluster) -> None:
    a = await cluster.transport()
    reader, writer = await asyncio.open_connection("127.0.0.1", a.port)
    try:
        writer.write((16 * 1024 * 1024).to_bytes(4, "big") + b"x" * 100)
        async with asyncio.timeout(WAIT):
            assert await reader.read() == b""
    finally:
        writer.close()


async def test_the_longest_waiting_connection_makes_room(cluster: Cluster) -> None:
    a = await cluster.transport(max_pending_handshakes=2)
    b = await cluster.transport(generation=2)
    idle = [await asyncio.open_connection("127.0.0.1", a.port) for _ in range(3)]
    try:
        async with asyncio.timeout(WAIT):
            assert await idle[0][0].read() == b""  # evicted by the third
            assert await a.request(b.silo, "ping", []) == "pong"  # still reachable
            assert await b.request(a.silo, "ping", []) == "pong"
        assert a.guard is not None and a.guard.evicted >= 1
    finally:
        for _, writer in idle:
            writer.close()


@pytest.mark.parametrize(("claimed", "actual", "ok"), [
    ("127.0.0.1", "127.0.0.1", True),
    ("127.0.0.1", "127.0.0.2", True),
    ("10.0.0.1", "::ffff:10.0.0.1", True),
    ("silo-a.internal", "10.0.0.9", True),
    ("10.0.0.1", "10.0.0.2", False),
    ("10.0.0.1", "127.0.0.1", False),
])
def test_same_host(claimed: str, actual: str, ok: bool) -> None:
    assert same_host(claimed, actual) is ok
