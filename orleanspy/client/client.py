"""ClusterClient: calls grains from another process through the silos' gateways.

Requests are framed as in ``messaging/frames.py``; responses resolve futures by correlation
id (``client/connection.py``). The client's ``GatewayPool`` keeps a connection to every
known gateway (or to ``ClientOptions.gateway_count`` of them); each call is routed by its
grain id's hash, so the calls of one grain go through one gateway (in order) while different
grains spread over all of them. When a connection drops, the calls pending on it fail at
once with ``SiloUnavailableError`` (never resent: the client cannot know whether they ran),
new calls go to the remaining gateways, and the pool reconnects with back-off. Response
timeouts are kept by ``Deadlines`` on the client's clock.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar, final, overload

from orleanspy import tracing
from orleanspy._util.clock import Clock, SystemClock
from orleanspy.client.connection import GatewayConnection
from orleanspy.client.gateways import GatewayPool
from orleanspy.client.observers import ObserverReceiver
from orleanspy.client.options import ClientOptions
from orleanspy.client.stream_receiver import StreamReceiver
from orleanspy.errors import SiloUnavailableError
from orleanspy.grains.grain import Grain
from orleanspy.grains.grain_interface import GrainInterface, is_grain_interface
from orleanspy.grains.interface import class_info
from orleanspy.grains.proxy import References, make_reference
from orleanspy.grains.reference import GrainRef
from orleanspy.grains.request_context import get_context as _get_context
from orleanspy.ids import GrainId
from orleanspy.logging import get_logger
from orleanspy.messaging.bodies import encode_body
from orleanspy.messaging.client_identity import CLIENT_KEY_SIZE, client_id_of
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.deadlines import Deadlines
from orleanspy.messaging.frames import Cancel, Request
from orleanspy.messaging.types import TypePolicy
from orleanspy.runtime.tracing_filters import call_span, traced
from orleanspy.streams.publisher import ClientStreamProvider

__all__ = ["ClusterClient"]

G = TypeVar("G")
Iface = TypeVar("Iface", bound=GrainInterface)


@final
class ClusterClient:
    """A client of a cluster: ``await client.connect()``, then ``client.get_grain(...)``.

    With several gateways the client connects to all of them (or to
    ``ClientOptions.gateway_count``), routes each grain's calls through one live gateway
    chosen by the grain id's hash, and fails over when a gateway's connection is lost: the
    calls pending on it raise ``SiloUnavailableError`` (not resent), later calls go through
    the other gateways, and the lost gateway is reconnected with exponential back-off.

    Args:
        options: the client's settings; ``gateways``, ``cluster_id``, ``secret`` and
            ``response_timeout`` override the matching fields.
        clock: time for deadlines, back-off and discovery (default: the real clock).

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
        clock: Clock | None = None,
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
            base = replace(base, **changes)
        self.options = base
        self.clock = clock or SystemClock()
        self.codec = Codec(self._reference_factory, policy=TypePolicy())
        self._allowed: set[type] = set()
        self._references = References(self, self._allow)
        self.log = get_logger("orleanspy.client", cluster=base.cluster_id)
        # The client's identity: a random key it never shows but to its gateways, and the
        # id derived from it (``client_id_of``), which any gateway checks against the key.
        key = os.urandom(CLIENT_KEY_SIZE)
        self.client_id = client_id_of(key)
        self._ids = itertools.count(1)
        self._deadlines = Deadlines(self.clock, "client")
        self._pool = GatewayPool(base, key, self.codec, self.clock, self.log)
        self._streams: StreamReceiver | None = None
        self._observers: ObserverReceiver | None = None
        #: spans of this client's calls when the process has a tracer provider
        self._tracer = tracing.tracer()
        if self._tracer is None:  # references call ``_call`` itself: a Python call less
            self.call = self._call  # type: ignore[method-assign]

    # -- state ----------------------------------------------------------------------------
    @property
    def connected_gateways(self) -> list[str]:
        """The addresses of the gateways this client has a live connection to."""
        return [c.address for c in self._pool.live]

    async def wait_gateways(
        self, predicate: Callable[[list[str]], bool], timeout: float = 30.0
    ) -> list[str]:
        """Wait until ``predicate(connected_gateways)`` holds, re-checked whenever a gateway
        connects or is lost; returns the connected gateways.

        Raises:
            TimeoutError: it did not hold within ``timeout`` seconds.
        """
        await self._pool.wait_live_set(predicate, timeout)
        return self.connected_gateways

    @property
    def gateway(self) -> str | None:
        """The first connected gateway (list order), or None."""
        live = self._pool.live
        return live[0].address if live else None

    @property
    def _conn(self) -> GatewayConnection | None:
        """The first live connection (list order), for tests that act on it."""
        live = self._pool.live
        return live[0] if live else None

    # -- connection -----------------------------------------------------------------------
    async def connect(self) -> None:
        """Connect to the gateways (all, or ``gateway_count``); waits for every attempt.

        Raises:
            SiloUnavailableError: no gateway accepted a connection. (Those that did not
                are retried in the background with back-off.)
        """
        await self._pool.connect()

    async def close(self) -> None:
        """Close every connection; calls still pending fail with SiloUnavailableError.
        Stream subscriptions stay on the silos for their provider's ``client_timeout``
        (unsubscribe first to end them at once)."""
        if self._streams is not None:
            await self._streams.close()
        if self._observers is not None:
            await self._observers.close()
        self._deadlines.cancel()
        await self._pool.close()

    async def __aenter__(self) -> ClusterClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls ----------------------------------------------------------------------------
    @overload
    def get_grain(self, grain_class: type[G], key: Any) -> GrainRef[G]: ...
    @overload
    def get_grain(self, grain_class: Callable[[], Iface], key: Any) -> GrainRef[Iface]: ...
    @overload
    def get_grain(self, grain_class: str, key: Any) -> GrainRef[Any]: ...
    def get_grain(self, grain_class: Any, key: Any) -> Any:
        return self._references.get(grain_class, key)

    def _allow(self, cls: type) -> None:
        """Results of ``cls``'s methods may be rebuilt as the types its module and its
        annotations name (the codec's allow-list)."""
        if cls not in self._allowed:
            self._allowed.add(cls)
            info = class_info(cls)
            self.codec.policy.allow_grain_class(
                cls, info.methods, [spec.factory for spec in info.states.values()
                                    if isinstance(spec.factory, type)]
            )

    def get_stream_provider(self, name: str) -> ClientStreamProvider:
        """The silos' stream provider ``name``, to publish
        (``client.get_stream_provider("events").get_stream("ns", key).on_next(item)``) and
        to subscribe (``.subscribe(handler)``)."""
        return ClientStreamProvider(self, name)

    def create_observer(self, obj: Any, interface: type | None = None) -> Any:
        """A reference grains can call back (pass it to them as an argument): each method
        called on it runs ``obj``'s method of that name here, in order, one at a time
        (one-way: the grain does not wait for it). ``interface``: the grain interface (or
        class) whose methods the reference has; without it any name is a method. The calls
        reach this client through any of its gateways (``grains.observer``)."""
        if self._observers is None:
            self._observers = ObserverReceiver(self)
        return self._observers.create(obj, interface)

    async def delete_observer(self, reference: Any) -> None:
        """Stop running calls to an observer; later calls to it are dropped."""
        if self._observers is not None:
            await self._observers.delete(reference)

    def _stream_receiver(self) -> StreamReceiver:
        if self._streams is None:
            self._streams = StreamReceiver(self)
        return self._streams

    def _reference_factory(self, cls_name: str, grain_id: GrainId) -> Any:
        cls = self.codec.policy.resolve(cls_name) if cls_name else None
        if cls is not None and (issubclass(cls, Grain) or is_grain_interface(cls)):
            return make_reference(self, cls, grain_id.key, grain_id)
        return make_reference(self, grain_id.type_name, grain_id.key, grain_id)

    async def _route(self, grain_id: GrainId) -> GatewayConnection:
        """The live connection for this grain.

        The grain's own gateway is ``hash % len(gateways)`` of the known list; while it is
        down (or not among the ``gateway_count`` connected) the grain goes to
        ``(hash // len(gateways)) % live`` of the live ones, so only the grains of a lost
        gateway move, spread evenly over the others.
        """
        pool = self._pool
        while True:
            slots = pool.slots
            h = grain_id._hash
            n = len(slots)
            conn = slots[h % n]
            if conn is None:
                live = pool.live
                if not live:
                    await pool.wait_live()
                    continue
                conn = live[(h // n) % len(live)]
            if conn.closed:  # closed, its loss not reported yet
                pool.connection_lost(conn)
                continue
            return conn

    def call(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        timeout: float | None,
    ) -> Coroutine[Any, Any, Any]:
        """A call to a grain (await it). A plain function returning the coroutine: one
        coroutine per call, or, with tracing on, the call in a CLIENT span whose context
        travels in the request context."""
        if self._tracer is not None:
            span = call_span(self._tracer, "client", grain_id, method, _get_context())
            return traced(self._tracer, span,
                          self._call(grain_id, method, args, kwargs, timeout))
        return self._call(grain_id, method, args, kwargs, timeout)

    async def _call(
        self,
        grain_id: GrainId,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        timeout: float | None,
    ) -> Any:
        slots = self._pool.slots
        conn = slots[grain_id._hash % len(slots)]
        if conn is None or conn.closed:
            conn = await self._route(grain_id)
        if conn.write_paused:
            await conn.wait_writable()
            if conn.closed:
                raise SiloUnavailableError(f"connection to gateway {conn.address} was lost")
        corr = next(self._ids)
        t = timeout or self.options.response_timeout
        codec = self.codec
        payload = Request.pack(codec, False, corr, grain_id.type_name, grain_id.key, method, t,
                               [], 0, True, encode_body(codec, args, kwargs),
                               _get_context())
        fut = conn.loop.create_future()
        pending = conn.pending
        pending[corr] = fut
        conn.send(payload)
        if conn.closed:
            pending.pop(corr, None)
            raise SiloUnavailableError(f"connection to gateway {conn.address} was lost")
        self._deadlines.add(t, corr, grain_id, method, pending)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.cancelled() and not conn.closed:  # not answered: the silo drops it
                conn.send(Cancel.pack(corr))
            raise
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
            raise SiloUnavailableError(f"connection to gateway {conn.address} was lost")
        codec = self.codec
        payload = Request.pack(codec, True, next(self._ids), grain_id.type_name, grain_id.key,
                               method, None, [], 0, True, encode_body(codec, args, kwargs),
                               _get_context())
        conn.send(payload)
