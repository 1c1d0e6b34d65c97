"""SiloConnection: one connection between two silos (or a tool and a silo), either side's view.

Where it sits: ``SiloTransport`` (the hub, ``cluster/transport.py``) owns the connections;
a connection runs its handshake (``cluster/handshake.py``: both ends prove the cluster key),
then reads the frames of ``messaging/frames.py``: requests and one-ways (``Request``),
responses, control requests and one-ways (``Control``), and ``[5]`` (drained). It hands
requests, control requests and its own registration to the hub through ``ConnectionHub``,
and keeps the calls it sent (``pending``: id -> reply callback, deadline on the hub's clock,
and whether the reply is forwarded as bytes).

A request's arguments stay encoded until a silo runs it (``Message.body``); a silo that
forwards it sends the bytes it received, and the response's bytes go back untouched
(``Encoded``) to the connection the request came from. A request flagged ``from_client``
(a gateway client sent it) may only run methods open to clients.

A *retired* connection (a duplicate, see ``SiloTransport``) carries nothing new; once each
side has nothing pending it sends ``[5]``, and a side that has sent and received ``[5]``
closes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Final, Protocol

from orleanspy._util.clock import Clock
from orleanspy.cluster.handshake import (
    TOOL_OPERATIONS,
    SiloHandshake,
    decode_silo,
    encode_silo,
    same_host,
    silo_key,
)
from orleanspy.errors import (
    GrainCallTimeoutError,
    MessageRejectedError,
    ProtocolError,
    SerializationError,
    SiloUnavailableError,
)
from orleanspy.ids import SiloAddress
from orleanspy.messaging.bodies import Encoded, encode_body, read_value, reply_frame
from orleanspy.messaging.codec import Codec, unpack_plain_bounded
from orleanspy.messaging.connection import FramedConnection
from orleanspy.messaging.frames import (
    CANCEL,
    CONTROL,
    CONTROL_ONE_WAY,
    DRAINED,
    DRAINED_FRAME,
    ONE_WAY,
    REJECTED,
    REQUEST,
    RESPONSE,
    RESPONSE_HEAD,
    BadRequest,
    Cancel,
    Control,
    Request,
    Response,
    decode_or_reject,
    raw_header,
)
from orleanspy.messaging.guard import HandshakeGuard
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Direction, Message

__all__ = [
    "TOOL_OPERATIONS",
    "ConnectionHub",
    "Reply",
    "SiloConnection",
    "decode_silo",
    "encode_silo",
    "same_host",
    "silo_key",
]

#: Grace after a request's timeout before ``expire`` fails it (the caller's own timer fires
#: first; the sweep frees the entry and answers forwarded requests).
SWEEP_GRACE: Final = 1.0
_ONE_WAY: Final = Direction.ONE_WAY

Reply = Callable[[bool, Any], None]


class ConnectionHub(Protocol):
    """What a silo connection needs from the transport that owns it."""

    silo: SiloAddress
    codec: Codec
    clock: Clock
    cluster_id: str
    secret: str | None
    #: the silo key (``silo_key``) or None: this silo accepts and opens no silo connections
    key: bytes | None
    #: bounds on accepted connections that have not completed their handshake
    guard: HandshakeGuard | None
    max_frame_size: int
    default_timeout: float
    requests_sent: int
    retired_count: int
    #: True while the hub waits for every call to end (then call ``settled``)
    waiting_quiet: bool
    log: Any

    def next_id(self) -> int:
        """A correlation id unique within the transport."""

    def accepting(self, obj: dict[str, Any]) -> str | None:
        """None if a handshake that passed the cluster/secret check may connect, else why not."""

    def verify_peer(self, silo: SiloAddress) -> Awaitable[str | None]:
        """None if membership lists ``silo`` (that generation) as a live member, else why not."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` in the transport's task set."""

    def settled(self) -> None:
        """A connection's last pending or served call ended."""

    def register(self, conn: SiloConnection) -> None:
        """``conn`` finished its handshake with a silo (keep one connection per peer)."""

    def unregister(self, conn: SiloConnection) -> None:
        """``conn`` is closed."""

    def deliver(self, msg: Message, sender: SiloAddress | None) -> None:
        """A request or one-way message from a peer (its answer goes to ``msg.reply``)."""

    def cancel(self, msg: Message) -> None:
        """The peer that sent request ``msg`` gave up on it (``Dispatcher.cancel``)."""

    def control(self, conn: SiloConnection, answer: bool, corr: int, op: str,
                args: list[Any]) -> None:
        """A control request (answered on ``conn`` if ``answer``) or control one-way."""


