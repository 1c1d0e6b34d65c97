"""A client is the id it proved on its connection, against two real silo processes.

The silos share SQLite membership, grain storage and the SQLite stream queue
(``test_cluster_streams``' setup). A victim client subscribes to a stream through one gateway.
An attacker that holds the client secret and knows the victim's id (it is shown in
``/metrics`` labels and subscription ids) cannot connect as the victim: a handshake naming
the id without the key it is derived from is refused and logged. Connected as itself, it
cannot poll or unsubscribe the victim's subscription either. The victim then loses its
gateway and goes on through the other one, which checks its id with no state shared with the
first, and it keeps receiving every event. Minting ids gives a connection nothing beyond
its own id's subscription cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from orleanspy import ClusterClient
from orleanspy.errors import MessageRejectedError
from orleanspy.messaging.bodies import encode_body
from orleanspy.messaging.client_identity import CLIENT_KEY_SIZE, client_handshake, client_id_of
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.frames import PROTOCOL_VERSION, Request
from orleanspy.options import ClientOptions
from orleanspy.runtime.gateway import CLIENT_CONSUMER_TYPE

from .silo_process import SiloLauncher, SiloProcess, poll_until
from .test_cluster_streams import APP, CLUSTER, CONFIG, FAST, wait_balanced

pytestmark = pytest.mark.integration

SECRET = "client-secret"
CAP = 3  # the provider's max_client_subscriptions
WAIT = 20.0  # bound on one wait on a loaded 2-core machine


async def start_silo(launcher: SiloLauncher, config: Path) -> SiloProcess:
    return await launcher.start(
        "--membership", "sqlite:membership.db", "--cluster-id", CLUSTER, "--secret", SECRET,
        "--storage", "sqlite:grains.db", "--reminders", "memory", "--config", str(config),
        *FAST, app=APP,
    )


def frame(obj: Any) -> bytes:
    payload = msgpack.packb(obj)
    return len(payload).to_bytes(4, "big") + payload


async def read_frame(reader: asyncio.StreamReader) -> Any:
    size = int.from_bytes(await reader.readexactly(4), "big")
    return msgpack.unpackb(await reader.readexactly(size), raw=False)


async def raw_hello(silo: SiloProcess, hello: dict[str, Any]) -> Any:
    """The gateway's answer to ``hello``, and whether it closed the connection after a
    refusal."""
    host, port = silo.gateway_host_port
    reader, writer = await asyncio.open_connection(host, port)
    try:
        async with asyncio.timeout(WAIT):
            writer.write(frame(hello))
            reply = await read_frame(reader)
            closed = not reply.get("ok") and await reader.read(1) == b""
        return reply, closed
    finally:
        writer.close()
        await writer.wait_closed()


class RawClient:
    """A connection that proved the id of ``key`` and sends requests as it likes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.codec = Codec()
        self.corr = 0

    async def call(self, type_name: str, key: Any, method: str, *args: Any) -> tuple[bool, Any]:
        self.corr += 1
        self.writer.write(len(payload := Request.pack(
            self.codec, False, self.corr, type_name, key, method, 10.0, [], 0, True,
            encode_body(self.codec, args, None),
        )).to_bytes(4, "big") + payload)
        async with asyncio.timeout(WAIT):
            reply = await read_frame(self.reader)
        assert reply[:2] == [2, self.corr]
        return reply[2], self.codec.unpackb(reply[3])


@contextlib.asynccontextmanager
async def raw_client(silo: SiloProcess, key: bytes) -> AsyncIterator[RawClient]:
    host, port = silo.gateway_host_port
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(frame(client_handshake(CLUSTER, SECRET, key)))
        async with asyncio.timeout(WAIT):
            assert (await read_frame(reader))["ok"] is True
        yield RawClient(reader, writer)
    finally:
        writer.close()
        await writer.wait_closed()


