"""GatewayConnection: the client's connection to one silo gateway (client -> gateway path).

Requests leave through ``send``; each response frame resolves the future of its id in
``pending``. The first frame received is the gateway's handshake reply (``handshake``).
What the connection's loss means for the client (routing, back-off, failing the calls still
pending) is the owner's business: it is told through ``ConnectionOwner``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from orleanspy.errors import ProtocolError, SiloUnavailableError
from orleanspy.messaging.bodies import read_value
from orleanspy.messaging.codec import Codec, unpack_plain_bounded
from orleanspy.messaging.connection import FramedConnection
from orleanspy.messaging.frames import GOAWAY, GOAWAY_FRAME, RESPONSE, Response

__all__ = ["ConnectionOwner", "GatewayConnection"]

class ConnectionOwner(Protocol):
    """What a gateway connection tells the client that owns it."""

    def connection_lost(self, conn: GatewayConnection) -> None:
        """``conn`` is closed (by either side): stop routing to it, fail its pending calls."""

    def going_away(self, conn: GatewayConnection) -> None:
        """``conn``'s silo is stopping: send new calls elsewhere; its pending calls will
        still be answered on it."""

class GatewayConnection(FramedConnection):
    """One client connection to gateway ``address`` (number ``index`` in the owner's list).

    ``silent`` holds until the handshake succeeds, and again for a connection the client
    closes without having adopted it: its loss is not reported to the owner.
    """

    def __init__(self, owner: ConnectionOwner, index: int, address: str, codec: Codec,
                 max_frame_size: int, log: Any) -> None:
        super().__init__(max_frame_size, log)
        self.owner = owner
        self.index = index
        self.address = address
        self.codec = codec
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.handshake: asyncio.Future[Any] = self.loop.create_future()
        self.silent = True

    def frame_received(self, payload: bytes | bytearray) -> None:
        # No frame from a gateway holds an ext value outside a response's body: plain msgpack
        # reads it, and only the body is decoded with the codec (and its type policy).
        obj = unpack_plain_bounded(payload)
        if not self.ready and not self.handshake.done():
            if isinstance(obj, dict) and obj.get("ok"):
                self.mark_ready()  # responses may be as large as max_frame_size
            self.handshake.set_result(obj)
            return
        if type(obj) is not list or not obj or obj[0] != RESPONSE:
            if obj == [GOAWAY]:  # the silo is stopping: no new calls here
                self.owner.going_away(self)
                self.send_now(GOAWAY_FRAME)
                return
            raise ProtocolError("a gateway may only send response frames (and [6])")
        Response.check(obj)
        fut = self.pending.pop(obj[1], None)
        if fut is None or fut.done():
            return
        if obj[2]:
            try:
                value = self.codec.unpackb(obj[3])
            except Exception:
                pass  # read_value says why: that one call fails (SerializationError, ...)
            else:
                fut.set_result(value)
                return
        fut.set_exception(read_value(self.codec, obj[2], obj[3])[1])

    def close(self) -> None:
        was_closed = self.closed
        super().close()
        if not was_closed and not self.silent:
            # Closed by us (a protocol error, or the client closing): stop routing to it and
            # fail what is pending now rather than when the transport reports the loss.
            self.owner.connection_lost(self)

    def on_close(self, exc: Exception | None, by_us: bool) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(
                SiloUnavailableError(f"gateway {self.address} closed the connection")
            )
            self.handshake.exception()  # retrieved: the opener reports it
        if not self.silent:
            self.owner.connection_lost(self)