class SiloConnection(FramedConnection):
    """One connection between two silos (or a tool and a silo), either side's view.

    Args:
        hub: the transport that owns it.
        opener: the silo that opened it (None for an accepted one until its handshake).
        peer: the silo at the other end (None for an accepted one until its handshake).
    """

    def __init__(self, hub: ConnectionHub, opener: SiloAddress | None,
                 peer: SiloAddress | None) -> None:
        super().__init__(hub.max_frame_size, hub.log, None if peer is not None else hub.guard)
        self.hub = hub
        self.codec = hub.codec
        self.clock = hub.clock
        self.opener = opener
        self.peer_silo = peer
        self.outbound = peer is not None
        self.tool = False
        self._handshake = SiloHandshake(self)
        self.retired = False
        self._sent_drained = False
        self._got_drained = False
        #: requests received on this connection and not answered yet
        self.serving = 0
        #: those requests by the peer's id, for its cancels
        self.calls: dict[int, Message] = {}
        #: corr -> (reply, deadline on the hub's clock, reply forwarded as bytes)
        self.pending: dict[int, tuple[Reply, float, bool]] = {}
        self.handshake: asyncio.Future[Any] | None = (
            self.loop.create_future() if self.outbound else None
        )

    @property
    def peer_host(self) -> str:
        """The IP address the connection comes from ("?" if unknown)."""
        return self.peer.rpartition(":")[0] or "?"

    def __repr__(self) -> str:
        return f"<SiloConnection peer={self.peer_silo} opener={self.opener} ready={self.ready}>"

    # -- receiving ------------------------------------------------------------------------
    def frame_received(self, payload: bytes | bytearray) -> None:
        if self.ready and payload.startswith(RESPONSE_HEAD):
            obj = unpack_plain_bounded(payload)  # the body stays bytes: no codec needed
            Response.check(obj)
            pending = self.pending
            entry = pending.pop(obj[1], None)
            if entry is not None:
                if entry[2]:  # a call this silo only routed: its caller's connection
                    entry[0](obj[2], Encoded((obj[3],)))  # sends the body on undecoded
                else:
                    entry[0](*read_value(self.codec, obj[2], obj[3]))
                if not pending:
                    self._no_pending()
            return
        obj = decode_or_reject(self.codec, payload, self.ready, self._reject_one)
        if obj is REJECTED:
            return
        if not self.ready:
            self._handshake.received(obj, payload)
            return
        if type(obj) is not list or not obj:
            raise ProtocolError("a frame must be a non-empty msgpack array")
        kind = obj[0]
        if kind == RESPONSE:
            raise ProtocolError("a response frame must be [2, id, ok, body]")
        if kind in (REQUEST, ONE_WAY):
            if self.tool:
                raise ProtocolError("a tool connection may only send control requests")
            Request.check(obj)
            try:
                msg = Request.to_message(obj)
            except BadRequest as bad:  # a bad key or call chain: answer it, keep serving
                if kind == REQUEST:
                    self.reply(obj[1], False, bad.error)
                return
            if kind == REQUEST:
                self.serving += 1
                self.calls[obj[1]] = msg
                msg.reply = partial(self.reply, obj[1])
                if msg.timeout:  # the time the caller has left, on this silo's clock
                    msg.deadline = self.clock.monotonic() + msg.timeout
            self.hub.deliver(msg, self.peer_silo)
        elif kind in (CONTROL, CONTROL_ONE_WAY):
            control = Control.decode(obj)
            if self.tool and control.op not in TOOL_OPERATIONS:
                self.log.warning("silo_tool_operation_refused", peer=self.peer, op=control.op)
                if control.answer:
                    self.reply(control.id, False, MessageRejectedError(
                        f"control operation {control.op!r} is not open to tools: a tool "
                        "connection is read-only but for the stream operator commands "
                        f"({', '.join(sorted(TOOL_OPERATIONS))})",
                        "not_callable",
                    ))
                return
            self.hub.control(self, control.answer, control.id, control.op, control.args)
        elif kind == CANCEL:
            gave_up = self.calls.get(Cancel.decode(obj).id)
            if gave_up is not None:  # (a call answered already: nothing to cancel)
                self.hub.cancel(gave_up)
        elif kind == DRAINED:
            self._got_drained = True
            self._maybe_close_retired()
        else:
            raise ProtocolError(f"unknown frame kind {kind!r}")

    def _reject_one(self, payload: bytes | bytearray, exc: Exception) -> bool:
        header = raw_header(payload)
        if header is None:
            return False
        kind, corr = header
        if kind in (REQUEST, CONTROL):
            self.reply(corr, False, SerializationError(
                f"the silo cannot decode this request: {exc}"
            ))
        elif kind == RESPONSE:
            entry = self.pending.pop(corr, None)
            if entry is not None:
                entry[0](False, SerializationError(f"the result cannot be decoded here: {exc}"))
        return True

    def hello(self) -> None:
        """Opener: send HELLO (``cluster/handshake.py``)."""
        self._handshake.hello()

    # -- sending --------------------------------------------------------------------------
    def send(self, payload: bytes) -> None:
        # A lone frame goes out at once: the one request in flight on this connection, or the
        # response to the one request served, would otherwise wait for the next loop
        # iteration (and the peer for it), which triples the latency of strictly sequential
        # calls between processes. With more calls in flight, frames are coalesced as in
        # FramedConnection: writing the first of each iteration alone costs a syscall more
        # and the peer a read more, for no gain in latency.
        if (not self._out and not self._flush_scheduled and not self.closed
                and len(self.pending) + self.serving <= 1):
            transport = self.transport
            if transport is not None and not self.write_paused:
                transport.write(len(payload).to_bytes(4, "big") + payload)
                self._flush_scheduled = True
                self.loop.call_soon(self._flush_soon)
                return
        FramedConnection.send(self, payload)  # (not super(): one object fewer per frame)

    def reply(self, corr: int, ok: bool, value: Any) -> None:
        """Send the response to request ``corr`` (dropped if the connection is closed)."""
        serving = self.serving
        if serving > 0:
            self.serving = serving - 1
        self.calls.pop(corr, None)
        if not self.closed:
            self.send(reply_frame(self.codec, corr, ok, value))
        if serving == 1 and self.hub.waiting_quiet and not self.pending:
            self.hub.settled()

    def send_message(self, msg: Message) -> None:
        """Send a request or one-way message; its outcome goes to ``msg.reply``. Its
        arguments as received (``msg.body``) are sent as they are, and then so is the
        response's value (``Encoded``)."""
        codec = self.codec
        target = msg.target
        reply = msg.reply
        body = msg.body
        from_client = bool(msg.flags & FLAG_FROM_CLIENT)
        if reply is None or msg.direction is _ONE_WAY:
            try:
                if body is None:
                    body = encode_body(codec, msg.args, msg.kwargs)
                payload = Request.pack(codec, True, 0, target.type_name, target.key,
                                       msg.method, None, [], msg.hops, from_client, body,
                                       msg.rc)
            except SerializationError as exc:
                if reply is not None:
                    reply(False, exc)
                else:
                    self.log.warning("one_way_call_failed", grain=str(target),
                                     method=msg.method, error=repr(exc))
                return
            self.send(payload)
            if reply is not None:  # a gateway client's one-way: this silo is done with it
                reply(True, None)
            return
        hub = self.hub
        corr = hub.next_id()
        deadline = msg.deadline
        now = self.clock.monotonic()
        # Send the time the caller has left, not the whole timeout again.
        timeout = max(deadline - now, 0.001) if deadline else msg.timeout or hub.default_timeout
        raw = body is not None
        try:
            if body is None:
                body = encode_body(codec, msg.args, msg.kwargs)
            chain = msg.chain
            payload = Request.pack(codec, False, corr, target.type_name, target.key,
                                   msg.method, timeout, [list(e) for e in chain] if chain else [],
                                   msg.hops, from_client, body, msg.rc)
        except SerializationError as exc:
            reply(False, exc)
            return
        self.pending[corr] = (reply, now + timeout + SWEEP_GRACE, raw)
        msg.forward = (self, corr)  # where a cancel of its caller follows it
        hub.requests_sent += 1
        self.send(payload)

    def send_request(self, reply: Reply, type_name: str, key: str | int, method: str,
                     timeout: float | None, body: bytes) -> int:
        """Send on a gateway client's two-way request for a grain of the silo at the other
        end, its arguments as received (``body``), and return its id on this connection
        (where a cancel follows it); the response goes to ``reply`` undecoded
        (``Encoded``), as ``send_message`` does for a routed message."""
        hub = self.hub
        corr = hub.next_id()
        timeout = max(timeout, 0.001) if timeout else hub.default_timeout
        payload = Request.pack(self.codec, False, corr, type_name, key, method, timeout, [], 0,
                               True, body)
        self.pending[corr] = (reply, self.clock.monotonic() + timeout + SWEEP_GRACE, True)
        hub.requests_sent += 1
        self.send(payload)
        return corr

    def send_cancel(self, corr: int) -> None:
        """The caller of request ``corr`` sent here gave up on it (``Cancel``); its answer
        still comes (and goes to the caller's reply, which ignores it)."""
        if corr in self.pending and not self.closed:
            self.send(Cancel.pack(corr))

    def send_control(self, op: str, args: list[Any], reply: Reply | None,
                     timeout: float) -> None:
        """Send control request ``op`` (its answer to ``reply``), or a one-way if no reply."""
        if reply is None:
            self.send(Control(False, 0, op, args).encode(self.codec))
            return
        corr = self.hub.next_id()
        payload = Control(True, corr, op, args).encode(self.codec)
        self.pending[corr] = (reply, self.clock.monotonic() + timeout + SWEEP_GRACE, False)
        self.send(payload)

    def expire(self, now: float) -> int:
        """Fail the calls whose deadline is before ``now``; returns how many."""
        pending = self.pending
        expired = [corr for corr, entry in pending.items() if entry[1] < now]
        for corr in expired:
            reply = pending.pop(corr)[0]
            reply(False, GrainCallTimeoutError(
                f"no response from silo {self.peer_silo} in time"
            ))
        if expired and not pending:
            self._no_pending()
        return len(expired)

    # -- retiring a duplicate connection ----------------------------------------------------
    def retire(self) -> None:
        """Send nothing new on this connection; close it once both sides are drained."""
        if self.retired:
            return
        self.retired = True
        self.hub.retired_count += 1
        if not self.pending:
            self._maybe_drained()

    def _no_pending(self) -> None:
        """The last call sent on this connection ended."""
        if self.retired:
            self._maybe_drained()
        if not self.serving and self.hub.waiting_quiet:
            self.hub.settled()

    def _maybe_drained(self) -> None:
        if not self._sent_drained and not self.closed:
            self._sent_drained = True
            self.send(DRAINED_FRAME)
        self._maybe_close_retired()

    def _maybe_close_retired(self) -> None:
        if self.retired and self._sent_drained and self._got_drained and not self.pending:
            self.close()

    # -- closing --------------------------------------------------------------------------
    def fail_pending(self, error: BaseException) -> None:
        """Fail every call still waiting for a response on this connection."""
        pending = self.pending
        if pending:
            items = list(pending.values())
            pending.clear()
            for entry in items:
                entry[0](False, error)

    def on_close(self, exc: Exception | None, by_us: bool) -> None:
        if self.handshake is not None and not self.handshake.done():
            self.handshake.set_exception(
                SiloUnavailableError(f"silo {self.peer_silo} closed the connection")
            )
            self.handshake.exception()  # retrieved: the connector reports it
        self.hub.unregister(self)
        self.fail_pending(SiloUnavailableError(
            f"connection to silo {self.peer_silo or self.peer} was lost"
        ))
