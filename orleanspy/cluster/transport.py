"""SiloTransport: silo-to-silo connections, on the gateway's framing and handshake.

Where it sits: a request for a grain that lives on another silo leaves the dispatcher through
``send_message`` and arrives at the other silo's ``Dispatcher.deliver_addressed``; the
response comes back on the same connection and completes the caller's ``reply``. Membership
probes, gossip and grain-directory operations travel on the same connection as *control*
requests, so a silo whose messaging is stuck also stops answering probes.

Frames (4-byte big-endian length + msgpack, ``FramedConnection``; never pickle):

* handshake (opener -> acceptor): ``{"v", "cluster", "secret", "silo": [h, p, g] | None,
  "to": [h, p, g] | None}``; ``silo`` None marks a tool (``orleanspy cluster status``) that
  may only send control requests. Reply ``{"v", "ok": true, "silo": [h, p, g]}`` or
  ``{"v", "ok": false, "error"}``. A wrong cluster id or secret, or a ``to`` whose generation
  is not this process's (the silo it wanted has restarted), is refused.
* request / one-way: ``[0 | 1, id, type_name, key, method, args, kwargs, timeout, chain,
  hops]``; response ``[2, id, ok, value]`` (an error value as in ``messaging/wire.py``).
* control request ``[3, id, op, args]`` (answered with a response), control one-way
  ``[4, 0, op, args]``, and ``[5]``: "I have nothing pending on this connection".

One connection per silo pair. Either silo may open it and both send on it. When both open
one at the same moment, both keep the connection opened by the lower silo address (the same
choice on both sides) and *retire* the other: nothing new is sent on it, answers still flow,
and once each side has nothing pending it sends ``[5]``; a side that has sent and received
``[5]`` closes it. So the race costs no call.

Failing fast: a call to a silo that membership declared dead, whose connection is refused or
lost, fails at once with ``SiloUnavailableError`` (its pending calls too) instead of waiting
for the response timeout. Pending requests whose timeout passed are swept every second.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, final

import msgpack

from orleanspy.errors import (
    ConfigurationError,
    GrainCallTimeoutError,
    MessageRejectedError,
    ProtocolError,
    SerializationError,
    SiloUnavailableError,
)
from orleanspy.ids import GrainId, SiloAddress, normalize_key
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.connection import FramedConnection
from orleanspy.messaging.message import Direction, Message
from orleanspy.messaging.wire import (
    PROTOCOL_VERSION,
    chain_entry,
    decode_error,
    response_payload,
)

__all__ = [
    "SiloConnection",
    "SiloTransport",
    "TransportStatistics",
    "decode_silo",
    "encode_silo",
    "query_silo",
]

REQUEST: Final = 0
ONE_WAY: Final = 1
RESPONSE: Final = 2
CONTROL: Final = 3
CONTROL_ONE_WAY: Final = 4
DRAINED: Final = 5

CONNECT_TIMEOUT: Final = 5.0
SWEEP_PERIOD: Final = 1.0
#: Grace after a request's timeout before the sweeper fails it (the caller's own timer fires
#: first; the sweep frees the entry and answers forwarded requests).
SWEEP_GRACE: Final = 1.0

Handler = Callable[..., Any]


def encode_silo(silo: SiloAddress) -> list[Any]:
    return [silo.host, silo.port, silo.generation]


def decode_silo(value: Any) -> SiloAddress:
    if type(value) is not list or len(value) != 3:
        raise ValueError(f"a silo address must be [host, port, generation], not {value!r}")
    host, port, generation = value
    if type(host) is not str or type(port) is not int or type(generation) is not int:
        raise ValueError(f"a silo address must be [str, int, int], not {value!r}")
    return SiloAddress(host, port, generation)


def _silo_order(silo: SiloAddress) -> tuple[str, int, int]:
    return (silo.host, silo.port, silo.generation)




@dataclass(frozen=True, slots=True)
class TransportStatistics:
    """Counters of one transport (``SiloTransport.statistics()``)."""

    connections: int
    pending: int
    requests_sent: int
    connects_failed: int
    retired: int


class SiloConnection(FramedConnection):
    """One connection between two silos (or a tool and a silo), either side's view."""

    def __init__(self, transport: SiloTransport, opener: SiloAddress | None,
                 peer: SiloAddress | None) -> None:
        super().__init__(transport.max_frame_size, transport.log)
        self.hub = transport
        self.codec = transport.codec
        self.opener = opener  # None for an accepted connection until the handshake
        self.peer_silo = peer
        self.outbound = peer is not None
        self.ready = False
        self.tool = False
        self.retired = False
        self._sent_drained = False
        self._got_drained = False
        # corr -> (reply, deadline, sent as control)
        self.pending: dict[int, tuple[Callable[[bool, Any], None], float]] = {}
        self.handshake: asyncio.Future[Any] | None = (
            self.loop.create_future() if self.outbound else None
        )

    def __repr__(self) -> str:
        return f"<SiloConnection peer={self.peer_silo} opener={self.opener} ready={self.ready}>"

    # -- receiving ------------------------------------------------------------------------
    def frame_received(self, payload: bytes) -> None:
        try:
            obj = self.codec.unpackb(payload)
        except SerializationError as exc:
            if self.ready and self._reject_one(payload, exc):
                return
            raise ProtocolError(f"undecodable frame ({exc})") from exc
        except Exception as exc:
            raise ProtocolError(f"undecodable msgpack frame ({exc.__class__.__name__})") from exc
        if not self.ready:
            if self.outbound:
                # Register before anything else is read: the acceptor may send on this
                # connection right after its reply, in the same read.
                if isinstance(obj, dict) and obj.get("ok"):
                    self.ready = True
                    self.hub._register(self)
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
            self._request(obj)
        elif kind in (CONTROL, CONTROL_ONE_WAY):
            if len(obj) != 4 or type(obj[2]) is not str or type(obj[3]) is not list:
                raise ProtocolError("a control frame must be [3|4, id, op, args]")
            self.hub._control(self, kind == CONTROL, obj[1], obj[2], obj[3])
        elif kind == DRAINED:
            self._got_drained = True
            self._maybe_close_retired()
        else:
            raise ProtocolError(f"unknown frame kind {kind!r}")

    def _request(self, obj: list[Any]) -> None:
        if len(obj) != 10:
            raise ProtocolError("a request frame must be a 10-element msgpack array")
        kind, corr, type_name, key, method, args, kwargs, timeout, chain, hops = obj
        if (
            type(corr) is not int
            or type(type_name) is not str
            or type(method) is not str
            or type(args) is not list
            or not (kwargs is None or type(kwargs) is dict)
            or type(chain) is not list
            or type(hops) is not int
        ):
            raise ProtocolError("a request frame has fields of the wrong types")
        one_way = kind == ONE_WAY
        try:
            gid = GrainId(type_name, normalize_key(key))
            entries = tuple(chain_entry(e) for e in chain) if chain else ()
        except Exception as exc:  # a bad key or chain: answer this request, keep serving
            if not one_way:
                self.send(response_payload(self.codec, corr, False, exc))
            return
        msg = Message(
            Direction.ONE_WAY if one_way else Direction.REQUEST,
            gid, method, args, kwargs, entries, 0,
            timeout if isinstance(timeout, (int, float)) else None,
        )
        if hops:
            msg.hops = hops
        if not one_way:
            msg.reply = partial(self.reply, corr)
        self.hub._deliver(msg, self.peer_silo)

    def _reject_one(self, payload: bytes, exc: Exception) -> bool:
        try:
            raw = msgpack.unpackb(payload, raw=False, strict_map_key=False,
                                  ext_hook=lambda code, data: None)
        except Exception:
            return False
        if type(raw) is not list or len(raw) < 2 or type(raw[1]) is not int:
            return False
        if raw[0] in (REQUEST, CONTROL):
            self.reply(raw[1], False, SerializationError(
                f"the silo cannot decode this request's arguments: {exc}"
            ))
        elif raw[0] == RESPONSE:
            entry = self.pending.pop(raw[1], None)
            if entry is not None:
                entry[0](False, SerializationError(f"the result cannot be decoded here: {exc}"))
        return True

    def _accept_handshake(self, obj: Any) -> None:
        hub = self.hub
        if not isinstance(obj, dict) or obj.get("v") != PROTOCOL_VERSION:
            raise ProtocolError(
                f"bad handshake: expected a map with protocol version {PROTOCOL_VERSION}"
            )
        error = hub.check_handshake(obj)
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
        hub._register(self)

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
        corr = next(hub._ids)
        timeout = msg.timeout or hub.default_timeout
        try:
            chain = msg.chain
            payload = codec.packb([REQUEST, corr, target.type_name, target.key, msg.method,
                                   list(msg.args), msg.kwargs, timeout,
                                   [list(e) for e in chain] if chain else [], hops])
        except SerializationError as exc:
            reply(False, exc)
            return
        self.pending[corr] = (reply, self.loop.time() + timeout + SWEEP_GRACE)
        hub.requests_sent += 1
        self.send(payload)

    def send_control(self, op: str, args: list[Any], reply: Callable[[bool, Any], None] | None,
                     timeout: float) -> None:
        if reply is None:
            self.send(self.codec.packb([CONTROL_ONE_WAY, 0, op, args]))
            return
        corr = next(self.hub._ids)
        payload = self.codec.packb([CONTROL, corr, op, args])
        self.pending[corr] = (reply, self.loop.time() + timeout + SWEEP_GRACE)
        self.send(payload)

    # -- retiring a duplicate connection ----------------------------------------------------
    def retire(self) -> None:
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
        self.hub._unregister(self)
        self.fail_pending(SiloUnavailableError(
            f"connection to silo {self.peer_silo or self.peer} was lost"
        ))


