"""A misbehaving connection is closed alone: the silo and every other client keep working."""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import msgpack
import pytest

from orleanspy.messaging.client_identity import client_handshake
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.frames import PROTOCOL_VERSION, Request

from .silo_process import SiloLauncher, SiloProcess

pytestmark = pytest.mark.integration

SECRET = "s3cret"
MAX_FRAME = 16 * 1024 * 1024  # SiloOptions.max_frame_size default


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def handshake(secret: str | None, cluster: str = "dev",
              version: int = PROTOCOL_VERSION) -> bytes:
    return frame(msgpack.packb({**client_handshake(cluster, secret), "v": version}))


async def send_and_read_until_closed(silo: SiloProcess, *chunks: bytes) -> bytes:
    """Send ``chunks`` on a fresh connection; return what the silo sent before closing it.

    Fails if the silo keeps the connection open for 5 s.
    """
    host, port = silo.gateway_host_port
    reader, writer = await asyncio.open_connection(host, port)
    received = b""
    try:
        async with asyncio.timeout(5):
            for chunk in chunks:
                writer.write(chunk)
                await writer.drain()
            while data := await reader.read(65536):
                received += data
    except (ConnectionResetError, BrokenPipeError):
        pass  # closed with unread input pending: the kernel resets instead of FIN
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return received


def handshake_reply(data: bytes) -> dict[str, object]:
    size = int.from_bytes(data[:4], "big")
    reply = msgpack.unpackb(data[4 : 4 + size])
    assert isinstance(reply, dict)
    return reply


async def test_bad_connections_are_closed_alone(silo_launcher: SiloLauncher) -> None:
    silo = await silo_launcher.start(secret=SECRET)
    async with silo.client() as before:
        counter: Any = before.get_grain("Counter", "steady")
        assert await counter.add(1) == 1
        conn = before._conn

        # random bytes in a frame: not msgpack (0xc1 is never used by msgpack)
        assert await send_and_read_until_closed(silo, frame(b"\xc1" + os.urandom(255))) == b""
        # unframed random bytes whose length prefix is far above max_frame_size
        assert await send_and_read_until_closed(silo, b"\xff" + os.urandom(4095)) == b""
        # an oversized frame: the header alone is refused, before any payload arrives
        oversized = (MAX_FRAME + 1).to_bytes(4, "big")
        assert await send_and_read_until_closed(silo, oversized + b"x" * 1024) == b""
        # bad handshakes: not a map, a wrong protocol version, a request before the handshake
        assert await send_and_read_until_closed(silo, frame(msgpack.packb([1, 2, 3]))) == b""
        assert await send_and_read_until_closed(silo, handshake(SECRET, version=99)) == b""
        request = Request.pack(Codec(), False, 1, "Counter", "steady", "get", 5.0, [], 0, True,
                               msgpack.packb([[], None]))
        assert await send_and_read_until_closed(silo, frame(request)) == b""
        # wrong and missing secret, wrong cluster: refused with a reason, then closed
        for bad in (handshake("nope"), handshake(None), handshake(SECRET, cluster="other")):
            reply = handshake_reply(await send_and_read_until_closed(silo, bad))
            assert reply["ok"] is False
            assert reply["error"]
        # a good handshake followed by a malformed request: closed after the reply
        data = await send_and_read_until_closed(
            silo, handshake(SECRET), frame(msgpack.packb(["not", "a", "request"]))
        )
        assert handshake_reply(data)["ok"] is True
        # 200 nested tuple ext values (under 1 KiB) as the first frame: refused, not a crash
        nested = msgpack.packb([1])
        for _ in range(200):
            nested = msgpack.packb(msgpack.ExtType(1, nested))
        assert await send_and_read_until_closed(silo, frame(nested)) == b""

        assert silo.alive
        assert await counter.add(1) == 2
        assert before._conn is conn  # the same connection served throughout

    async with silo.client() as after:
        assert await after.get_grain("Counter", "steady").get() == 2
    assert silo.alive
    log = silo.log_text()
    assert log.count('"event": "connection_protocol_error"') >= 8
    assert log.count('"event": "gateway_handshake_rejected"') == 3
