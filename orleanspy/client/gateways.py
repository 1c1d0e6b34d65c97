"""GatewayPool: the client's connections to its gateways, supervised with back-off.

The pool keeps a connection to every known gateway (or to ``ClientOptions.gateway_count`` of
them) and publishes two routing tables for the call path: ``slots`` (the live connection of
each known gateway, or None) and ``live`` (the live connections in list order); both are
rebuilt, never mutated, on every change. A gateway that cannot be reached, or whose
connection is lost, is retried after a jittered exponential back-off (``Backoff``) by the
supervisor task; a caller that finds nothing live starts a connect round that ignores
back-off (``wait_live``). With ``ClientOptions.membership`` a refresh task adds the gateways
of active silos found in the membership table.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, final

import msgpack

from orleanspy._util.backoff import Backoff
from orleanspy._util.clock import Clock
from orleanspy._util.tasks import TaskSet
from orleanspy.client.connection import GatewayConnection
from orleanspy.client.discovery import GatewayDiscovery
from orleanspy.client.options import ClientOptions
from orleanspy.errors import SiloUnavailableError
from orleanspy.messaging.client_identity import client_handshake
from orleanspy.messaging.codec import Codec

__all__ = ["GatewayPool", "KnownGateway"]


class KnownGateway:
    """One gateway address and the client's state towards it."""

    __slots__ = ("address", "attempt", "conn", "error", "failures", "host", "index",
                 "next_try", "port", "silo")

    def __init__(self, index: int, address: str) -> None:
        self.index = index
        self.address = address
        host, _, port = address.rpartition(":")
        self.host = host
        self.port = int(port)
        self.conn: GatewayConnection | None = None
        self.attempt: asyncio.Task[GatewayConnection] | None = None
        self.failures = 0  # failed attempts or losses since the last success (back-off)
        self.next_try = 0.0  # clock time before which the supervisor does not reconnect
        self.error = ""
        self.silo: str | None = None


def _closed_error() -> RuntimeError:
    return RuntimeError("this ClusterClient was closed; create a new one")