async def test_an_attacker_with_a_victims_id_gets_nothing_and_the_victim_fails_over(
    silo_launcher: SiloLauncher,
) -> None:
    config = silo_launcher.data_dir / "streams.toml"
    silo_launcher.data_dir.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG + f"max_client_subscriptions = {CAP}\n")
    silos = [await start_silo(silo_launcher, config) for _ in range(2)]
    await wait_balanced(silo_launcher.data_dir, silos, timeout=WAIT)
    victim = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, secret=SECRET, gateways=tuple(s.gateway for s in silos),
        # one gateway at a time, and a lost one is not retried during the test: when the
        # victim loses the first, it opens a connection to the other
        gateway_count=1, reconnect_delay=60.0, reconnect_delay_max=60.0,
    ))
    attacker = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, secret=SECRET, gateways=tuple(s.gateway for s in silos),
    ))
    got: list[int] = []

    async def on_next(item: int, token: Any) -> None:
        got.append(item)

    async def produce(start: int, count: int) -> None:
        await victim.get_grain("FeedProducer", "id").produce(start, count)

    async def received(n: int) -> None:
        await poll_until(lambda: asyncio.sleep(0, sorted(set(got))),
                         lambda seen: seen == list(range(n)), timeout=WAIT, interval=0.05)

    try:
        await victim.connect()
        handle = await victim.get_stream_provider("s").get_stream("feed", "id").subscribe(
            on_next)
        await produce(0, 10)
        await received(10)
        # the gateway the victim is connected to ("A"), and the other ("B")
        [conn] = victim._pool.live
        a = next(s for s in silos if s.gateway == conn.address)
        b = next(s for s in silos if s is not a)

        # 1. the victim's id without its key, or with another key: refused, and logged
        bare = {"v": PROTOCOL_VERSION, "cluster": CLUSTER, "secret": SECRET,
                "client": victim.client_id}
        forged = {**client_handshake(CLUSTER, SECRET), "client": victim.client_id}
        for silo in (a, b):
            for hello in (bare, forged):
                reply, closed = await raw_hello(silo, hello)
                assert reply["ok"] is False and closed, reply
            assert "no client key" in reply["error"] or "not the id" in reply["error"]
        await poll_until(lambda: asyncio.sleep(0, a.log_text()),
                         lambda log: "is not the id of the key presented" in log
                         and "gateway_handshake_rejected" in log, timeout=WAIT, interval=0.1)

        # 2. connected as itself, the attacker reaches nothing of the victim's
        await attacker.connect()
        spy = attacker.get_grain(CLIENT_CONSUMER_TYPE, victim.client_id)
        for attempt in (lambda: spy.poll(0.5), lambda: spy.unsubscribe(handle.sub_id),
                        spy.leave, lambda: spy.ack(1, True)):
            with pytest.raises(MessageRejectedError, match="another client"):
                await attempt()
        await produce(10, 10)
        await received(20)  # every event went to the victim, none was taken by a spy poll

        # 3. the victim loses gateway A and connects to B, which checks its id with nothing
        # shared with A, and the victim's subscription goes on there
        conn.close()
        assert await victim.wait_gateways(lambda g: g == [b.gateway], timeout=WAIT)
        await produce(20, 20)
        await received(40)
        assert victim.connected_gateways == [b.gateway]
        assert len(await victim.get_stream_provider("s").get_stream("feed", "id")
                   .get_subscriptions()) == 1

        # 4. minting ids: a connection acts as the one id it proved, up to that id's cap
        key = os.urandom(CLIENT_KEY_SIZE)
        own = client_id_of(key)
        minted = [client_id_of(os.urandom(CLIENT_KEY_SIZE)) for _ in range(4)]
        async with raw_client(b, key) as raw:
            for n in range(CAP):
                ok, sub = await raw.call(CLIENT_CONSUMER_TYPE, own, "subscribe", "s", "feed",
                                         f"m{n}", f"p{n}")
                assert ok and sub == f"{own}/p{n}", sub
            ok, error = await raw.call(CLIENT_CONSUMER_TYPE, own, "subscribe", "s", "feed",
                                       "m9", "p9")
            assert not ok and "max_client_subscriptions" in error["message"], error
            for other in minted:
                ok, error = await raw.call(CLIENT_CONSUMER_TYPE, other, "subscribe", "s",
                                           "feed", "m0", "p0")
                assert not ok and "another client" in error["message"], error
            ok, subs = await raw.call(CLIENT_CONSUMER_TYPE, own, "subscriptions", "s", "feed",
                                      "m0")
            assert ok and subs == [f"{own}/p0"]
    finally:
        await attacker.close()
        await victim.close()
