"""SiloConnection: one connection between two silos (or a tool and a silo), either side's view.

Where it sits: ``SiloTransport`` (the hub, ``cluster/transport.py``) owns the connections;
a connection validates and decodes its frames (``messaging/frames.py``), hands requests,
control requests and its own registration to the hub through ``ConnectionHub``, and keeps
the calls it sent (``pending``: id -> reply callback and deadline on the hub's clock).

Frames (4-byte big-endian length + msgpack; never pickle). The handshake proves that both
ends hold the cluster key (a challenge-response; the key itself never travels):

1. opener -> acceptor, HELLO: ``{"v", "cluster", "silo": [h, p, g], "to": [h, p, g],
   "nonce": 32 bytes}``; a tool (``orleanspy cluster status``) sends ``"silo": None`` and
   the client ``"secret"`` instead, is answered ``{"v", "ok": true, "silo"}`` at once and may
   then only send the read-only control requests in ``TOOL_OPERATIONS``;
2. acceptor -> opener, CHALLENGE: ``{"v", "challenge": 32 bytes, "silo": [h, p, g]}``;
3. opener -> acceptor, PROOF: ``{"v", "proof": HMAC(K, "A->B" + T)}``, where K is the
   silo key derived from the cluster key and T the SHA-256 of HELLO and CHALLENGE as sent;
4. the acceptor checks the proof, that the claimed silo connects from the host it names
   (where both are IP addresses) and that membership lists that silo and generation as not
   dead (``ConnectionHub.verify_peer``); then ``{"v", "ok": true, "silo",
   "proof": HMAC(K, "B->A" + T')}`` with T' covering the three frames, which the opener
   checks in turn. Any refusal is ``{"v", "ok": false, "error"}`` and the connection closes.

Fresh nonces on both sides defeat replay, the direction labels reflection, and the claimed
address is inside what is signed.

* request / one-way: ``[0 | 1, id, type_name, key, method, args, kwargs, timeout, chain,
  hops, from_client]`` (``from_client``: a gateway client sent it, so only methods open to
  clients may run it); response ``[2, id, ok, value]`` (an error value as in ``messaging/wire.py``).
* control request ``[3, id, op, args]`` (answered with a response), control one-way
  ``[4, 0, op, args]``, and ``[5]``: "I have nothing pending on this connection".

A *retired* connection (a duplicate, see ``SiloTransport``) carries nothing new; once each
side has nothing pending it sends ``[5]``, and a side that has sent and received ``[5]``
closes it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Final, Protocol

import msgpack

from orleanspy._util.clock import Clock
from orleanspy.errors import (
    GrainCallTimeoutError,
    MessageRejectedError,
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
from orleanspy.messaging.guard import HandshakeGuard
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Message
from orleanspy.messaging.wire import PROTOCOL_VERSION, decode_error, response_payload

__all__ = [
    "CONTROL",
    "CONTROL_ONE_WAY",
    "DRAINED",
    "TOOL_OPERATIONS",
    "ConnectionHub",
    "Reply",
    "SiloConnection",
    "decode_silo",
    "encode_silo",
    "silo_key",
]

CONTROL: Final = 3
CONTROL_ONE_WAY: Final = 4
DRAINED: Final = 5

#: Grace after a request's timeout before ``expire`` fails it (the caller's own timer fires
#: first; the sweep frees the entry and answers forwarded requests).
SWEEP_GRACE: Final = 1.0

#: The control requests a tool connection may send: questions that change nothing.
TOOL_OPERATIONS: Final = frozenset({"calls", "locate", "reminders", "status", "streams"})

_NONCE_SIZE: Final = 32
_OPENER_LABEL: Final = b"orleanspy/silo/A->B"
_ACCEPTOR_LABEL: Final = b"orleanspy/silo/B->A"

Reply = Callable[[bool, Any], None]


def silo_key(cluster_key: bytes) -> bytes:
    """The key silos prove to each other, derived from the cluster key (never sent)."""
    return hmac.digest(cluster_key, b"orleanspy silo-to-silo v1", "sha256")


def _proof(key: bytes, label: bytes, transcript: Any) -> bytes:
    return hmac.digest(key, label + transcript.digest(), "sha256")


def same_host(claimed: str, actual: str) -> bool:
    """May a silo that names host ``claimed`` connect from address ``actual``? Only IP
    addresses are compared (a name cannot be checked here); loopback matches loopback."""
    try:
        a = ipaddress.ip_address(claimed)
        b = ipaddress.ip_address(actual)
    except ValueError:
        return True
    if isinstance(b, ipaddress.IPv6Address) and b.ipv4_mapped is not None:
        b = b.ipv4_mapped
    if a.is_unspecified:
        return True
    return a == b or (a.is_loopback and b.is_loopback)


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
    #: the silo key (``silo_key``) or None: this silo accepts and opens no silo connections
    key: bytes | None
    #: bounds on accepted connections that have not completed their handshake
    guard: HandshakeGuard | None
    max_frame_size: int
    default_timeout: float
    requests_sent: int
    retired_count: int
    log: Any

    def next_id(self) -> int:
        """A correlation id unique within the transport."""

    def accepting(self, obj: dict[str, Any]) -> str | None:
        """None if a handshake that passed the cluster/secret check may connect, else why not."""

    def verify_peer(self, silo: SiloAddress) -> Awaitable[str | None]:
        """None if membership lists ``silo`` (that generation) as a live member, else why not."""

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` in the transport's task set."""

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
        super().__init__(hub.max_frame_size, hub.log, None if peer is not None else hub.guard)
        self.hub = hub
        self.codec = hub.codec
        self.clock = hub.clock
        self.opener = opener
        self.peer_silo = peer
        self.outbound = peer is not None
        self.tool = False
        #: the handshake frames so far (both ends sign the same transcript)
        self._transcript = hashlib.sha256()
        #: acceptor: "hello", then "proof", then "verify" (membership is being asked)
        self._stage = "hello"
        self._proved = False
        self.retired = False
        self._sent_drained = False
        self._got_drained = False
        #: requests received on this connection and not answered yet
        self.serving = 0
        #: corr -> (reply, deadline on the hub's clock)
        self.pending: dict[int, tuple[Reply, float]] = {}
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
        obj = decode_or_reject(self.codec, payload, self.ready, self._reject_one)
        if obj is REJECTED:
            return
        if not self.ready:
            if self.outbound:
                self._opener_handshake(obj, payload)
            else:
                self._acceptor_handshake(obj, payload)
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
                    entry[0](False, decode_error(obj[3], self.codec.policy))
                if self.retired and not self.pending:
                    self._maybe_drained()
        elif kind in (REQUEST, ONE_WAY):
            if self.tool:
                raise ProtocolError("a tool connection may only send control requests")
            try:
                msg = request_message(obj, 11)
            except BadRequest as bad:  # a bad key or call chain: answer it, keep serving
                if kind == REQUEST:
                    self.reply(obj[1], False, bad.error)
                return
            if kind == REQUEST:
                self.serving += 1
                msg.reply = partial(self.reply, obj[1])
                if msg.timeout:  # the time the caller has left, on this silo's clock
                    msg.deadline = self.clock.monotonic() + msg.timeout
            self.hub.deliver(msg, self.peer_silo)
        elif kind in (CONTROL, CONTROL_ONE_WAY):
            if len(obj) != 4 or type(obj[2]) is not str or type(obj[3]) is not list:
                raise ProtocolError("a control frame must be [3|4, id, op, args]")
            if self.tool and obj[2] not in TOOL_OPERATIONS:
                self.log.warning("silo_tool_operation_refused", peer=self.peer, op=obj[2])
                if kind == CONTROL:
                    self.reply(obj[1], False, MessageRejectedError(
                        f"control operation {obj[2]!r} is not open to tools: a tool "
                        f"connection is read-only ({', '.join(sorted(TOOL_OPERATIONS))})",
                        "not_callable",
                    ))
                return
            self.hub.control(self, kind == CONTROL, obj[1], obj[2], obj[3])
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
                f"the silo cannot decode this request's arguments: {exc}"
            ))
        elif kind == RESPONSE:
            entry = self.pending.pop(corr, None)
            if entry is not None:
                entry[0](False, SerializationError(f"the result cannot be decoded here: {exc}"))
        return True

    # -- handshake --------------------------------------------------------------------------
    def hello(self) -> None:
        """Opener: send HELLO (see the module doc)."""
        hub = self.hub
        assert self.peer_silo is not None
        payload = msgpack.packb({
            "v": PROTOCOL_VERSION, "cluster": hub.cluster_id, "silo": encode_silo(hub.silo),
            "to": encode_silo(self.peer_silo), "nonce": os.urandom(_NONCE_SIZE),
        })
        self._transcript.update(payload)
        self.send(payload)

    def _opener_handshake(self, obj: Any, payload: bytes | bytearray) -> None:
        key = self.hub.key
        if (isinstance(obj, dict) and not self._proved and key is not None
                and type(obj.get("challenge")) is bytes):
            self._transcript.update(payload)
            proof = msgpack.packb({
                "v": PROTOCOL_VERSION, "proof": _proof(key, _OPENER_LABEL, self._transcript),
            })
            self._transcript.update(proof)
            self._proved = True
            self.send(proof)
            return
        verdict = obj
        if isinstance(obj, dict) and obj.get("ok"):
            if key is None or not self._proved or not hmac.compare_digest(
                _as_bytes(obj.get("proof")), _proof(key, _ACCEPTOR_LABEL, self._transcript)
            ):
                verdict = {"ok": False, "error": "the peer did not prove that it holds the "
                                                 "cluster key (is it a silo of this cluster?)"}
                self.close()
            else:
                # Register before anything else is read: the acceptor may send on this
                # connection right after its reply, in the same read.
                self.mark_ready()
                self.hub.register(self)
        assert self.handshake is not None
        if not self.handshake.done():
            self.handshake.set_result(verdict)

    def _acceptor_handshake(self, obj: Any, payload: bytes | bytearray) -> None:
        if self._stage == "hello":
            self._on_hello(obj, payload)
        elif self._stage == "proof":
            self._on_proof(obj, payload)
        else:
            raise ProtocolError("a frame arrived before the handshake was answered")

    def _on_hello(self, obj: Any, payload: bytes | bytearray) -> None:
        hub = self.hub
        tool = isinstance(obj, dict) and obj.get("silo") is None
        # A tool presents the client secret; a silo proves the cluster key instead.
        error = (check_handshake(obj, hub.cluster_id, hub.secret if tool else None)
                 or hub.accepting(obj))
        if error is None and tool:
            self.send(msgpack.packb(
                {"v": PROTOCOL_VERSION, "ok": True, "silo": encode_silo(hub.silo)}
            ))
            self.mark_ready()
            self.tool = True
            return
        peer: SiloAddress | None = None
        if error is None:
            try:
                peer = decode_silo(obj["silo"])
            except ValueError as exc:
                error = str(exc)
        if error is None and (type(obj.get("nonce")) is not bytes
                              or len(obj["nonce"]) != _NONCE_SIZE):
            error = f"a silo's hello must carry a {_NONCE_SIZE}-byte nonce"
        if error is None and hub.key is None:
            error = f"silo {hub.silo} has no cluster key: it accepts no silo connections"
        if error is None and peer is not None and not same_host(peer.host, self.peer_host):
            error = f"the connection claims silo {peer} but comes from {self.peer_host}"
        if error is not None or peer is None:
            self.refuse(error or "bad hello")
            return
        self.peer_silo = peer
        self._transcript.update(payload)
        challenge = msgpack.packb({
            "v": PROTOCOL_VERSION, "challenge": os.urandom(_NONCE_SIZE),
            "silo": encode_silo(hub.silo),
        })
        self._transcript.update(challenge)
        self._stage = "proof"
        self.send(challenge)

    def _on_proof(self, obj: Any, payload: bytes | bytearray) -> None:
        key = self.hub.key
        assert key is not None and self.peer_silo is not None
        expected = _proof(key, _OPENER_LABEL, self._transcript)
        if not isinstance(obj, dict) or not hmac.compare_digest(
            _as_bytes(obj.get("proof")), expected
        ):
            self.refuse(f"the connection claiming silo {self.peer_silo} did not prove that it "
                        "holds the cluster key (check cluster_key on every silo)")
            return
        self._transcript.update(payload)
        self._stage = "verify"
        self.hub.spawn(self._verify(self.peer_silo))

    async def _verify(self, peer: SiloAddress) -> None:
        try:
            error = await self.hub.verify_peer(peer)
        except Exception as exc:
            error = f"cannot check membership of silo {peer}: {exc!r}"
        if self.closed:
            return
        if error is not None:
            self.refuse(error)
            return
        key = self.hub.key
        assert key is not None
        self.send(msgpack.packb({
            "v": PROTOCOL_VERSION, "ok": True, "silo": encode_silo(self.hub.silo),
            "proof": _proof(key, _ACCEPTOR_LABEL, self._transcript),
        }))
        self.mark_ready()
        self.opener = peer
        self.hub.register(self)

    def refuse(self, reason: str) -> None:
        """Refuse the handshake: answer why, log it, close."""
        guard = self.hub.guard
        if guard is not None:
            guard.report(self.peer, "silo_handshake_rejected", reason)
        else:
            self.log.warning("silo_handshake_rejected", peer=self.peer, reason=reason)
        self.send_now(msgpack.packb({"v": PROTOCOL_VERSION, "ok": False, "error": reason}))
        self.close()

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
        if self.serving > 0:
            self.serving -= 1
        if not self.closed:
            self.send(response_payload(self.codec, corr, ok, value))

    def send_message(self, msg: Message) -> None:
        """Send a request or one-way message; its outcome goes to ``msg.reply``."""
        codec = self.codec
        target = msg.target
        hops = msg.hops
        reply = msg.reply
        if reply is None:
            try:
                payload = codec.packb([ONE_WAY, 0, target.type_name, target.key, msg.method,
                                       list(msg.args), msg.kwargs, None, [], hops,
                                       bool(msg.flags & FLAG_FROM_CLIENT)])
            except SerializationError as exc:
                self.log.warning("one_way_call_failed", grain=str(target), method=msg.method,
                                 error=repr(exc))
                return
            self.send(payload)
            return
        hub = self.hub
        corr = hub.next_id()
        deadline = msg.deadline
        now = self.clock.monotonic()
        # Send the time the caller has left, not the whole timeout again.
        timeout = max(deadline - now, 0.001) if deadline else msg.timeout or hub.default_timeout
        try:
            chain = msg.chain
            payload = codec.packb([REQUEST, corr, target.type_name, target.key, msg.method,
                                   list(msg.args), msg.kwargs, timeout,
                                   [list(e) for e in chain] if chain else [], hops,
                                   bool(msg.flags & FLAG_FROM_CLIENT)])
        except SerializationError as exc:
            reply(False, exc)
            return
        self.pending[corr] = (reply, now + timeout + SWEEP_GRACE)
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


def _as_bytes(value: Any) -> bytes:
    return value if type(value) is bytes else b""
