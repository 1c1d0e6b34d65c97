"""The silo port's handshake: both ends prove that they hold the cluster key.

A challenge-response; the key itself never travels (maps, never pickle):

1. opener -> acceptor, HELLO: ``{"v", "cluster", "silo": [h, p, g], "to": [h, p, g],
   "nonce": 32 bytes}``; a tool (``orleanspy cluster status``) sends ``"silo": None`` and
   the client ``"secret"`` instead, is answered ``{"v", "ok": true, "silo"}`` at once and may
   then only send the control requests in ``TOOL_OPERATIONS`` (read-only questions and
   the stream operator commands);
2. acceptor -> opener, CHALLENGE: ``{"v", "challenge": 32 bytes, "silo": [h, p, g]}``;
3. opener -> acceptor, PROOF: ``{"v", "proof": HMAC(K, "A->B" + T)}``, where K is the
   silo key derived from the cluster key and T the SHA-256 of HELLO and CHALLENGE as sent;
4. the acceptor checks the proof, that the claimed silo connects from the host it names
   (where both are IP addresses) and that membership lists that silo and generation as not
   dead (``ConnectionHub.verify_peer``); then ``{"v", "ok": true, "silo",
   "proof": HMAC(K, "B->A" + T')}`` with T' covering the three frames, which the opener
   checks in turn. Any refusal is ``{"v", "ok": false, "error"}`` and the connection closes.

Fresh nonces on both sides defeat replay, the direction labels reflection, and the claimed
address is inside what is signed. ``SiloHandshake`` runs these steps for one
``SiloConnection`` (``cluster/connection.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import os
from collections.abc import Awaitable, Coroutine
from typing import Any, Final, Protocol

import msgpack

from orleanspy.errors import ProtocolError
from orleanspy.ids import SiloAddress
from orleanspy.messaging.frames import PROTOCOL_VERSION, check_handshake
from orleanspy.messaging.guard import HandshakeGuard

__all__ = [
    "TOOL_OPERATIONS",
    "HandshakeConnection",
    "HandshakeHub",
    "SiloHandshake",
    "decode_silo",
    "encode_silo",
    "same_host",
    "silo_key",
]

#: The control requests a tool connection may send: questions that change nothing, and the
#: stream operator commands (``orleanspy streams unsubscribe``, ``streams agents``).
TOOL_OPERATIONS: Final = frozenset({
    "calls", "grain", "locate", "reminders", "status", "streams", "stream_agents",
    "stream_subscriptions", "stream_unsubscribe",
})

_NONCE_SIZE: Final = 32
_OPENER_LABEL: Final = b"orleanspy/silo/A->B"
_ACCEPTOR_LABEL: Final = b"orleanspy/silo/B->A"


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


class HandshakeHub(Protocol):
    """What the handshake needs of the transport that owns the connection."""

    @property
    def silo(self) -> SiloAddress: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def secret(self) -> str | None: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def guard(self) -> HandshakeGuard | None: ...

    def accepting(self, obj: dict[str, Any]) -> str | None: ...

    def verify_peer(self, silo: SiloAddress) -> Awaitable[str | None]: ...

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> Any: ...

    def register(self, conn: Any) -> None: ...


class HandshakeConnection(Protocol):
    """What the handshake needs of its connection (``cluster/connection.py``)."""

    outbound: bool
    peer_silo: SiloAddress | None
    opener: SiloAddress | None
    tool: bool
    closed: bool
    peer: str
    log: Any
    handshake: asyncio.Future[Any] | None

    @property
    def hub(self) -> HandshakeHub: ...
    @property
    def peer_host(self) -> str: ...

    def send(self, payload: bytes) -> None: ...

    def send_now(self, payload: bytes) -> None: ...

    def mark_ready(self) -> None: ...

    def close(self) -> None: ...


def _as_bytes(value: Any) -> bytes:
    return value if type(value) is bytes else b""


class SiloHandshake:
    """The handshake steps of one connection, either side (see the module doc)."""

    __slots__ = ("_proved", "_stage", "_transcript", "conn")

    def __init__(self, conn: HandshakeConnection) -> None:
        self.conn = conn
        #: the handshake frames so far (both ends sign the same transcript)
        self._transcript = hashlib.sha256()
        #: acceptor: "hello", then "proof", then "verify" (membership is being asked)
        self._stage = "hello"
        self._proved = False

    def received(self, obj: Any, payload: bytes | bytearray) -> None:
        """A frame before the connection is ready."""
        if self.conn.outbound:
            self._opener_step(obj, payload)
        elif self._stage == "hello":
            self._on_hello(obj, payload)
        elif self._stage == "proof":
            self._on_proof(obj, payload)
        else:
            raise ProtocolError("a frame arrived before the handshake was answered")

    # -- opener ---------------------------------------------------------------------------
    def hello(self) -> None:
        """Send HELLO."""
        conn = self.conn
        hub = conn.hub
        assert conn.peer_silo is not None
        payload = msgpack.packb({
            "v": PROTOCOL_VERSION, "cluster": hub.cluster_id, "silo": encode_silo(hub.silo),
            "to": encode_silo(conn.peer_silo), "nonce": os.urandom(_NONCE_SIZE),
        })
        self._transcript.update(payload)
        conn.send(payload)

    def _opener_step(self, obj: Any, payload: bytes | bytearray) -> None:
        conn = self.conn
        key = conn.hub.key
        if (isinstance(obj, dict) and not self._proved and key is not None
                and type(obj.get("challenge")) is bytes):
            self._transcript.update(payload)
            proof = msgpack.packb({
                "v": PROTOCOL_VERSION, "proof": _proof(key, _OPENER_LABEL, self._transcript),
            })
            self._transcript.update(proof)
            self._proved = True
            conn.send(proof)
            return
        verdict = obj
        if isinstance(obj, dict) and obj.get("ok"):
            if key is None or not self._proved or not hmac.compare_digest(
                _as_bytes(obj.get("proof")), _proof(key, _ACCEPTOR_LABEL, self._transcript)
            ):
                verdict = {"ok": False, "error": "the peer did not prove that it holds the "
                                                 "cluster key (is it a silo of this cluster?)"}
                conn.close()
            else:
                # Register before anything else is read: the acceptor may send on this
                # connection right after its reply, in the same read.
                conn.mark_ready()
                conn.hub.register(conn)
        assert conn.handshake is not None
        if not conn.handshake.done():
            conn.handshake.set_result(verdict)

    # -- acceptor -------------------------------------------------------------------------
    def _on_hello(self, obj: Any, payload: bytes | bytearray) -> None:
        conn = self.conn
        hub = conn.hub
        tool = isinstance(obj, dict) and obj.get("silo") is None
        # A tool presents the client secret; a silo proves the cluster key instead.
        error = (check_handshake(obj, hub.cluster_id, hub.secret if tool else None)
                 or hub.accepting(obj))
        if error is None and tool:
            conn.send(msgpack.packb(
                {"v": PROTOCOL_VERSION, "ok": True, "silo": encode_silo(hub.silo)}
            ))
            conn.mark_ready()
            conn.tool = True
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
        if error is None and peer is not None and not same_host(peer.host, conn.peer_host):
            error = f"the connection claims silo {peer} but comes from {conn.peer_host}"
        if error is not None or peer is None:
            self.refuse(error or "bad hello")
            return
        conn.peer_silo = peer
        self._transcript.update(payload)
        challenge = msgpack.packb({
            "v": PROTOCOL_VERSION, "challenge": os.urandom(_NONCE_SIZE),
            "silo": encode_silo(hub.silo),
        })
        self._transcript.update(challenge)
        self._stage = "proof"
        conn.send(challenge)

    def _on_proof(self, obj: Any, payload: bytes | bytearray) -> None:
        conn = self.conn
        key = conn.hub.key
        assert key is not None and conn.peer_silo is not None
        expected = _proof(key, _OPENER_LABEL, self._transcript)
        if not isinstance(obj, dict) or not hmac.compare_digest(
            _as_bytes(obj.get("proof")), expected
        ):
            self.refuse(f"the connection claiming silo {conn.peer_silo} did not prove that it "
                        "holds the cluster key (check cluster_key on every silo)")
            return
        self._transcript.update(payload)
        self._stage = "verify"
        conn.hub.spawn(self._verify(conn.peer_silo))

    async def _verify(self, peer: SiloAddress) -> None:
        conn = self.conn
        try:
            error = await conn.hub.verify_peer(peer)
        except Exception as exc:
            error = f"cannot check membership of silo {peer}: {exc!r}"
        if conn.closed:
            return
        if error is not None:
            self.refuse(error)
            return
        key = conn.hub.key
        assert key is not None
        conn.send(msgpack.packb({
            "v": PROTOCOL_VERSION, "ok": True, "silo": encode_silo(conn.hub.silo),
            "proof": _proof(key, _ACCEPTOR_LABEL, self._transcript),
        }))
        conn.mark_ready()
        conn.opener = peer
        conn.hub.register(conn)

    def refuse(self, reason: str) -> None:
        """Refuse the handshake: answer why, log it, close."""
        conn = self.conn
        guard = conn.hub.guard
        if guard is not None:
            guard.report(conn.peer, "silo_handshake_rejected", reason)
        else:
            conn.log.warning("silo_handshake_rejected", peer=conn.peer, reason=reason)
        conn.send_now(msgpack.packb({"v": PROTOCOL_VERSION, "ok": False, "error": reason}))
        conn.close()
