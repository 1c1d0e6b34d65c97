"""Gateway: the silo's TCP listener for ClusterClients (client → silo message path).

Each connection must start with a handshake naming the cluster id (and the shared secret if
the silo has one) and the client's id with the key it is derived from (``check_client``):
the connection then acts as that proven client only, so an id seen in metrics, pages or logs
cannot be used to act, and a handshake claiming an id without its key is refused and logged
(``gateway_handshake_rejected``). A malformed frame, an oversized frame, a wrong cluster id
or secret closes that connection only; the silo keeps serving every other client. Until its
handshake is accepted a connection is bounded by the gateway's ``HandshakeGuard`` (a
deadline, a small frame limit, a cap on how many may wait), see ``messaging/guard.py``.

When the silo stops, the gateway stops accepting connections and sends each client a
``GOAWAY`` frame: the client sends its new calls through its other gateways and answers
``GOAWAY``; requests it sent before it saw the frame are still served (routed on to another
silo if their grain is gone from this one). The connection closes once the client has
answered and its last request in flight is answered, so a graceful stop costs a client with
another gateway no failed call.

Back-pressure: a request that finds its grain's mailbox full waits for room (its sender is
suspended, ``runtime/mailbox.py``). When ``MAX_BLOCKED`` requests of one connection wait so,
the gateway stops reading that connection (the frames it has buffered wait too), so the
client's writes fill the socket buffers and its sends block; reading resumes once half of them
have moved into the mailbox. A flood of calls to a slow grain therefore costs the silo at most
a mailbox and ``MAX_BLOCKED`` requests per connection, and other connections are read as ever.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from functools import partial
from typing import Any, Final, Protocol

import msgpack

from orleanspy._util.clock import Clock
from orleanspy.errors import (
    ConfigurationError,
    MessageRejectedError,
    ProtocolError,
    SerializationError,
    SiloUnavailableError,
)
from orleanspy.grains.observer import OBSERVER_HUB_TYPE
from orleanspy.grains.request_context import check_context
from orleanspy.messaging.bodies import reply_frame
from orleanspy.messaging.client_identity import check_client
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.connection import FramedConnection
from orleanspy.messaging.frames import (
    CANCEL,
    GOAWAY,
    GOAWAY_FRAME,
    ONE_WAY,
    PROTOCOL_VERSION,
    REJECTED,
    REQUEST,
    BadRequest,
    Cancel,
    Request,
    check_handshake,
    decode_or_reject,
    raw_header,
)
from orleanspy.messaging.guard import HandshakeGuard
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Message
from orleanspy.runtime.locator import fenced_error

__all__ = ["CLIENT_CONSUMER_TYPE", "MAX_BLOCKED", "Gateway", "GatewayConnection", "GatewayHost"]

#: Requests of one connection that may wait for room in full mailboxes before the gateway
#: stops reading that connection (see the module doc).
MAX_BLOCKED: Final = 1000

#: The grain that stands for a client's stream subscriptions, keyed by the client's id
#: (``orleanspy.streams.client_consumer``): only a connection that proved that id may call it.
CLIENT_CONSUMER_TYPE = "orleanspy.ClientStreamConsumer"
#: The grains keyed by a client's id that only the connection that proved the id may call:
#: its stream subscriptions' consumer and its observers' hub.
CLIENT_OWNED: Final = frozenset({CLIENT_CONSUMER_TYPE, OBSERVER_HUB_TYPE})


class _HostOptions(Protocol):
    @property
    def host(self) -> str: ...
    @property
    def advertised_host(self) -> str: ...
    @property
    def gateway_port(self) -> int | None: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def secret(self) -> str | None: ...
    @property
    def max_frame_size(self) -> int: ...
    @property
    def handshake_timeout(self) -> float: ...
    @property
    def max_pending_handshakes(self) -> int: ...


class _Deliverer(Protocol):
    def deliver(self, msg: Message) -> None: ...

    def cancel(self, msg: Message) -> None: ...


class GatewayHost(Protocol):
    """What the gateway needs from its silo: settings, logger, codec and dispatcher."""

    @property
    def name(self) -> str: ...
    @property
    def options(self) -> _HostOptions: ...
    @property
    def log(self) -> Any: ...
    @property
    def codec(self) -> Codec: ...
    @property
    def dispatcher(self) -> _Deliverer: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def fence(self) -> Callable[[], bool] | None:
        """True while the silo must not serve (see ``ClusterRuntime.fenced``); None: never."""
        ...


class GatewayConnection(FramedConnection):
    """One client connection on the silo side."""

    def __init__(self, gateway: Gateway) -> None:
        silo = gateway.silo
        super().__init__(silo.options.max_frame_size, silo.log, gateway.guard)
        self.gateway = gateway
        self.silo = silo
        self.codec = silo.codec
        self.dispatcher = silo.dispatcher
        self._monotonic = silo.clock.monotonic
        self.client = "?"
        self.in_flight = 0  # requests delivered and not answered yet
        self.calls: dict[int, Message] = {}  # those requests by the client's id (its cancels)
        self.draining = False  # close once in_flight reaches 0 and the client acknowledged
        self.goaway_acked = False
        self.blocked = 0  # requests waiting for room in a full mailbox (``held``)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.gateway.connections.add(self)

    def on_close(self, exc: Exception | None, by_us: bool) -> None:
        self.gateway.connections.discard(self)
        self.log.debug("gateway_client_disconnected", peer=self.peer, client=self.client)

    def frame_received(self, payload: bytes | bytearray) -> None:
        obj = decode_or_reject(self.codec, payload, self.ready, self._reject_one)
        if obj is REJECTED:
            return
        if not self.ready:
            self._handshake(obj)
            return
        if type(obj) is not list or not obj or obj[0] not in (REQUEST, ONE_WAY):
            if obj == [GOAWAY]:  # the client sends nothing more here
                self.goaway_acked = True
                if self.draining and self.in_flight == 0:
                    self.close()
                return
            if type(obj) is list and obj and obj[0] == CANCEL:  # the client gave up on one
                msg = self.calls.get(Cancel.decode(obj).id)
                if msg is not None:
                    self.dispatcher.cancel(msg)
                return
            raise ProtocolError("a client may only send request frames (and [6], [7, id])")
        Request.check(obj)
        one_way = obj[0] == ONE_WAY
        corr = obj[1]
        try:
            msg = Request.to_message(obj)
        except BadRequest as bad:  # a bad key or call chain: answer it, keep serving
            if not one_way:
                self._reply(corr, False, bad.error)
            return
        if msg.rc is not None:  # a client's request context: the same rules as a caller's
            try:
                check_context(msg.rc)
            except ValueError as exc:
                if not one_way:
                    self._reply(corr, False, MessageRejectedError(str(exc), "bad_arguments"))
                return
        # Only methods open to clients may run it, whatever the client says; the hop count
        # is the silos' business. The arguments stay encoded: the silo that runs the grain
        # decodes them with its type policy.
        msg.flags = FLAG_FROM_CLIENT
        msg.hops = 0
        if msg.target.type_name in CLIENT_OWNED and msg.target.key != self.client:
            if not one_way:
                self._reply(corr, False, MessageRejectedError(
                    f"{msg.target.type_name} {msg.target.key!r} is not callable from a "
                    "client: it belongs to another client",
                    "not_callable",
                ))
            return
        if msg.timeout:  # dropped unstarted once the client stops waiting
            msg.deadline = self._monotonic() + msg.timeout
        fence = self.silo.fence
        if fence is not None and fence():  # paused or cut off: the cluster may have moved on
            if not one_way:
                self._reply(corr, False, fenced_error(self.silo.name))
            return
        if self.gateway.accepting or not self.goaway_acked:
            if not one_way:
                self.in_flight += 1
                self.calls[corr] = msg
                msg.reply = partial(self._answer, corr)
            msg.sender = self
            self.dispatcher.deliver(msg)
        elif not one_way:
            self._reply(corr, False, SiloUnavailableError(
                f"silo {self.silo.name} is shutting down"
            ))

    def _handshake(self, obj: Any) -> None:
        opts = self.silo.options
        error = check_handshake(obj, opts.cluster_id, opts.secret)
        client = ""
        if error is None:
            error, client = check_client(obj)
            if error is not None:
                self.gateway.guard.report(self.peer, "gateway_handshake_rejected", error)
            elif not self.gateway.serving:  # retryable: the client tries later
                error = (f"silo {self.silo.name} is starting (it serves clients once active): "
                         "retry, or use another gateway")
        else:
            self.gateway.guard.report(self.peer, "gateway_handshake_rejected", error)
        if error is not None:
            self.send_now(msgpack.packb({"v": PROTOCOL_VERSION, "ok": False, "error": error}))
            self.close()
            return
        self.mark_ready()
        self.client = client
        self.send(msgpack.packb({"v": PROTOCOL_VERSION, "ok": True, "silo": self.silo.name}))
        self.log.debug("gateway_client_connected", peer=self.peer, client=self.client)

    def _reject_one(self, payload: bytes | bytearray, exc: Exception) -> bool:
        header = raw_header(payload)
        if header is None:
            return False
        if header[0] == REQUEST:
            self._reply(header[1], False, SerializationError(
                f"the silo cannot decode this request's arguments: {exc}"
            ))
        return True

    def held(self) -> None:
        """One of this connection's requests waits for room in a full mailbox; at
        ``MAX_BLOCKED`` of them, stop reading the connection."""
        self.blocked += 1
        if self.blocked >= MAX_BLOCKED and not self.reading_paused and not self.closed:
            self.log.warning(
                "gateway_connection_paused", peer=self.peer, client=self.client,
                reason=f"{self.blocked} of its requests wait for room in full mailboxes "
                       f"(at most {MAX_BLOCKED}): not reading until half have moved in",
            )
            self.pause_reading()

    def released(self) -> None:
        """One of this connection's waiting requests moved into its mailbox; below half of
        ``MAX_BLOCKED``, read the connection again (soon: not inside the mailbox's refill)."""
        self.blocked -= 1
        if self.reading_paused and self.blocked == MAX_BLOCKED // 2:
            self.loop.call_soon(self._resume)

    def _resume(self) -> None:
        if self.blocked <= MAX_BLOCKED // 2:
            self.log.info("gateway_connection_resumed", peer=self.peer, client=self.client)
            self.resume_reading()

    def bad_frame(self, reason: str) -> None:
        """A request's arguments decode beyond the bound (``DecodeBudget``): close."""
        self.protocol_error(reason)

    def _answer(self, corr: int, ok: bool, value: Any) -> None:
        """The reply of a delivered request; closes a draining connection after its last."""
        self.calls.pop(corr, None)
        self._reply(corr, ok, value)
        if self.in_flight > 0:
            self.in_flight -= 1
        if self.draining and self.in_flight == 0 and self.goaway_acked:
            self.close()

    def drain(self) -> None:
        """The silo is stopping: tell the client to go elsewhere (``GOAWAY``); close once it
        has acknowledged and every request in flight is answered."""
        if self.draining:
            return
        self.draining = True
        if not self.ready:
            self.close()
            return
        self.send_now(GOAWAY_FRAME)

    def _reply(self, corr: int, ok: bool, value: Any) -> None:
        """Answer ``corr``: ``value`` encoded, or its bytes as received (``Encoded``) when
        another silo ran the call."""
        if self.closed:
            return
        self.send(reply_frame(self.codec, corr, ok, value))


class Gateway:
    """Accepts client connections for one silo."""

    def __init__(self, silo: GatewayHost, *, options: _HostOptions, clock: Clock,
                 log: Any) -> None:
        """``silo``: its codec, dispatcher and fence (read on use); ``options``: the
        handshake bounds; ``clock`` and ``log``: the handshake guard's."""
        self.silo = silo
        self.guard = HandshakeGuard(
            clock, log, port="gateway", timeout=options.handshake_timeout,
            max_pending=options.max_pending_handshakes,
        )
        self.connections: set[GatewayConnection] = set()
        self.accepting = False
        #: False until ``open``: handshakes are refused with a retryable error (the silo
        #: is starting), so that no client request runs before the silo is active.
        self.serving = False
        self._server: asyncio.Server | None = None
        self.address = ""
        self.port = 0

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    async def start(self) -> None:
        """Listen on the gateway port (so that a taken port fails the start early, and the
        port goes into the membership row); clients are refused until ``open``.

        Raises:
            ConfigurationError: the port cannot be opened.
        """
        opts = self.silo.options
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: GatewayConnection(self), opts.host, opts.gateway_port
            )
        except OSError as exc:
            raise ConfigurationError(
                f"gateway port {opts.host}:{opts.gateway_port} "
                + ("is in use" if exc.errno == errno.EADDRINUSE else f"cannot listen ({exc})")
                + ": pick another with --gateway-port or gateway_port (0 picks a free one), "
                "or stop the process that holds it"
            ) from exc
        sock = self._server.sockets[0].getsockname()
        self.port = int(sock[1])
        self.address = f"{opts.advertised_host}:{self.port}"

    async def open(self) -> None:
        """Take client handshakes and requests (the silo is active)."""
        self.serving = True
        self.accepting = True

    async def stop_accepting(self) -> None:
        """Refuse new connections and requests; close each connection once it is idle."""
        self.accepting = False
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.drain()

    async def abort(self) -> None:
        """Close the listener and every connection at once, as a crash would (no GOAWAY)."""
        self.accepting = self.serving = False
        if self._server is not None:
            self._server.close()
        await self.close()

    async def close(self) -> None:
        """Close the listener (if still open) and every connection; return once closed.
        Also the rollback of a failed start, which may come before ``stop_accepting``."""
        self.accepting = self.serving = False
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
