"""ClusterClient: calls grains from another process through the silos' gateways.

Requests are framed as in ``messaging/wire.py``; responses resolve futures by correlation
id. The client keeps a connection to every configured gateway (or to
``ClientOptions.gateway_count`` of them) and routes each call by its grain id's hash, so the
calls of one grain go through one gateway (in order) while different grains spread over all
of them. When a connection drops, the calls pending on it fail at once with
``SiloUnavailableError`` (never resent: the client cannot know whether they ran), new calls
go to the remaining gateways, and a background task reconnects with exponential back-off.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from collections import deque
from functools import partial
from typing import Any, TypeVar, overload

import msgpack

from orleanspy.errors import (
    GrainCallTimeoutError,
    ProtocolError,
    SerializationError,
    SiloUnavailableError,
)
from orleanspy.grains.grain import Grain
from orleanspy.grains.reference import GrainRef, make_reference
from orleanspy.ids import GrainId
from orleanspy.logging import get_logger
from orleanspy.messaging.codec import Codec, resolve_name
from orleanspy.messaging.connection import FramedConnection
from orleanspy.messaging.wire import PROTOCOL_VERSION, decode_error
from orleanspy.options import ClientOptions

__all__ = ["ClusterClient"]

G = TypeVar("G")


class _Deadlines:
    """Request timeouts without a timer per call.

    Calls with the same timeout expire in the order they were sent, so each timeout value
    keeps a FIFO of (deadline, id, grain, method, pending map of the call's connection);
    heads whose call already finished are dropped as responses arrive, and one timer is armed
    for the earliest live head.
    """

    __slots__ = ("_handle", "_loop", "_queues")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queues: dict[float, deque[tuple[float, int, GrainId, str, dict[int, Any]]]] = {}
        self._handle: asyncio.TimerHandle | None = None

    def add(
        self, timeout: float, corr: int, grain_id: GrainId, method: str,
        pending: dict[int, Any],
    ) -> None:
        q = self._queues.get(timeout)
        if q is None:
            q = self._queues[timeout] = deque()
        deadline = self._loop.time() + timeout
        q.append((deadline, corr, grain_id, method, pending))
        handle = self._handle
        if handle is None:
            self._handle = self._loop.call_at(deadline, self._sweep)
        elif deadline < handle.when():
            handle.cancel()
            self._handle = self._loop.call_at(deadline, self._sweep)

    def trim(self) -> None:
        for q in self._queues.values():
            while q and q[0][1] not in q[0][4]:
                q.popleft()

    def _sweep(self) -> None:
        self._handle = None
        now = self._loop.time()
        earliest = None
        for timeout, q in self._queues.items():
            while q and (q[0][0] <= now or q[0][1] not in q[0][4]):
                _, corr, grain_id, method, pending = q.popleft()
                fut = pending.pop(corr, None)
                if fut is not None and not fut.done():
                    fut.set_exception(
                        GrainCallTimeoutError(
                            f"call {grain_id}.{method} timed out after {timeout:g} s "
                            "(per-call: ref.with_timeout(s); client: response_timeout)"
                        )
                    )
            if q and (earliest is None or q[0][0] < earliest):
                earliest = q[0][0]
        if earliest is not None:
            self._handle = self._loop.call_at(earliest, self._sweep)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._queues.clear()


class _ClientConnection(FramedConnection):
    def __init__(self, client: ClusterClient, gateway: _Gateway) -> None:
        super().__init__(client.options.max_frame_size, client.log)
        self.client = client
        self.gateway = gateway
        self.codec = client.codec
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.handshake: asyncio.Future[Any] = self._loop.create_future()
        self._silent = False  # a connection that never became the client's: no effects

    def frame_received(self, payload: bytes) -> None:
        try:
            obj = self.codec.unpackb(payload)
        except SerializationError as exc:
            # The frame is well-formed but a value in it is not importable here (e.g. a
            # dataclass whose module this process lacks): fail that one call only.
            self._fail_one(payload, exc)
            return
        except Exception as exc:
            raise ProtocolError(f"undecodable frame from the gateway ({exc!r})") from exc
        if not self.handshake.done():
            self.handshake.set_result(obj)
            return
        if type(obj) is not list or len(obj) != 4 or obj[0] != 2:
            raise ProtocolError("a response frame must be [2, id, ok, value]")
        fut = self.pending.pop(obj[1], None)
        if fut is None or fut.done():
            return
        if obj[2]:
            fut.set_result(obj[3])
        else:
            fut.set_exception(decode_error(obj[3]))
        self.client._trim_deadlines()

    def _fail_one(self, payload: bytes, exc: SerializationError) -> None:
        try:
            raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            corr = raw[1]
        except Exception as err:
            raise ProtocolError(f"undecodable frame from the gateway ({err!r})") from err
        fut = self.pending.pop(corr, None)
        if fut is not None and not fut.done():
            fut.set_exception(
                SerializationError(f"the result of this call cannot be decoded here: {exc}")
            )

    def close(self) -> None:
        was_closed = self.closed
        super().close()
        if not was_closed and not self._silent:
            # Closed by us (a protocol error, or the client closing): stop routing to it and
            # fail what is pending now rather than when the transport reports the loss.
            self.client._connection_lost(self)

    def on_close(self, exc: Exception | None, by_us: bool) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(
                SiloUnavailableError(f"gateway {self.gateway.address} closed the connection")
            )
            self.handshake.exception()  # retrieved: _open reports it
        if not self._silent:
            self.client._connection_lost(self)


class _Gateway:
    """One configured gateway address and the client's state towards it."""

    __slots__ = ("address", "attempt", "conn", "delay", "error", "host", "index", "next_try",
                 "port", "silo")

    def __init__(self, index: int, address: str, delay: float) -> None:
        self.index = index
        self.address = address
        host, _, port = address.rpartition(":")
        self.host = host
        self.port = int(port)
        self.conn: _ClientConnection | None = None
        self.attempt: asyncio.Future[_ClientConnection] | None = None
        self.delay = delay  # the next back-off
        self.next_try = 0.0  # loop time before which the supervisor does not reconnect
        self.error = ""
        self.silo: str | None = None


class ClusterClient:
    """A client of a cluster: ``await client.connect()``, then ``client.get_grain(...)``.

    With several gateways the client connects to all of them (or to
    ``ClientOptions.gateway_count``), routes each grain's calls through one live gateway
    chosen by the grain id's hash, and fails over when a gateway's connection is lost: the
    calls pending on it raise ``SiloUnavailableError`` (not resent), later calls go through
    the other gateways, and the lost gateway is reconnected with exponential back-off.

    Example::

        async with ClusterClient(gateways=["127.0.0.1:30000", "127.0.0.1:30001"]) as client:
            print(await client.get_grain(Counter, "a").increment())
    """

    def __init__(
        self,
        options: ClientOptions | None = None,
        *,
        gateways: list[str] | tuple[str, ...] | None = None,
        cluster_id: str | None = None,
        secret: str | None = None,
        response_timeout: float | None = None,
    ) -> None:
        base = options or ClientOptions()
        changes: dict[str, Any] = {}
        if gateways is not None:
            changes["gateways"] = tuple(gateways)
        if cluster_id is not None:
            changes["cluster_id"] = cluster_id
        if secret is not None:
            changes["secret"] = secret
        if response_timeout is not None:
            changes["response_timeout"] = response_timeout
        if changes:
            from dataclasses import replace

            base = replace(base, **changes)
        self.options = base
        self.codec = Codec(self._reference_factory)
        self.log = get_logger("orleanspy.client", cluster=base.cluster_id)
        self.client_id = f"client-{os.getpid()}-{os.urandom(3).hex()}"
        self._ids = itertools.count(1)
        self._gateways = [
            _Gateway(i, gw, base.reconnect_delay)
            for i, gw in enumerate(dict.fromkeys(base.gateways))
        ]
        n = len(self._gateways)
        self._target = min(base.gateway_count or n, n)
        # Preference order for connecting when not all gateways are wanted: a random rotation,
        # so that many clients with the same list spread over the gateways.
        start = random.randrange(n)
        self._order = self._gateways[start:] + self._gateways[:start]
        # Routing tables, rebuilt on every change: the connection of each configured gateway
        # (None if not live), and the live connections in configuration order.
        self._slots: list[_ClientConnection | None] = [None] * n
        self._live: list[_ClientConnection] = []
        self._closed = False
        self._deadlines: _Deadlines | None = None
        self._wake: asyncio.Event | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._round: asyncio.Future[None] | None = None

    # -- state ----------------------------------------------------------------------------
    @property
    def connected_gateways(self) -> list[str]:
        """The addresses of the gateways this client has a live connection to."""
        return [c.gateway.address for c in self._live]

    @property
    def gateway(self) -> str | None:
        """The first connected gateway (configuration order), or None."""
        return self._live[0].gateway.address if self._live else None

    @property
    def _conn(self) -> _ClientConnection | None:
        return self._live[0] if self._live else None

    def _rebuild(self) -> None:
        slots = [g.conn for g in self._gateways]
        self._slots = slots
        self._live = [c for c in slots if c is not None]

    # -- connection -----------------------------------------------------------------------
    async def connect(self) -> None:
        """Connect to the gateways (all, or ``gateway_count``); waits for every attempt.

        Raises:
            SiloUnavailableError: no gateway accepted a connection. (Those that did not
                are retried in the background with back-off.)
        """
        if self._closed:
            raise RuntimeError("this ClusterClient was closed; create a new one")
        self._ensure_supervisor()
        if self.options.membership is not None:
            await self._refresh_gateways()
        await self._connect_round(wait_all=True)

    def _ensure_supervisor(self) -> None:
        if self._supervisor is None:
            self._wake = asyncio.Event()
            self._supervisor = asyncio.ensure_future(self._supervise())
            if self.options.membership is not None:
                self._refresher = asyncio.ensure_future(self._refresh_loop())

    async def _refresh_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.options.gateway_refresh_period)
            await self._refresh_gateways()

    async def _refresh_gateways(self) -> None:
        """Add the gateways of the active silos in the membership table to the list.

        Gateways are only added (one that dies is retried with back-off like any other); an
        addition changes the routing of every grain, as the list length changes.
        """
        from orleanspy.cluster.membership import SiloStatus, SqliteMembershipTable

        url = self.options.membership
        assert url is not None
        path = url[len("sqlite:"):]
        if not _is_file(path):  # do not create an empty table where none is
            self.log.warning("client_membership_unreadable", membership=url,
                             error="no such file")
            return
        table = SqliteMembershipTable(path, cluster_id=self.options.cluster_id)
        try:
            data = await table.read_all()
        except Exception as exc:  # a missing or locked file: keep the list, try again later
            self.log.warning("client_membership_unreadable", membership=url, error=repr(exc))
            return
        finally:
            await table.close()
        if self._closed:
            return
        known = {g.address for g in self._gateways}
        added = []
        for entry in data.entries():
            if entry.status is not SiloStatus.ACTIVE or not entry.gateway_port:
                continue
            address = f"{entry.silo.host}:{entry.gateway_port}"
            if address not in known:
                known.add(address)
                g = _Gateway(len(self._gateways), address, self.options.reconnect_delay)
                self._gateways.append(g)
                self._order.append(g)
                added.append(address)
        if added:
            self._target = min(self.options.gateway_count or len(self._gateways),
                               len(self._gateways))
            self._rebuild()
            self.log.info("client_gateways_discovered", gateways=added)
            if self._wake is not None:
                self._wake.set()

    async def _await_live(self) -> None:
        """Wait until some gateway is connected: try them all now, ignoring back-off."""
        if self._closed:
            raise RuntimeError("this ClusterClient was closed; create a new one")
        self._ensure_supervisor()
        rnd = self._round
        if rnd is None or rnd.done():
            rnd = self._round = asyncio.ensure_future(self._connect_round(wait_all=False))
            rnd.add_done_callback(_retrieve)
        await asyncio.shield(rnd)

    async def _connect_round(self, *, wait_all: bool) -> None:
        """Attempt the wanted number of gateways (the next candidate replacing each failure).

        Returns at the first live connection, or with ``wait_all`` once every attempt has
        ended; raises SiloUnavailableError if none is live then.
        """
        target = self._target
        candidates = deque(g for g in self._order if g.conn is None)
        tried: list[_Gateway] = []
        while True:
            live = len(self._live)
            if live and (not wait_all or live >= target):
                return
            attempts = [g.attempt for g in self._gateways if g.attempt is not None]
            while candidates and live + len(attempts) < target:
                g = candidates.popleft()
                if g.conn is None and g.attempt is None:
                    tried.append(g)
                    attempts.append(self._start_attempt(g))
                elif g.attempt is not None:
                    tried.append(g)
            if not attempts:
                break
            await asyncio.wait(attempts, return_when=asyncio.FIRST_COMPLETED)
        if self._live:
            return
        if self._closed:
            raise RuntimeError("this ClusterClient was closed; create a new one")
        errors = "; ".join(f"{g.address}: {g.error}" for g in tried if g.error) or "none tried"
        raise SiloUnavailableError(
            "cannot connect to any gateway: " + errors
            + " (is a silo running with that --gateway-port, cluster id and secret?)"
        )

    def _start_attempt(self, g: _Gateway) -> asyncio.Future[_ClientConnection]:
        attempt = asyncio.ensure_future(self._open(g))
        g.attempt = attempt
        attempt.add_done_callback(partial(self._attempt_done, g))
        return attempt

    def _attempt_done(self, g: _Gateway, attempt: asyncio.Future[_ClientConnection]) -> None:
        g.attempt = None
        if attempt.cancelled():
            return
        exc = attempt.exception()
        loop = attempt.get_loop()
        if exc is not None:
            g.error = str(exc) if isinstance(exc, SiloUnavailableError) else repr(exc)
            wait = g.delay * (0.75 + 0.5 * random.random())
            g.next_try = loop.time() + wait
            g.delay = min(g.delay * 2, self.options.reconnect_delay_max)
            self.log.debug("client_gateway_unreachable", gateway=g.address, error=g.error,
                           retry_in=round(wait, 3))
        else:
            conn = attempt.result()
            if self._closed:
                conn._silent = True
                conn.close()
                return
            was_lost = bool(g.error)
            g.conn = conn
            g.error = ""
            g.delay = self.options.reconnect_delay
            self._rebuild()
            if was_lost:
                self.log.info("client_gateway_connected", gateway=g.address, silo=g.silo)
            else:
                self.log.debug("client_gateway_connected", gateway=g.address, silo=g.silo)
        if self._wake is not None:
            self._wake.set()

    async def _open(self, g: _Gateway) -> _ClientConnection:
        opts = self.options
        loop = asyncio.get_running_loop()
        conn: _ClientConnection | None = None
        try:
            async with asyncio.timeout(opts.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _ClientConnection(self, g), g.host, g.port
                )
                conn._silent = True  # until the handshake succeeds
                conn.send(
                    msgpack.packb(
                        {
                            "v": PROTOCOL_VERSION,
                            "cluster": opts.cluster_id,
                            "secret": opts.secret,
                            "client": self.client_id,
                        }
                    )
                )
                reply = await conn.handshake
        except (OSError, TimeoutError, SiloUnavailableError) as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, SiloUnavailableError):
                raise
            raise SiloUnavailableError(repr(exc)) from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        if not isinstance(reply, dict) or not reply.get("ok"):
            conn.close()
            error = reply.get("error") if isinstance(reply, dict) else repr(reply)
            raise SiloUnavailableError(f"handshake refused: {error}")
        if conn.closed:
            raise SiloUnavailableError("the gateway closed the connection after the handshake")
        conn._silent = False
        silo = reply.get("silo")
        g.silo = str(silo) if silo is not None else None
        return conn

    async def _supervise(self) -> None:
        """Keep ``target`` gateways connected: reconnect lost ones after their back-off."""
        wake = self._wake
        assert wake is not None
        loop = asyncio.get_running_loop()
        while not self._closed:
            wake.clear()
            now = loop.time()
            need = self._target - len(self._live) - sum(
                g.attempt is not None for g in self._gateways
            )
            earliest: float | None = None
            if need > 0:
                for g in self._order:
                    if g.conn is not None or g.attempt is not None:
                        continue
                    if g.next_try <= now and need > 0:
                        self._start_attempt(g)
                        need -= 1
                    elif earliest is None or g.next_try < earliest:
                        earliest = g.next_try
            try:
                if need > 0 and earliest is not None:
                    async with asyncio.timeout(max(0.0, earliest - now)):
                        await wake.wait()
                else:
                    await wake.wait()
            except TimeoutError:
                pass

    def _connection_lost(self, conn: _ClientConnection) -> None:
        g = conn.gateway
        if g.conn is not conn:
            return  # already dropped, or a connection that never became the client's
        g.conn = None
        self._rebuild()
        if not self._closed:
            g.error = f"connection to gateway {g.address} was lost"
            g.next_try = conn._loop.time() + g.delay * (0.75 + 0.5 * random.random())
            g.delay = min(g.delay * 2, self.options.reconnect_delay_max)
            self.log.warning("client_gateway_lost", gateway=g.address, silo=g.silo,
                             pending=len(conn.pending), live=len(self._live))
            if self._wake is not None:
                self._wake.set()
        pending = conn.pending
        if pending:
            failed = list(pending.values())
            pending.clear()
            reason = "the client was closed" if self._closed else (
                "the call may or may not have run; it is not resent"
            )
            for fut in failed:
                if not fut.done():
                    fut.set_exception(SiloUnavailableError(
                        f"connection to gateway {g.address} was lost ({reason})"
                    ))

    def _trim_deadlines(self) -> None:
        if self._deadlines is not None:
            self._deadlines.trim()

    async def close(self) -> None:
        """Close every connection; calls still pending fail with SiloUnavailableError."""
        self._closed = True
        if self._deadlines is not None:
            self._deadlines.cancel()
        for task in (self._supervisor, self._refresher, self._round):
            if task is not None:
                task.cancel()
        for g in self._gateways:
            if g.attempt is not None:
                g.attempt.cancel()
        for conn in list(self._live):
            conn.close()
        self._rebuild()

    async def __aenter__(self) -> ClusterClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls ----------------------------------------------------------------------------
    @overload
    def get_grain(self, grain_class: type[G], key: Any) -> GrainRef[G]: ...
    @overload
    def get_grain(self, grain_class: str, key: Any) -> GrainRef[Any]: ...
    def get_grain(self, grain_class: type[G] | str, key: Any) -> Any:
        return make_reference(self, grain_class, key)

    def get_stream_provider(self, name: str) -> Any:
        """Publish to the silos' stream provider ``name``:
        ``client.get_stream_provider("events").get_stream("ns", key).on_next(item)``."""
        from orleanspy.streams.publisher import ClientStreamProvider

        return ClientStreamProvider(self, name)

    def _reference_factory(self, cls_name: str, grain_id: GrainId) -> Any:
        cls = resolve_name(cls_name) if cls_name else None
        if cls is not None and issubclass(cls, Grain):
            return make_reference(self, cls, grain_id.key, grain_id)
        return make_reference(self, grain_id.type_name, grain_id.key, grain_id)

    async def _route(self, grain_id: GrainId) -> _ClientConnection:
        """The live connection for this grain.

        The grain's own gateway is ``hash % len(gateways)`` of the configured list; while it
        is down (or not among the ``gateway_count`` connected) the grain goes to
        ``(hash // len(gateways)) % live`` of the live ones, so only the grains of a lost
        gateway move, spread evenly over the others.
        """
        while True:
            slots = self._slots
            h = grain_id._hash
            n = len(slots)
            conn = slots[h % n]
            if conn is None:
                live = self._live
                if not live:
                    await self._await_live()
                    continue
                conn = live[(h // n) % len(live)]
            if conn.closed:  # closed, its loss not reported yet
                self._connection_lost(conn)
                continue
            return conn

    async def call(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        timeout: float | None,
    ) -> Any:
        conn = self._slots[grain_id._hash % len(self._slots)]
        if conn is None or conn.closed:
            conn = await self._route(grain_id)
        if conn._write_paused:
            await conn.wait_writable()
            if conn.closed:
                raise SiloUnavailableError(
                    f"connection to gateway {conn.gateway.address} was lost"
                )
        corr = next(self._ids)
        t = timeout or self.options.response_timeout
        payload = self.codec.packb(
            [0, corr, grain_id.type_name, grain_id.key, method, list(args), kwargs, t, []]
        )
        fut = conn._loop.create_future()
        pending = conn.pending
        pending[corr] = fut
        conn.send(payload)
        if conn.closed:
            pending.pop(corr, None)
            raise SiloUnavailableError(f"connection to gateway {conn.gateway.address} was lost")
        deadlines = self._deadlines
        if deadlines is None:
            deadlines = self._deadlines = _Deadlines(conn._loop)
        deadlines.add(t, corr, grain_id, method, pending)
        try:
            return await fut
        finally:
            pending.pop(corr, None)

    async def send_one_way(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
    ) -> None:
        conn = await self._route(grain_id)
        await conn.wait_writable()
        if conn.closed:
            raise SiloUnavailableError(f"connection to gateway {conn.gateway.address} was lost")
        payload = self.codec.packb(
            [1, next(self._ids), grain_id.type_name, grain_id.key, method, list(args), kwargs,
             None, []]
        )
        conn.send(payload)


def _is_file(path: str) -> bool:
    return os.path.isfile(path)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: the awaiting callers get it
