"""SiloConnection: one connection between two silos (or a tool and a silo), either side's view.

Where it sits: ``SiloTransport`` (the hub, ``cluster/transport.py``) owns the connections;
a connection validates and decodes its frames (``messaging/frames.py``), hands requests,
control requests and its own registration to the hub through ``ConnectionHub``, and keeps
the calls it sent (``pending``: id -> reply callback and deadline on the hub's clock).

Frames (4-byte big-endian length + msgpack; never pickle):

* handshake (opener -> acceptor): ``{"v", "cluster", "secret", "silo": [h, p, g] | None,
  "to": [h, p, g] | None}``; ``silo`` None marks a tool (``orleanspy cluster status``) that
  may only send control requests. Reply ``{"v", "ok": true, "silo": [h, p, g]}`` or
  ``{"v", "ok": false, "error"}``.
* request / one-way: ``[0 | 1, id, type_name, key, method, args, kwargs, timeout, chain,
  hops]``; response ``[2, id, ok, value]`` (an error value as in ``messaging/wire.py``).
* control request ``[3, id, op, args]`` (answered with a response), control one-way
  ``[4, 0, op, args]``, and ``[5]``: "I have nothing pending on this connection".

A *retired* connection (a duplicate, see ``SiloTransport``) carries nothing new; once each
side has nothing pending it sends ``[5]``, and a side that has sent and received ``[5]``
closes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, Final, Protocol

import msgpack

from orleanspy._util.clock import Clock
from orleanspy.errors import (
    GrainCallTimeoutError,
    ProtocolError,
    SerializationError,
    SiloUnavailableError,
)
from orleanspy.ids import SiloAddress
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.connection import FramedConnection
from orleanspy.messaging.frames import (
    ONE_WAY,
    REJECTED,
    REQUEST,
    RESPONSE,
    BadRequest,
    check_handshake,
    decode_or_reject,
    raw_header,
    request_message,
)
from orleanspy.messaging.message import Message
from orleanspy.messaging.wire import PROTOCOL_VERSION, decode_error, response_payload

__all__ = [
    "CONTROL",
    "CONTROL_ONE_WAY",
    "DRAINED",
    "ConnectionHub",
    "Reply",
    "SiloConnection",
    "decode_silo",
    "encode_silo",
]

CONTROL: Final = 3
CONTROL_ONE_WAY: Final = 4
DRAINED: Final = 5

#: Grace after a request's timeout before ``expire`` fails it (the caller's own timer fires
#: first; the sweep frees the entry and answers forwarded requests).
SWEEP_GRACE: Final = 1.0

Reply = Callable[[bool, Any], None]


def encode_silo(silo: SiloAddress) -> list[Any]:
    """A silo address as sent on the wire: ``[host, port, generation]``."""
    return [silo.host, silo.port, silo.generation]


def decode_silo(value: Any) -> SiloAddress:
    """The silo address of ``[host, port, generation]``.

    Raises:
        ValueError: ``value`` is not such a list.
    """
    if type(value) is not list or len(value) != 3:
        raise ValueError(f"a silo address must be [host, port, generation], not {value!r}")
    host, port, generation = value
    if type(host) is not str or type(port) is not int or type(generation) is not int:
        raise ValueError(f"a silo address must be [str, int, int], not {value!r}")
    return SiloAddress(host, port, generation)


class ConnectionHub(Protocol):
    """What a silo connection needs from the transport that owns it."""

    silo: SiloAddress
    codec: Codec
    clock: Clock
    cluster_id: str
    secret: str | None
    max_frame_size: int
    default_timeout: float
    requests_sent: int
    retired_count: int
    log: Any

    def next_id(self) -> int:
        """A correlation id unique within the transport."""

    def accepting(self, obj: dict[str, Any]) -> str | None:
        """None if a handshake that passed the cluster/secret check may connect, else why not."""

    def register(self, conn: SiloConnection) -> None:
        """``conn`` finished its handshake with a silo (keep one connection per peer)."""

    def unregister(self, conn: SiloConnection) -> None:
        """``conn`` is closed."""

    def deliver(self, msg: Message, sender: SiloAddress | None) -> None:
        """A request or one-way message from a peer (its answer goes to ``msg.reply``)."""

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
        super().__init__(hub.max_frame_size, hub.log)
        self.hub = hub
        self.codec = hub.codec
        self.clock = hub.clock
        self.opener = opener
        self.peer_silo = peer
        self.outbound = peer is not None
        self.ready = False
        self.tool = False
        self.retired = False
        self._sent_drained = False
        self._got_drained = False
        #: corr -> (reply, deadline on the hub's clock)
        self.pending: dict[int, tuple[Reply, float]] = {}
        self.handshake: asyncio.Future[Any] | None = (
            self.loop.create_future() if self.outbound else None
        )

    def __repr__(self) -> str:
        return f"<SiloConnection peer={self.peer_silo} opener={self.opener} ready={self.ready}>"

    # -- receiving ------------------------------------------------------------------------
    def frame_received(self, payload: bytes) -> None:
        obj = decode_or_reject(self.codec, payload, self.ready, self._reject_one)
        if obj is REJECTED:
            return
        if not self.ready:
            if self.outbound:
                # Register before anything else is read: the acceptor may send on this
                # connection right after its reply, in the same read.
                if isinstance(obj, dict) and obj.get("ok"):
                    self.ready = True
                    self.hub.register(self)
                assert self.handshake is not None
                if not self.handshake.done():
                    self.handshake.set_result(obj)
            else:
                self._accept_handshake(obj)
            return
        if type(obj) is not list or not obj:
            raise ProtocolError("a frame must be a non-empty msgpack array")
        kind = obj[0]
        if kind == RESPONSE:
            if len(obj) != 4:
                raise ProtocolError("a response frame must be [2, id, ok, value]")
            entry = self.pending.pop(obj[1], None)
            if entry is not None:
                if obj[2]:
                    entry[0](True, obj[3])
                else:
                    entry[0](False, decode_error(obj[3]))
                if self.retired and not self.pending:
                    self._maybe_drained()
        elif kind in (REQUEST, ONE_WAY):
            if self.tool:
                raise ProtocolError("a tool connection may only send control requests")
            try:
                msg = request_message(obj, 10)
            except BadRequest as bad:  # a bad key or call chain: answer it, keep serving
                if kind == REQUEST:
                    self.reply(obj[1], False, bad.error)
                return
            if kind == REQUEST:
                msg.reply = partial(self.reply, obj[1])
            self.hub.deliver(msg, self.peer_silo)
        elif kind in (CONTROL, CONTROL_ONE_WAY):
            if len(obj) != 4 or type(obj[2]) is not str or type(obj[3]) is not list:
                raise ProtocolError("a control frame must be [3|4, id, op, args]")
            self.hub.control(self, kind == CONTROL, obj[1], obj[2], obj[3])
        elif kind == DRAINED:
            self._got_drained = True
            self._maybe_close_retired()
        else:
            raise ProtocolError(f"unknown frame kind {kind!r}")

    def _reject_one(self, payload: bytes, exc: Exception) -> bool:
        header = raw_header(payload)
        if header is None:
            return False
        kind, corr = header
        if kind in (REQUEST, CONTROL):
            self.reply(corr, False, SerializationError(
                f"the silo cannot decode this request's arguments: {exc}"
            ))
        elif kind == RESPONSE:
            entry = self.pending.pop(corr, None)
            if entry is not None:
                entry[0](False, SerializationError(f"the result cannot be decoded here: {exc}"))
        return True

    def _accept_handshake(self, obj: Any) -> None:
        hub = self.hub
        error = check_handshake(obj, hub.cluster_id, hub.secret) or hub.accepting(obj)
        peer: SiloAddress | None = None
        if error is None and obj.get("silo") is not None:
            try:
                peer = decode_silo(obj["silo"])
            except ValueError as exc:
                error = str(exc)
        if error is not None:
            self.log.warning("silo_handshake_rejected", peer=self.peer, reason=error)
            self.send_now(msgpack.packb({"v": PROTOCOL_VERSION, "ok": False, "error": error}))
            self.close()
            return
        self.send(msgpack.packb(
            {"v": PROTOCOL_VERSION, "ok": True, "silo": encode_silo(hub.silo)}
        ))
        self.ready = True
        if peer is None:
            self.tool = True
            return
        self.peer_silo = peer
        self.opener = peer
        hub.register(self)

    # -- sending --------------------------------------------------------------------------
    def send(self, payload: bytes) -> None:
        # A frame sent while nothing else waits to be written goes out at once: a lone
        # request or response would otherwise wait for the next loop iteration (and the peer
        # for it), which triples the latency of strictly sequential calls between processes.
        # Frames that follow within the same iteration are coalesced as in FramedConnection.
        if not self._out and not self._flush_scheduled and not self.closed:
            transport = self.transport
            if transport is not None and not self.write_paused:
                transport.write(len(payload).to_bytes(4, "big") + payload)
                self._flush_scheduled = True
                self.loop.call_soon(self._flush_soon)
                return
        super().send(payload)

    def reply(self, corr: int, ok: bool, value: Any) -> None:
        """Send the response to request ``corr`` (dropped if the connection is closed)."""
        if not self.closed:
            self.send(response_payload(self.codec, corr, ok, value))

    def send_message(self, msg: Message) -> None:
        """Send a request or one-way message; its outcome goes to ``msg.reply``."""
        codec = self.codec
        target = msg.target
        hops = getattr(msg, "hops", 0)
        reply = msg.reply
        if reply is None:
            try:
                payload = codec.packb([ONE_WAY, 0, target.type_name, target.key, msg.method,
                                       list(msg.args), msg.kwargs, None, [], hops])
            except SerializationError as exc:
                self.log.warning("one_way_call_failed", grain=str(target), method=msg.method,
                                 error=repr(exc))
                return
            self.send(payload)
            return
        hub = self.hub
        corr = hub.next_id()
        timeout = msg.timeout or hub.default_timeout
        try:
            chain = msg.chain
            payload = codec.packb([REQUEST, corr, target.type_name, target.key, msg.method,
                                   list(msg.args), msg.kwargs, timeout,
                                   [list(e) for e in chain] if chain else [], hops])
        except SerializationError as exc:
            reply(False, exc)
            return
        self.pending[corr] = (reply, self.clock.monotonic() + timeout + SWEEP_GRACE)
        hub.requests_sent += 1
        self.send(payload)

    def send_control(self, op: str, args: list[Any], reply: Reply | None,
                     timeout: float) -> None:
        """Send control request ``op`` (its answer to ``reply``), or a one-way if no reply."""
        if reply is None:
            self.send(self.codec.packb([CONTROL_ONE_WAY, 0, op, args]))
            return
        corr = self.hub.next_id()
        payload = self.codec.packb([CONTROL, corr, op, args])
        self.pending[corr] = (reply, self.clock.monotonic() + timeout + SWEEP_GRACE)
        self.send(payload)

    def expire(self, now: float) -> int:
        """Fail the calls whose deadline is before ``now``; returns how many."""
        pending = self.pending
        expired = [corr for corr, (_, deadline) in pending.items() if deadline < now]
        for corr in expired:
            reply, _ = pending.pop(corr)
            reply(False, GrainCallTimeoutError(
                f"no response from silo {self.peer_silo} in time"
            ))
        if expired and self.retired and not pending:
            self._maybe_drained()
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

    def _maybe_drained(self) -> None:
        if not self._sent_drained and not self.closed:
            self._sent_drained = True
            self.send(msgpack.packb([DRAINED]))
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
            for reply, _ in items:
                reply(False, error)

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