@final
class GatewayPool:
    """Connections to the gateways of one client (see the module docstring).

    Args:
        options: the client's options (gateways, counts, back-off, discovery).
        client_key: the client's key: each handshake names the id derived from it
            (``messaging.client_identity``) and presents the key, which proves the id.
        codec: the client's codec (its connections decode responses with it).
        clock: time for back-off, connect timeouts and the refresh period.
        log: the client's logger.
    """

    def __init__(self, options: ClientOptions, client_key: bytes, codec: Codec, clock: Clock,
                 log: Any) -> None:
        self.options = options
        self._client_key = client_key
        self.codec = codec
        self.clock = clock
        self.log = log
        self.backoff = Backoff(initial=options.reconnect_delay,
                               maximum=options.reconnect_delay_max, jitter=0.25)
        self.gateways = [
            KnownGateway(i, gw) for i, gw in enumerate(dict.fromkeys(options.gateways))
        ]
        n = len(self.gateways)
        self.target = min(options.gateway_count or n, n)
        # Preference order for connecting when not all gateways are wanted: a random rotation,
        # so that many clients with the same list spread over the gateways.
        start = random.randrange(n)
        self.order = self.gateways[start:] + self.gateways[:start]
        #: Routing tables (see the module docstring).
        self.slots: list[GatewayConnection | None] = [None] * n
        self.live: list[GatewayConnection] = []
        self.closed = False
        self._discovery = (
            GatewayDiscovery(options.membership, options.cluster_id, log)
            if options.membership is not None else None
        )
        self._tasks = TaskSet(on_error=self._task_failed)
        self._wake: asyncio.Event | None = None
        self._round: asyncio.Task[None] | None = None
        self._live_waiters: list[tuple[Callable[[list[str]], bool], asyncio.Future[None]]] = []

    def _task_failed(self, task: asyncio.Task[Any], exc: BaseException) -> None:
        if task is not self._round and not any(g.attempt is task for g in self.gateways):
            self.log.error("client_task_failed", task=task.get_name(), error=repr(exc))

    def _rebuild(self) -> None:
        slots = [g.conn for g in self.gateways]
        self.slots = slots
        self.live = [c for c in slots if c is not None]
        if self._live_waiters:
            self._wake_live_waiters()

    def _wake_live_waiters(self) -> None:
        addresses = [c.address for c in self.live]
        keep = []
        for predicate, fut in self._live_waiters:
            if fut.done():
                continue
            if predicate(addresses):
                fut.set_result(None)
            else:
                keep.append((predicate, fut))
        self._live_waiters = keep

    async def wait_live_set(self, predicate: Callable[[list[str]], bool], timeout: float) -> None:
        """Wait until ``predicate(addresses of the live gateways)`` holds, checked now and on
        every change of the live set; TimeoutError after ``timeout`` seconds of the clock."""
        if predicate([c.address for c in self.live]):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._live_waiters.append((predicate, fut))
        try:
            async with self.clock.timeout(timeout):
                await fut
        finally:
            fut.cancel()

    # -- starting and stopping --------------------------------------------------------------
    async def connect(self) -> None:
        """Read the membership table (if any), then attempt the wanted gateways and wait
        for every attempt.

        Raises:
            SiloUnavailableError: no gateway accepted a connection.
        """
        if self.closed:
            raise _closed_error()
        self._ensure_started()
        if self._discovery is not None:
            await self.refresh()
        await self._connect_round(wait_all=True)

    def _ensure_started(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
            self._tasks.spawn(self._supervise(), name="client-gateway-supervisor")
            if self._discovery is not None:
                self._tasks.spawn(self._refresh_loop(), name="client-gateway-refresh")

    async def close(self) -> None:
        """Stop the supervisor and close every connection (their pending calls fail)."""
        self.closed = True
        await self._tasks.close()
        for conn in list(self.live):
            conn.close()
        self._rebuild()

    # -- discovery --------------------------------------------------------------------------
    async def _refresh_loop(self) -> None:
        while not self.closed:
            await self.clock.sleep(self.options.gateway_refresh_period)
            await self.refresh()

    async def refresh(self) -> None:
        """Add the gateways of the active silos in the membership table to the list.

        Gateways are only added (one that dies is retried with back-off like any other); an
        addition changes the routing of every grain, as the list length changes.
        """
        assert self._discovery is not None
        found = await self._discovery.gateways()
        if found is None or self.closed:
            return
        known = {g.address for g in self.gateways}
        added = []
        for address in found:
            if address not in known:
                known.add(address)
                g = KnownGateway(len(self.gateways), address)
                self.gateways.append(g)
                self.order.append(g)
                added.append(address)
        if added:
            self.target = min(self.options.gateway_count or len(self.gateways),
                              len(self.gateways))
            self._rebuild()
            self.log.info("client_gateways_discovered", gateways=added)
            if self._wake is not None:
                self._wake.set()

    # -- connecting -------------------------------------------------------------------------
    async def wait_live(self) -> None:
        """Wait until some gateway is connected: try them all now, ignoring back-off.

        Raises:
            SiloUnavailableError: no gateway could be reached.
        """
        if self.closed:
            raise _closed_error()
        self._ensure_started()
        rnd = self._round
        if rnd is None or rnd.done():
            rnd = self._round = self._tasks.spawn(self._connect_round(wait_all=False))
        await asyncio.shield(rnd)

    async def _connect_round(self, *, wait_all: bool) -> None:
        """Attempt the wanted number of gateways (the next candidate replacing each failure).

        Returns at the first live connection, or with ``wait_all`` once every attempt has
        ended; raises SiloUnavailableError if none is live then.
        """
        candidates = deque(g for g in self.order if g.conn is None)
        tried: list[KnownGateway] = []
        while True:
            live = len(self.live)
            if live and (not wait_all or live >= self.target):
                return
            attempts = [g.attempt for g in self.gateways if g.attempt is not None]
            while candidates and live + len(attempts) < self.target:
                g = candidates.popleft()
                if g.conn is None and g.attempt is None:
                    tried.append(g)
                    attempts.append(self._start_attempt(g))
                elif g.attempt is not None:
                    tried.append(g)
            if not attempts:
                break
            await asyncio.wait(attempts, return_when=asyncio.FIRST_COMPLETED)
        if self.live:
            return
        if self.closed:
            raise _closed_error()
        errors = "; ".join(f"{g.address}: {g.error}" for g in tried if g.error) or "none tried"
        raise SiloUnavailableError(
            "cannot connect to any gateway: " + errors
            + " (is a silo running with that --gateway-port, cluster id and secret?)"
        )

    def _start_attempt(self, g: KnownGateway) -> asyncio.Task[GatewayConnection]:
        attempt = self._tasks.spawn(self._open(g))
        g.attempt = attempt
        attempt.add_done_callback(partial(self._attempt_done, g))
        return attempt

    def _retry_later(self, g: KnownGateway) -> float:
        g.failures += 1
        wait = self.backoff.delay(g.failures)
        g.next_try = self.clock.monotonic() + wait
        return wait

    def _attempt_done(self, g: KnownGateway, attempt: asyncio.Task[GatewayConnection]) -> None:
        g.attempt = None
        if attempt.cancelled():
            return
        exc = attempt.exception()
        conn = None if exc is not None else attempt.result()
        if conn is not None and conn.closed and not self.closed:
            exc = SiloUnavailableError(f"gateway {g.address} closed the connection at once")
        if exc is not None:
            g.error = str(exc) if isinstance(exc, SiloUnavailableError) else repr(exc)
            wait = self._retry_later(g)
            self.log.debug("client_gateway_unreachable", gateway=g.address, error=g.error,
                           retry_in=round(wait, 3))
        else:
            assert conn is not None
            if self.closed:
                conn.close()  # still silent: never adopted
                return
            conn.silent = False
            was_lost = bool(g.error)
            g.conn = conn
            g.error = ""
            g.failures = 0
            self._rebuild()
            if was_lost:
                self.log.info("client_gateway_connected", gateway=g.address, silo=g.silo)
            else:
                self.log.debug("client_gateway_connected", gateway=g.address, silo=g.silo)
        if self._wake is not None:
            self._wake.set()

    async def _open(self, g: KnownGateway) -> GatewayConnection:
        opts = self.options
        loop = asyncio.get_running_loop()
        conn: GatewayConnection | None = None
        try:
            async with self.clock.timeout(opts.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: GatewayConnection(self, g.index, g.address, self.codec,
                                              opts.max_frame_size, self.log),
                    g.host, g.port,
                )
                conn.send(msgpack.packb(
                    client_handshake(opts.cluster_id, opts.secret, self._client_key)
                ))
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
        silo = reply.get("silo")
        g.silo = str(silo) if silo is not None else None
        return conn

    async def _supervise(self) -> None:
        """Keep ``target`` gateways connected: reconnect lost ones after their back-off."""
        wake = self._wake
        assert wake is not None
        clock = self.clock
        while not self.closed:
            wake.clear()
            now = clock.monotonic()
            need = self.target - len(self.live) - sum(
                g.attempt is not None for g in self.gateways
            )
            earliest: float | None = None
            if need > 0:
                for g in self.order:
                    if g.conn is not None or g.attempt is not None:
                        continue
                    if g.next_try <= now and need > 0:
                        self._start_attempt(g)
                        need -= 1
                    elif earliest is None or g.next_try < earliest:
                        earliest = g.next_try
            try:
                async with clock.timeout_at(earliest if need > 0 else None):
                    await wake.wait()
            except TimeoutError:
                pass

    # -- ConnectionOwner ----------------------------------------------------------------------
    def going_away(self, conn: GatewayConnection) -> None:
        """``conn``'s silo is stopping: route new calls to the other gateways now; the calls
        pending on it are answered there before the silo closes it."""
        g = self.gateways[conn.index]
        if g.conn is not conn:
            return
        g.conn = None
        self._rebuild()
        if not self.closed:
            g.error = f"gateway {g.address} is stopping"
            self._retry_later(g)
            self.log.info("client_gateway_going_away", gateway=g.address, silo=g.silo,
                          pending=len(conn.pending), live=len(self.live))
            if self._wake is not None:
                self._wake.set()

    def connection_lost(self, conn: GatewayConnection) -> None:
        """Stop routing to ``conn``, schedule its reconnection and fail its pending calls."""
        g = self.gateways[conn.index]
        if g.conn is not conn:
            # already dropped (or going away): only calls still pending on it fail
            self._fail_pending(conn, g)
            return
        g.conn = None
        self._rebuild()
        if not self.closed:
            g.error = f"connection to gateway {g.address} was lost"
            self._retry_later(g)
            self.log.warning("client_gateway_lost", gateway=g.address, silo=g.silo,
                             pending=len(conn.pending), live=len(self.live))
            if self._wake is not None:
                self._wake.set()
        self._fail_pending(conn, g)

    def _fail_pending(self, conn: GatewayConnection, g: KnownGateway) -> None:
        pending = conn.pending
        if pending:
            failed = list(pending.values())
            pending.clear()
            reason = "the client was closed" if self.closed else (
                "the call may or may not have run; it is not resent"
            )
            for fut in failed:
                if not fut.done():
                    fut.set_exception(SiloUnavailableError(
                        f"connection to gateway {g.address} was lost ({reason})"
                    ))
