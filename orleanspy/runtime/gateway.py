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

Back-pressure: every request a connection delivers, two-way or one-way, counts against that
connection and against its proven client (``ClientLoad``: the sum over all the client's
connections to this silo, closed ones included) until this silo is done with it: answered
(two-way), its turn ended or dropped (one-way), or written to another silo's connection
(one-way; the silo that runs it bounds its own work, ``runtime/mailbox.py``). A two-way
request forwarded to another silo counts until its answer comes back, since it waits here for
it. At ``max_connection_requests`` of a connection, or ``max_client_requests`` of its client,
the gateway stops reading that connection (or every connection of the client): the frames it
has buffered wait too, the client's writes fill the socket buffers and its sends block.
Reading resumes once the connection is at half its cap and its client at half of the
client's. So what one client sends costs the silo at most its cap of requests in flight,
however many grains they address and however many ids it mints (each costs a connection and
a handshake with the client secret, and has a cap of its own), and other connections are read
as ever.
"""

from __future__ import annotations

import asyncio
import errno
from functools import partial
from typing import Any, Final

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
from orleanspy.ids import GrainId, grain_id
from orleanspy.messaging.bodies import reply_frame
from orleanspy.messaging.client_identity import check_client
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
from orleanspy.runtime.client_load import NO_CLIENT, ClientLoad
from orleanspy.runtime.gateway_host import GatewayHost, GatewayOptions, SentOn
from orleanspy.runtime.locator import fenced_error

__all__ = ["CLIENT_CONSUMER_TYPE", "ClientLoad", "Gateway", "GatewayConnection", "GatewayHost"]

#: The grain that stands for a client's stream subscriptions, keyed by the client's id
#: (``orleanspy.streams.client_consumer``): only a connection that proved that id may call it.
CLIENT_CONSUMER_TYPE = "orleanspy.ClientStreamConsumer"
#: The grains keyed by a client's id that only the connection that proved the id may call:
#: its stream subscriptions' consumer and its observers' hub.
CLIENT_OWNED: Final = frozenset({CLIENT_CONSUMER_TYPE, OBSERVER_HUB_TYPE})
#: ``_send_on``'s answer for a request it sent on
SENT_ON: Final = GrainId("orleanspy.SentOn", "")


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
        #: two-way requests delivered and not answered yet, by the client's id (its cancels)
        self.calls: dict[int, Message | SentOn] = {}
        #: one-way requests delivered that this silo is not done with, by message id
        self.one_ways: dict[int, Message] = {}
        self.draining = False  # close once calls is empty and the client acknowledged
        self.goaway_acked = False
        #: every request delivered that this silo is not done with (``_release``), against
        #: ``cap``; its client's, against ``client_cap``, is ``load.requests`` once ``shared``
        self.requests = 0
        #: its client has (or had) another connection here: ``load.requests`` is kept
        self.shared = False
        opts = silo.options
        self.cap = opts.max_connection_requests
        self.client_cap = opts.max_client_requests
        self.load = NO_CLIENT
        self.pauses = 0  # times its reading was paused (the first is logged as a warning)
        #: requests for grains on other silos may be sent straight on (``_send_on``)
        self.sends_on = not silo.dispatcher.local_only

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.gateway.connections.add(self)

    def on_close(self, exc: Exception | None, by_us: bool) -> None:
        self.gateway.connections.discard(self)
        load = self.load
        if load is not NO_CLIENT:
            load.connections.remove(self)
            if self.reading_paused:
                load.paused -= 1
            if self.requests == 0:
                load.members.remove(self)
            self.gateway.forget(load)
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
                if self.draining and not self.calls:
                    self.close()
                return
            if type(obj) is list and obj and obj[0] == CANCEL:  # the client gave up on one
                msg = self.calls.get(Cancel.decode(obj).id)
                if isinstance(msg, tuple):  # sent on: (connection, its id there)
                    msg[0].send_cancel(msg[1])
                elif msg is not None:
                    self.dispatcher.cancel(msg)
                return
            raise ProtocolError("a client may only send request frames (and [6], [7, id])")
        Request.check(obj)
        one_way = obj[0] == ONE_WAY
        corr = obj[1]
        gid = None
        if self.sends_on and not one_way and len(obj) == 10 and not obj[6]:
            gid = self._send_on(obj, corr)
            if gid is SENT_ON:
                return
        try:
            msg = Request.to_message(obj, gid)
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
            if one_way:
                key = msg.id
                self.one_ways[key] = msg
                msg.reply = partial(self._one_way_done, key)
            else:
                calls = self.calls
                if corr in calls:  # its answer could not tell the two apart
                    raise ProtocolError(f"request id {corr} is already in flight")
                calls[corr] = msg
                msg.reply = partial(self._answer, corr)
            msg.sender = self
            self.requests += 1
            if self.shared:
                load = self.load
                load.requests += 1
                if load.requests >= self.client_cap:
                    self._hold()
            if self.requests >= self.cap:
                self._hold()
            self.dispatcher.deliver(msg)
        elif not one_way:
            self._reply(corr, False, SiloUnavailableError(
                f"silo {self.silo.name} is shutting down"
            ))

    def _send_on(self, obj: list[Any], corr: int) -> GrainId | None:
        """Send a client's two-way request (no call chain, no request context) straight on
        to the silo its grain lives on, when routing would send it there at once: its header
        is all this silo reads, its arguments go on as received, and the response comes back
        as received. Returns ``SENT_ON``, or the grain's id (None if not made) for the
        message path, which checks and answers what else the request needs."""
        key = obj[3]
        if (type(key) is not str and type(key) is not int) or not self.gateway.accepting:
            return None
        gid = grain_id(obj[2], key)
        if gid.type_name in CLIENT_OWNED:
            return gid
        conn = self.dispatcher.connection_for(gid)
        if conn is None:
            return gid
        fence = self.silo.fence
        if fence is not None and fence():
            return gid
        calls = self.calls
        if corr in calls:  # its answer could not tell the two apart
            raise ProtocolError(f"request id {corr} is already in flight")
        calls[corr] = (conn, conn.send_request(partial(self._answer, corr), obj[2], key, obj[4],
                                               obj[5], obj[9]))
        self.requests += 1  # (as the message path counts it)
        if self.shared:
            self.load.requests += 1
        if self.requests >= self.cap or (self.shared and self.load.requests >= self.client_cap):
            self._hold()
        return SENT_ON

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
        load = self.load = self.gateway.load_of(client)
        load.join(self)
        if self.shared and load.requests >= self.client_cap:
            self._hold()
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

    def _hold(self) -> None:
        """This connection, or its client, is at its cap of requests in flight."""
        self.load.hold(self)

    def _release(self) -> None:
        """This silo is done with one of this connection's requests (``_answer`` does the
        same inline, on the hot path)."""
        self.requests -= 1
        if self.shared or self.closed or self.load.paused:
            self._released()

    def _released(self) -> None:
        """After a release on a connection that shares its client's count, is closed or has
        a paused sibling: keep the client's count; once the connection and its client are
        at half their caps, read their paused connections again (soon: not inside the reply
        or the turn that ended); forget a closed connection, and a client, with nothing
        left in flight."""
        load = self.load
        if self.shared:
            load.requests -= 1
        if load.paused and (self.requests == self.cap // 2
                            or load.total() == self.client_cap // 2):
            self.loop.call_soon(load.resume, self.client_cap)
        if self.closed and self.requests == 0:
            load.members.remove(self)
            self.gateway.forget(load)

    def bad_frame(self, reason: str) -> None:
        """A request's arguments decode beyond the bound (``DecodeBudget``): close."""
        self.protocol_error(reason)

    def _answer(self, corr: int, ok: bool, value: Any) -> None:
        """The reply of a delivered request; closes a draining connection after its last.
        Counted once, even if told twice (a reply that failed to encode is followed by the
        error saying so)."""
        calls = self.calls
        if calls.pop(corr, None) is not None:  # ``_release``, inline
            self.requests -= 1
            if self.shared or self.closed or self.load.paused:
                self._released()
        if not self.closed:  # ``_reply``, inline
            self.send(reply_frame(self.codec, corr, ok, value))
        if self.draining and not calls and self.goaway_acked:
            self.close()

    def _one_way_done(self, key: int, ok: bool, value: Any) -> None:
        """This silo is done with a one-way request: its turn ended, it was dropped, failed
        or written to another silo's connection (``ok``: ran or handed on)."""
        msg = self.one_ways.pop(key, None)
        if msg is not None:
            self._release()
        if not ok:
            self.log.warning("one_way_call_failed", client=self.client,
                             grain=str(msg.target) if msg is not None else "?",
                             method=msg.method if msg is not None else "?", error=repr(value))

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

    def __init__(self, silo: GatewayHost, *, options: GatewayOptions, clock: Clock,
                 log: Any) -> None:
        """``silo``: its codec, dispatcher and fence (read on use); ``options``: the
        handshake bounds; ``clock`` and ``log``: the handshake guard's."""
        self.silo = silo
        self.guard = HandshakeGuard(
            clock, log, port="gateway", timeout=options.handshake_timeout,
            max_pending=options.max_pending_handshakes,
        )
        self.connections: set[GatewayConnection] = set()
        #: the proven clients with a connection open or a request in flight here
        self.clients: dict[str, ClientLoad] = {}
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

    @property
    def request_count(self) -> int:
        """Requests of clients that this silo is not done with (see the module doc)."""
        return sum(load.total() for load in self.clients.values())

    def load_of(self, client: str) -> ClientLoad:
        """The requests in flight of proven client ``client`` (made on its first use)."""
        load = self.clients.get(client)
        if load is None:
            load = self.clients[client] = ClientLoad(client)
        return load

    def forget(self, load: ClientLoad) -> None:
        """Drop ``load`` once its client has no connection and no request here."""
        if not load.members:
            self.clients.pop(load.client, None)

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