@final
class SiloTransport:
    """The silo-to-silo transport of one silo: a listener and one connection per peer.

    Implements the membership ``Prober`` and ``Gossiper`` protocols. ``handlers`` maps a
    control op name to a function called with the op's args (its result, awaited if it is
    awaitable, is the answer); the cluster runtime fills it (membership, directory, status).

    Args:
        silo: this silo's address (``set_address`` once the listener knows its port).
        deliver: called with each request/one-way message from a peer and the peer's address.
        cluster_id, secret: checked at every handshake.
        is_dead: True for a silo membership declared dead (calls to it fail at once).
    """

    def __init__(
        self,
        silo: SiloAddress,
        codec: Codec,
        log: Any,
        *,
        cluster_id: str,
        secret: str | None,
        max_frame_size: int,
        default_timeout: float,
        deliver: Callable[[Message, SiloAddress | None], None],
        is_dead: Callable[[SiloAddress], bool] = lambda silo: False,
    ) -> None:
        self.silo = silo
        self.codec = codec
        self.log = log
        self.cluster_id = cluster_id
        self.secret = secret
        self.max_frame_size = max_frame_size
        self.default_timeout = default_timeout
        self.handlers: dict[str, Handler] = {}
        self._deliver = deliver
        self._is_dead = is_dead
        self._ids = itertools.count(1)
        self._conns: dict[SiloAddress, SiloConnection] = {}
        self._all: set[SiloConnection] = set()
        self._connecting: dict[SiloAddress, asyncio.Future[SiloConnection]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._server: asyncio.Server | None = None
        self._closing = False
        self.port = 0
        self.requests_sent = 0
        self.connects_failed = 0
        self.retired_count = 0

    # -- lifecycle ------------------------------------------------------------------------
    async def listen(self, host: str, port: int) -> int:
        """Start accepting silo connections; returns the port (``port`` 0 picks one)."""
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: SiloConnection(self, None, None), host, port
            )
        except OSError as exc:
            raise ConfigurationError(
                f"SiloOptions.port = {port} on {host}: cannot listen ({exc}); pick a free "
                "port (0 picks one) or stop the process that holds it"
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._spawn(self._sweep_loop())
        return self.port

    def set_address(self, silo: SiloAddress) -> None:
        self.silo = silo

    async def close(self) -> None:
        """Close the listener and every connection (pending calls fail), end the tasks."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._all):
            conn.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def statistics(self) -> TransportStatistics:
        return TransportStatistics(
            connections=len(self._conns),
            pending=sum(len(c.pending) for c in self._all),
            requests_sent=self.requests_sent,
            connects_failed=self.connects_failed,
            retired=self.retired_count,
        )

    def _spawn(self, coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.log.error("silo_transport_task_failed", error=repr(task.exception()))

    # -- handshake and the connection table -------------------------------------------------
    def check_handshake(self, obj: dict[str, Any]) -> str | None:
        if obj.get("cluster") != self.cluster_id:
            return f"wrong cluster id {obj.get('cluster')!r} (this silo serves another cluster)"
        if self.secret is not None and not hmac.compare_digest(
            str(obj.get("secret") or "").encode(), self.secret.encode()
        ):
            return "wrong or missing secret"
        to = obj.get("to")
        if to is not None:
            try:
                wanted = decode_silo(to)
            except ValueError as exc:
                return str(exc)
            if wanted != self.silo:
                return f"this is silo {self.silo}, not {wanted} (that silo is gone)"
        if self._closing:
            return f"silo {self.silo} is shutting down its transport"
        return None

    def _register(self, conn: SiloConnection) -> None:
        """A connection to ``conn.peer_silo`` is ready: keep one per peer (see module doc)."""
        peer = conn.peer_silo
        assert peer is not None
        self._all.add(conn)
        current = self._conns.get(peer)
        if current is None or current.closed or current is conn:
            self._conns[peer] = conn
            return
        # Two connections to one peer: keep the one the lower silo opened, on both sides.
        lower = min(self.silo, peer, key=_silo_order)
        keep, drop = (conn, current) if conn.opener == lower else (current, conn)
        self._conns[peer] = keep
        self.log.debug("silo_connection_retired", peer=str(peer))
        drop.retire()

    def _unregister(self, conn: SiloConnection) -> None:
        self._all.discard(conn)
        peer = conn.peer_silo
        if peer is not None and self._conns.get(peer) is conn:
            del self._conns[peer]

    async def _connection(self, silo: SiloAddress) -> SiloConnection:
        conn = self._conns.get(silo)
        if conn is not None and not conn.closed:
            return conn
        if self._closing:
            raise SiloUnavailableError(f"silo {self.silo} is stopping its transport")
        if self._is_dead(silo):
            raise SiloUnavailableError(f"silo {silo} was declared dead")
        fut = self._connecting.get(silo)
        if fut is None:
            fut = self._spawn(self._open(silo))
            self._connecting[silo] = fut
            fut.add_done_callback(lambda _: self._connecting.pop(silo, None))
        return await asyncio.shield(fut)

    async def _open(self, silo: SiloAddress) -> SiloConnection:
        loop = asyncio.get_running_loop()
        conn: SiloConnection | None = None
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                _, conn = await loop.create_connection(
                    lambda: SiloConnection(self, self.silo, silo), silo.host, silo.port
                )
                conn.send(msgpack.packb({
                    "v": PROTOCOL_VERSION, "cluster": self.cluster_id, "secret": self.secret,
                    "silo": encode_silo(self.silo), "to": encode_silo(silo),
                }))
                assert conn.handshake is not None
                reply = await conn.handshake
        except (OSError, TimeoutError, SiloUnavailableError) as exc:
            self.connects_failed += 1
            if conn is not None:
                conn.close()
            raise SiloUnavailableError(f"cannot connect to silo {silo}: {exc!r}") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            conn.close()
            self.connects_failed += 1
            error = reply.get("error") if isinstance(reply, dict) else repr(reply)
            raise SiloUnavailableError(f"silo {silo} refused the connection: {error}")
        if conn.retired:  # the peer's connection got there first; use it
            current = self._conns.get(silo)
            if current is not None:
                return current
        return conn

    def close_peer(self, silo: SiloAddress) -> None:
        """Membership declared ``silo`` dead: close its connections, failing its calls."""
        for conn in list(self._all):
            if conn.peer_silo == silo:
                conn.close()

    # -- sending --------------------------------------------------------------------------
    def send_message(self, silo: SiloAddress, msg: Message) -> None:
        """Send ``msg`` to ``silo``; failures (and the response) go to ``msg.reply``."""
        conn = self._conns.get(silo)
        if conn is not None and not conn.closed and not conn.write_paused:
            conn.send_message(msg)
            return
        if self._is_dead(silo) or self._closing:
            _fail(msg, SiloUnavailableError(f"silo {silo} was declared dead"), self.log)
            return
        self._spawn(self._send_later(silo, msg))

    async def _send_later(self, silo: SiloAddress, msg: Message) -> None:
        try:
            conn = await self._connection(silo)
            await conn.wait_writable()
        except SiloUnavailableError as exc:
            _fail(msg, exc, self.log)
            return
        if conn.closed:
            _fail(msg, SiloUnavailableError(f"connection to silo {silo} was lost"), self.log)
            return
        conn.send_message(msg)

    async def request(self, silo: SiloAddress, op: str, args: list[Any],
                      timeout: float | None = None) -> Any:
        """Send control request ``op`` to ``silo`` and return its answer.

        Raises:
            SiloUnavailableError: the silo cannot be reached or the connection was lost.
            TimeoutError: no answer within ``timeout`` (default: the response timeout).
            Exception: whatever the handler raised over there.
        """
        t = timeout or self.default_timeout
        async with asyncio.timeout(t):
            conn = await self._connection(silo)
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            conn.send_control(op, args, partial(_settle, fut), t)
            return await fut

    def notify(self, silo: SiloAddress, op: str, args: list[Any]) -> None:
        """Send control one-way ``op`` if a connection to ``silo`` is open (else drop it)."""
        conn = self._conns.get(silo)
        if conn is not None and not conn.closed:
            conn.send_control(op, args, None, 0.0)

    # -- receiving control ops --------------------------------------------------------------
    def _control(self, conn: SiloConnection, answer: bool, corr: Any, op: str,
                 args: list[Any]) -> None:
        handler = self.handlers.get(op)
        if handler is None:
            if answer:
                conn.reply(corr, False, MessageRejectedError(
                    f"silo {self.silo} has no control operation {op!r}", "unknown_operation"))
            return
        try:
            result = handler(*args)
        except Exception as exc:
            if answer:
                conn.reply(corr, False, exc)
            else:
                self.log.warning("silo_control_failed", op=op, error=repr(exc))
            return
        if not asyncio.iscoroutine(result):
            if answer:
                conn.reply(corr, True, result)
            return
        task = self._spawn(result)
        if answer:
            task.add_done_callback(partial(_answer, conn, corr))

    # -- membership Prober and Gossiper -------------------------------------------------------
    async def probe(self, silo: SiloAddress, timeout: float) -> bool:
        try:
            return bool(await self.request(silo, "probe", [], timeout))
        except (Exception, TimeoutError):
            return False

    async def probe_indirect(
        self, intermediary: SiloAddress, target: SiloAddress, timeout: float
    ) -> bool | None:
        try:
            async with asyncio.timeout(timeout):
                conn = await self._connection(intermediary)
        except (Exception, TimeoutError):
            return None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        conn.send_control("probe_indirect", [encode_silo(target), timeout * 0.5],
                          partial(_settle, fut), timeout)
        try:
            async with asyncio.timeout(timeout):
                return bool(await fut)
        except SiloUnavailableError:
            return None
        except (Exception, TimeoutError):
            return False

    async def gossip(self, silo: SiloAddress, version: int) -> None:
        await self.request(silo, "gossip", [version])

    # -- timeouts ---------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_PERIOD)
            now = loop.time()
            for conn in list(self._all):
                expired = [corr for corr, (_, deadline) in conn.pending.items() if deadline < now]
                for corr in expired:
                    reply, _ = conn.pending.pop(corr)
                    reply(False, GrainCallTimeoutError(
                        f"no response from silo {conn.peer_silo} in time"
                    ))
                if expired and conn.retired and not conn.pending:
                    conn._maybe_drained()


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _answer(conn: SiloConnection, corr: int, task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        conn.reply(corr, False, SiloUnavailableError("the silo is stopping"))
    elif task.exception() is not None:
        conn.reply(corr, False, task.exception())
    else:
        conn.reply(corr, True, task.result())


def _fail(msg: Message, exc: BaseException, log: Any) -> None:
    if msg.reply is not None:
        msg.reply(False, exc)
    else:
        log.warning("one_way_call_failed", grain=str(msg.target), method=msg.method,
                    error=repr(exc))


async def query_silo(
    host: str, port: int, op: str, args: list[Any], *, cluster_id: str,
    secret: str | None = None, timeout: float = 5.0,
) -> Any:
    """Ask the silo listening on ``host:port`` one control question, as a tool (CLI).

    Raises:
        SiloUnavailableError: unreachable, or it refused the handshake.
        TimeoutError: no answer within ``timeout``.
    """
    codec = Codec()
    async with asyncio.timeout(timeout):
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            raise SiloUnavailableError(f"cannot connect to silo {host}:{port}: {exc}") from None
        try:
            async def read_frame() -> Any:
                size = int.from_bytes(await reader.readexactly(4), "big")
                return codec.unpackb(await reader.readexactly(size))

            def write_frame(obj: Any) -> None:
                data = codec.packb(obj)
                writer.write(len(data).to_bytes(4, "big") + data)

            write_frame({"v": PROTOCOL_VERSION, "cluster": cluster_id, "secret": secret,
                         "silo": None, "to": None})
            reply = await read_frame()
            if not isinstance(reply, dict) or not reply.get("ok"):
                error = reply.get("error") if isinstance(reply, dict) else repr(reply)
                raise SiloUnavailableError(f"silo {host}:{port} refused: {error}")
            write_frame([CONTROL, 1, op, args])
            response = await read_frame()
            if response[2]:
                return response[3]
            raise decode_error(response[3])
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            raise SiloUnavailableError(f"silo {host}:{port} closed the connection: {exc}") from None
        finally:
            writer.close()
