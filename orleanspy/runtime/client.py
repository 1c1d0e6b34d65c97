"""ClusterClient: calls grains from another process through a silo's gateway.

Requests are framed as in ``messaging/wire.py``; responses resolve futures by correlation
id. When the connection drops, every pending call fails at once with
``SiloUnavailableError``, and the next call reconnects, trying each gateway in turn.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections import deque
from typing import Any, TypeVar, overload

import msgpack

from orleanspy.errors import (
    GrainCallTimeoutError,
    ProtocolError,
    SerializationError,
    SiloUnavailableError,
)
from orleanspy.grains.grain import Grain
from orleanspy.grains.reference import make_reference
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
    keeps a FIFO of (deadline, id, grain, method); heads whose call already finished are
    dropped as responses arrive, and one timer is armed for the earliest live head.
    """

    __slots__ = ("_handle", "_loop", "_pending", "_queues")

    def __init__(self, loop: asyncio.AbstractEventLoop, pending: dict[int, Any]) -> None:
        self._loop = loop
        self._pending = pending
        self._queues: dict[float, deque[tuple[float, int, GrainId, str]]] = {}
        self._handle: asyncio.TimerHandle | None = None

    def add(self, timeout: float, corr: int, grain_id: GrainId, method: str) -> None:
        q = self._queues.get(timeout)
        if q is None:
            q = self._queues[timeout] = deque()
        deadline = self._loop.time() + timeout
        q.append((deadline, corr, grain_id, method))
        handle = self._handle
        if handle is None:
            self._handle = self._loop.call_at(deadline, self._sweep)
        elif deadline < handle.when():
            handle.cancel()
            self._handle = self._loop.call_at(deadline, self._sweep)

    def trim(self) -> None:
        pending = self._pending
        for q in self._queues.values():
            while q and q[0][1] not in pending:
                q.popleft()

    def _sweep(self) -> None:
        self._handle = None
        now = self._loop.time()
        pending = self._pending
        earliest = None
        for timeout, q in self._queues.items():
            while q and (q[0][0] <= now or q[0][1] not in pending):
                _, corr, grain_id, method = q.popleft()
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
    def __init__(self, client: ClusterClient) -> None:
        super().__init__(client.options.max_frame_size, client.log)
        self.client = client
        self.codec = client.codec
        self.pending = client._pending
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

    def on_close(self, exc: Exception | None, by_us: bool) -> None:
        if not self.handshake.done():
            self.handshake.set_exception(
                SiloUnavailableError(f"gateway {self.peer} closed the connection")
            )
            self.handshake.exception()  # retrieved: _open reports it
        if not self._silent:
            self.client._connection_lost(self)


class ClusterClient:
    """A client of a cluster: ``await client.connect()``, then ``client.get_grain(...)``.

    Example::

        async with ClusterClient(gateways=["127.0.0.1:30000"]) as client:
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
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._conn: _ClientConnection | None = None
        self._connecting: asyncio.Future[_ClientConnection] | None = None
        self._next_gateway = 0
        self._closed = False
        self._deadlines: _Deadlines | None = None
        self.gateway: str | None = None

    # -- connection -----------------------------------------------------------------------
    async def connect(self) -> None:
        await self._connection()

    async def _connection(self) -> _ClientConnection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._closed:
            raise RuntimeError("this ClusterClient was closed; create a new one")
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
            self._connecting.add_done_callback(self._clear_connecting)
        return await asyncio.shield(self._connecting)

    def _clear_connecting(self, fut: asyncio.Future[Any]) -> None:
        self._connecting = None
        if not fut.cancelled():
            fut.exception()  # retrieved: the awaiting callers get it

    async def _open(self) -> _ClientConnection:
        opts = self.options
        errors: list[str] = []
        loop = asyncio.get_running_loop()
        for i in range(len(opts.gateways)):
            gw = opts.gateways[(self._next_gateway + i) % len(opts.gateways)]
            host, _, port = gw.rpartition(":")
            conn = None
            try:
                async with asyncio.timeout(opts.connect_timeout):
                    _, conn = await loop.create_connection(
                        lambda: _ClientConnection(self), host, int(port)
                    )
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
                    conn._silent = True
                    conn.close()
                errors.append(f"{gw}: {exc!r}")
                continue
            if not isinstance(reply, dict) or not reply.get("ok"):
                conn._silent = True
                conn.close()
                error = reply.get("error") if isinstance(reply, dict) else repr(reply)
                errors.append(f"{gw}: handshake refused: {error}")
                continue
            self._next_gateway = (self._next_gateway + i + 1) % len(opts.gateways)
            self._conn = conn
            self.gateway = gw
            self.log.debug("client_connected", gateway=gw, silo=reply.get("silo"))
            return conn
        raise SiloUnavailableError(
            "cannot connect to any gateway: " + "; ".join(errors)
            + " (is a silo running with that --gateway-port, cluster id and secret?)"
        )

    def _connection_lost(self, conn: _ClientConnection) -> None:
        if self._conn is not conn:
            return  # not the connection the pending calls went out on
        self._conn = None
        pending = self._pending
        if pending:
            failed = list(pending.items())
            pending.clear()
            for _, fut in failed:
                if not fut.done():
                    fut.set_exception(
                        SiloUnavailableError(f"connection to gateway {conn.peer} was lost")
                    )

    def _trim_deadlines(self) -> None:
        if self._deadlines is not None:
            self._deadlines.trim()

    async def close(self) -> None:
        self._closed = True
        if self._deadlines is not None:
            self._deadlines.cancel()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def __aenter__(self) -> ClusterClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls ----------------------------------------------------------------------------
    @overload
    def get_grain(self, grain_class: type[G], key: Any) -> G: ...
    @overload
    def get_grain(self, grain_class: str, key: Any) -> Any: ...
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

    async def call(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        timeout: float | None,
    ) -> Any:
        conn = self._conn
        if conn is None or conn.closed:
            conn = await self._connection()
        if conn._write_paused:
            await conn.wait_writable()
            if conn.closed:
                raise SiloUnavailableError(f"connection to gateway {conn.peer} was lost")
        corr = next(self._ids)
        t = timeout or self.options.response_timeout
        payload = self.codec.packb(
            [0, corr, grain_id.type_name, grain_id.key, method, list(args), kwargs, t, []]
        )
        fut = conn._loop.create_future()
        pending = self._pending
        pending[corr] = fut
        conn.send(payload)
        if conn.closed:
            pending.pop(corr, None)
            raise SiloUnavailableError(f"connection to gateway {conn.peer} was lost")
        deadlines = self._deadlines
        if deadlines is None:
            deadlines = self._deadlines = _Deadlines(conn._loop, pending)
        deadlines.add(t, corr, grain_id, method)
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
        conn = self._conn
        if conn is None or conn.closed:
            conn = await self._connection()
        await conn.wait_writable()
        if conn.closed:
            raise SiloUnavailableError(f"connection to gateway {conn.peer} was lost")
        payload = self.codec.packb(
            [1, next(self._ids), grain_id.type_name, grain_id.key, method, list(args), kwargs,
             None, []]
        )
        conn.send(payload)
