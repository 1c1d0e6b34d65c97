"""query_silo: one control question to a silo from a tool (``orleanspy cluster status``).

The tool opens a connection with a handshake whose ``silo`` is None (a tool may only send
control requests, see ``cluster/connection.py``), asks, reads the answer and closes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from orleanspy._util.clock import Clock, SystemClock
from orleanspy.errors import ProtocolError, SiloUnavailableError
from orleanspy.messaging.bodies import read_value
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.frames import PROTOCOL_VERSION, Control, Response, read_frame
from orleanspy.messaging.types import TypePolicy

__all__ = ["SiloRefusedError", "query_silo"]

#: The largest answer a tool reads (a status report of a large cluster fits).
MAX_FRAME_SIZE = 16 * 1024 * 1024


class SiloRefusedError(SiloUnavailableError):
    """The silo refused the tool's handshake; ``reason`` says why (a wrong or missing
    secret, another cluster id)."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"silo {address} refused: {reason}")
        self.address = address
        self.reason = reason


async def query_silo(
    host: str, port: int, op: str, args: list[Any], *, cluster_id: str,
    secret: str | None = None, timeout: float = 5.0, clock: Clock | None = None,
) -> Any:
    """Ask the silo listening on ``host:port`` one control question, as a tool (CLI).

    ``clock`` bounds the wait (default: the real clock; a tool runs outside any silo).

    Raises:
        SiloUnavailableError: unreachable (``SiloRefusedError``: it refused the
            handshake).
        TimeoutError: no answer within ``timeout``.
        ProtocolError: the silo's answer is not a valid frame.
    """
    codec = Codec(policy=TypePolicy())
    async with (clock or SystemClock()).timeout(timeout):
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            raise SiloUnavailableError(f"cannot connect to silo {host}:{port}: {exc}") from None
        try:
            def write_frame(obj: Any) -> None:
                data = codec.packb(obj)
                writer.write(len(data).to_bytes(4, "big") + data)

            write_frame({"v": PROTOCOL_VERSION, "cluster": cluster_id, "secret": secret,
                         "silo": None, "to": None})
            reply = await read_frame(reader, codec, MAX_FRAME_SIZE)
            if not isinstance(reply, dict) or not reply.get("ok"):
                error = reply.get("error") if isinstance(reply, dict) else repr(reply)
                raise SiloRefusedError(f"{host}:{port}", str(error))
            request = Control(True, 1, op, args).encode(codec)
            writer.write(len(request).to_bytes(4, "big") + request)
            obj = await read_frame(reader, codec, MAX_FRAME_SIZE)
            if type(obj) is not list:
                raise ProtocolError("a response frame must be [2, id, ok, body]")
            response = Response.decode(obj)
            ok, value = read_value(codec, response.ok, response.body)
            if ok:
                return value
            raise value
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise SiloUnavailableError(f"silo {host}:{port} closed the connection: {exc}") from None
        finally:
            writer.close()
