"""SiloTransport: the silo-to-silo transport of one silo (a listener, one connection per peer).

Where it sits: a request for a grain that lives on another silo leaves the dispatcher through
``send_message`` and arrives at the other silo's ``Dispatcher.deliver_addressed``; the
response comes back on the same connection and completes the caller's ``reply``. Membership
probes, gossip and grain-directory operations travel on the same connection as *control*
requests, so a silo whose messaging is stuck also stops answering probes. The frames and one
connection's behaviour are in ``cluster/connection.py``.

At the handshake both silos prove that they hold the cluster key (a challenge-response, see
``cluster/connection.py``); a wrong cluster id, a missing proof, a claimed silo that
membership does not list as a live member, or a ``to`` whose generation is not this
process's (the silo it wanted has restarted) is refused. Connections that have not completed
the handshake are bounded by a ``HandshakeGuard`` (``messaging/guard.py``).

One connection per silo pair. Either silo may open it and both send on it. When both open
one at the same moment, both keep the connection opened by the lower silo address (the same
choice on both sides) and *retire* the other (``SiloConnection.retire``), so the race costs
no call.

Failing fast: a call to a silo that membership declared dead, whose connection is refused or
lost, fails at once with ``SiloUnavailableError`` (its pending calls too) instead of waiting
for the response timeout. Pending requests whose timeout passed are swept every second of
the silo's clock.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, final

from orleanspy._util.clock import Clock, SystemClock
from orleanspy._util.futures import reply_to
from orleanspy._util.tasks import TaskSet
from orleanspy.cluster.connection import SiloConnection, decode_silo, encode_silo
from orleanspy.cluster.query import query_silo
from orleanspy.errors import (
    ConfigurationError,
    MessageRejectedError,
    SiloUnavailableError,
)
from orleanspy.ids import SiloAddress
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.guard import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_PENDING,
    HandshakeGuard,
)
from orleanspy.messaging.message import Message

__all__ = [
    "SiloConnection",
    "SiloTransport",
    "TransportStatistics",
    "decode_silo",
    "encode_silo",
    "query_silo",
]

CONNECT_TIMEOUT: Final = 5.0
SWEEP_PERIOD: Final = 1.0

Handler = Callable[..., Any]


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


@final
class SiloTransport:
    """The silo-to-silo transport of one silo: a listener and one connection per peer.

    Implements the membership ``Prober`` and ``Gossiper`` protocols. ``handlers`` maps a
    control op name to a function called with the op's args (its result, awaited if it is
    awaitable, is the answer); the silo builder makes the table (membership, directory,
    status).

    Args:
        silo: this silo's address (``set_address`` once the listener knows its port).
        deliver: called with each request/one-way message from a peer and the peer's address.
        cluster_id: checked at every handshake; secret: the client secret a tool presents.
        key: the silo key (``silo_key(cluster key)``) both ends of a silo connection prove;
            None: no silo connection is accepted or opened (tools only).
        verify_peer: None if membership lists a silo (that generation) as a live member,
            else why not; asked before a connecting silo is accepted (default: any).
        handshake_timeout, max_pending_handshakes: bounds on connections that have not
            completed their handshake.
        is_dead: True for a silo membership declared dead (calls to it fail at once).
        clock: the silo's clock (connect and request timeouts, the sweep of late calls).
        reroute: called with a message that could not be sent to a silo (never delivered);
            True if it took the message (routed it anew), False to fail it. None: fail it.
        handlers: the control ops this silo answers (op name → function).
        cancel: called with a request from a peer whose sender gave up on it.
    """

    def __init__(
        self,
        silo: SiloAddress,
        codec: Codec,
        log: Any,
        *,
        cluster_id: str,
        secret: str | None,
        key: bytes | None,
        max_frame_size: int,
        default_timeout: float,
        deliver: Callable[[Message, SiloAddress | None], None],
        is_dead: Callable[[SiloAddress], bool] = lambda silo: False,
        clock: Clock | None = None,
        verify_peer: Callable[[SiloAddress], Awaitable[str | None]] | None = None,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        max_pending_handshakes: int = DEFAULT_MAX_PENDING,
        reroute: Callable[[Message, SiloAddress], bool] | None = None,
        handlers: dict[str, Handler] | None = None,
        cancel: Callable[[Message], None] | None = None,
    ) -> None:
        self.silo = silo
        self.clock = clock or SystemClock()
        self.codec = codec
        self.log = log
        self.cluster_id = cluster_id
        self.secret = secret
        self.key = key
        self._verify_peer = verify_peer
        #: called with a message that could not be sent to a silo (never delivered); True if
        #: it took the message (routed it anew), False to fail it
        self.reroute = reroute
        self.guard: HandshakeGuard | None = HandshakeGuard(
            self.clock, log, port="silo", timeout=handshake_timeout,
            max_pending=max_pending_handshakes,
        )
        self.max_frame_size = max_frame_size
        self.default_timeout = default_timeout
        self.handlers: dict[str, Handler] = handlers if handlers is not None else {}
        #: a request or one-way message from a peer, for this silo (every request calls it)
        self.deliver: Callable[[Message, SiloAddress | None], None] = deliver
        #: a peer gave up on a request it sent here (``Dispatcher.cancel``)
        self.cancel: Callable[[Message], None] = cancel or _ignore
        self._is_dead = is_dead
        self._ids = itertools.count(1)
        #: a new request id (bound once: the send path calls it for every request)
        self.next_id: Callable[[], int] = self._ids.__next__
        self._conns: dict[SiloAddress, SiloConnection] = {}
        self._all: set[SiloConnection] = set()
        self._connecting: dict[SiloAddress, asyncio.Future[SiloConnection]] = {}
        self._tasks = TaskSet(on_error=self._task_failed)
        self._server: asyncio.Server | None = None
        self._closing = False
        self.port = 0
        #: True while ``quiesce`` waits: connections then report their last call's end
        self.waiting_quiet = False
        self._quiet: asyncio.Future[None] | None = None
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
        self._tasks.spawn(self._sweep_loop(), name="silo-transport-sweep")
        return self.port

    def set_address(self, silo: SiloAddress) -> None:
        self.silo = silo

    def set_log(self, log: Any) -> None:
        self.log = log
        if self.guard is not None:
            self.guard.log = log

    async def quiesce(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until no request is in flight on any connection, in
        either direction: a stopping silo answers what it was asked and hears back about
        what it sent on before it closes its connections. Woken by the connections
        (``settled``) when their last call ends, not by polling."""
        if not self._busy():
            return
        quiet: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._quiet = quiet
        self.waiting_quiet = True
        try:
            async with self.clock.timeout(timeout):
                await quiet
        except TimeoutError:
            pass
        finally:
            self._quiet = None
            self.waiting_quiet = False

    def _busy(self) -> bool:
        return any(conn.pending or conn.serving for conn in self._all)

    def settled(self) -> None:
        """A connection's last call ended (while ``quiesce`` waits): wake it if no
        connection has one left."""
        quiet = self._quiet
        if quiet is not None and not quiet.done() and not self._busy():
            quiet.set_result(None)

    async def close(self) -> None:
        """Close the listener and every connection (pending calls fail), end the tasks."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for conn in list(self._all):
            conn.close()
        await self._tasks.close()
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

    def _task_failed(self, task: asyncio.Task[Any], exc: BaseException) -> None:
        if task not in self._connecting.values():  # a failed connect is its callers' error
            self.log.error("silo_transport_task_failed", error=repr(exc))

    # -- ConnectionHub ------------------------------------------------------------------------
    async def verify_peer(self, silo: SiloAddress) -> str | None:
        if self._verify_peer is None:
            return None
        return await self._verify_peer(silo)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self._tasks.spawn(coro)

    # -- handshake and the connection table -------------------------------------------------
    def accepting(self, obj: dict[str, Any]) -> str | None:
        """None if the handshake ``obj`` may connect: it wants this silo (``to``, this
        generation) and the transport is not closing; else why not."""
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

    def register(self, conn: SiloConnection) -> None:
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

    def unregister(self, conn: SiloConnection) -> None:
        self._all.discard(conn)
        peer = conn.peer_silo
        if peer is not None and self._conns.get(peer) is conn:
            del self._conns[peer]
        if self.waiting_quiet:
            self.settled()

    async def _connection(self, silo: SiloAddress) -> SiloConnection:
        conn = self._conns.get(silo)
        if conn is not None and not conn.closed:
            return conn
        if self._closing:
            raise SiloUnavailableError(f"silo {self.silo} is stopping its transport")
        if self._is_dead(silo):
            raise SiloUnavailableError(f"silo {silo} was declared dead")
        if self.key is None:
            raise SiloUnavailableError(
                f"silo {self.silo} has no cluster key: it cannot connect to silo {silo}")
        fut = self._connecting.get(silo)
        if fut is None:
            fut = self._tasks.spawn(self._open(silo))
            self._connecting[silo] = fut
            fut.add_done_callback(lambda _: self._connecting.pop(silo, None))
        return await asyncio.shield(fut)

    async def _open(self, silo: SiloAddress) -> SiloConnection:
        loop = asyncio.get_running_loop()
        conn: SiloConnection | None = None
        try:
            async with self.clock.timeout(CONNECT_TIMEOUT):
                _, conn = await loop.create_connection(
                    lambda: SiloConnection(self, self.silo, silo), silo.host, silo.port
                )
                conn.hello()
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

    def retire_peer(self, silo: SiloAddress) -> None:
        """``silo`` left gracefully: send nothing new to it, let the calls in flight finish."""
        conn = self._conns.pop(silo, None)
        if conn is not None and not conn.closed:
            conn.retire()

    def close_peer(self, silo: SiloAddress) -> None:
        """Membership declared ``silo`` dead: close its connections, failing its calls."""
        for conn in list(self._all):
            if conn.peer_silo == silo:
                conn.close()

    # -- sending --------------------------------------------------------------------------
    def writable(self, silo: SiloAddress) -> SiloConnection | None:
        """The connection to ``silo`` if a frame can be written to it now, else None."""
        conn = self._conns.get(silo)
        return conn if conn is not None and not conn.closed and not conn.write_paused else None

    def send_message(self, silo: SiloAddress, msg: Message) -> None:
        """Send ``msg`` to ``silo``; failures (and the response) go to ``msg.reply``."""
        conn = self._conns.get(silo)
        if conn is not None and not conn.closed and not conn.write_paused:
            conn.send_message(msg)
            return
        if self._is_dead(silo) or self._closing:
            if not self._closing and self.reroute is not None and self.reroute(msg, silo):
                return  # never sent: it goes to the grain's next home
            _fail(msg, SiloUnavailableError(f"silo {silo} was declared dead"), self.log)
            return
        self._tasks.spawn(self._send_later(silo, msg))

    async def _send_later(self, silo: SiloAddress, msg: Message) -> None:
        try:
            conn = await self._connection(silo)
            await conn.wait_writable()
        except SiloUnavailableError as exc:
            if self.reroute is not None and not self._closing and self.reroute(msg, silo):
                return  # it never left: the silo is gone or leaving, route it anew
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
        async with self.clock.timeout(t):
            conn = await self._connection(silo)
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            conn.send_control(op, args, partial(reply_to, fut), t)
            return await fut

    def notify(self, silo: SiloAddress, op: str, args: list[Any]) -> None:
        """Send control one-way ``op`` if a connection to ``silo`` is open (else drop it)."""
        conn = self._conns.get(silo)
        if conn is not None and not conn.closed:
            conn.send_control(op, args, None, 0.0)

    # -- receiving control ops --------------------------------------------------------------
    def control(self, conn: SiloConnection, answer: bool, corr: int, op: str,
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
        if self._closing:
            result.close()
            if answer:
                conn.reply(corr, False, SiloUnavailableError(f"silo {self.silo} is stopping"))
            return
        task = self._tasks.spawn(result)
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
            async with self.clock.timeout(timeout):
                conn = await self._connection(intermediary)
        except (Exception, TimeoutError):
            return None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        conn.send_control("probe_indirect", [encode_silo(target), timeout * 0.5],
                          partial(reply_to, fut), timeout)
        try:
            async with self.clock.timeout(timeout):
                return bool(await fut)
        except SiloUnavailableError:
            return None
        except (Exception, TimeoutError):
            return False

    async def gossip(self, silo: SiloAddress, version: int) -> None:
        await self.request(silo, "gossip", [version])

    # -- timeouts ---------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        clock = self.clock
        while True:
            await clock.sleep(SWEEP_PERIOD)
            now = clock.monotonic()
            for conn in list(self._all):
                conn.expire(now)


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


def _ignore(msg: Message) -> None:
    """No dispatcher to tell of a cancel (a tool's transport)."""
