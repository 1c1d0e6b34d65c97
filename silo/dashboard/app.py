"""The silo's operations endpoints on aiohttp: health, readiness, Prometheus metrics and the
JSON view of the silo's figures.

- ``GET /healthz``: 200 while the process serves HTTP (liveness).
- ``GET /readyz``: 200 once the silo is active, its gateway listens (if it has one) and its
  stream providers started; 503 with the reasons otherwise.
- ``GET /metrics``: Prometheus text (``silo/dashboard/metrics.py`` lists the names).
- ``GET /api/silo``: the silo's statistics as JSON.
- ``GET /api/cluster``: every silo's figures as JSON (the dashboard page reads it).
- ``GET /api/grains/TYPE/KEY``: the grain page as JSON (``orleanspy.runtime.grain_report``;
  ``?key_type=int|str|uuid`` forces how KEY is read): 404 for a type no silo hosts. Read-only:
  it never activates the grain.

Trust model: the server listens on 127.0.0.1 unless told otherwise, and beyond loopback only
when the silo has a ``secret``. With a secret, ``/metrics`` and ``/api/*`` answer only
requests that present it (``Authorization: Bearer SECRET``): the figures name grain types,
streams and queues, which the gateway would not show a stranger either. ``/healthz`` and
``/readyz`` say only "ok" or why not, and stay open for orchestrators' probes. Anything else
is a 404 or 405; a malformed request gets aiohttp's 400 and closes only its connection; a
credential that does not decode is a 401. The port is bounded (``silo.dashboard.bounds``):
a connection cap, a head deadline and an idle timeout.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import json
import time
from pathlib import Path
from typing import Any, Final

from aiohttp import web

from orleanspy import ConfigurationError
from orleanspy.errors import MessageRejectedError
from orleanspy.ids import GrainId
from orleanspy.logging import get_logger
from orleanspy.runtime.grain_report import activation_report, grain_page
from orleanspy.runtime.reports import plain, reminders_report, status_report, streams_report
from orleanspy.runtime.silo import Silo
from silo.commands.common import parse_key
from silo.dashboard.bounds import CappedConnections, RateLimitedLog, ops_connection_cap
from silo.dashboard.health import FirstSeen, silo_health, unowned_queues
from silo.dashboard.metrics import metrics_text, registry_for
from silo.dashboard.view import ClusterView, Membership, SiloAnswers

__all__ = ["OpsServer", "install_ops_server", "ops_server_of"]

VIEW_REUSE: Final = 0.5  # seconds a gathered cluster view answers further requests
_SILO: Final = web.AppKey("silo", Silo)
_SERVER: Final = web.AppKey("server", object)
_PROMETHEUS: Final = "text/plain; version=0.0.4; charset=utf-8"
_PAGE: Final = (Path(__file__).parent / "static" / "index.html").read_bytes()
# The page loads nothing from elsewhere: its script and style are inline, its data same-origin.
_CSP: Final = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
               "connect-src 'self'; img-src 'self' data:")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OpsServer:
    """One silo's HTTP server: a lifecycle participant that listens before the silo's
    components start and closes after they stop."""

    def __init__(self, silo: Silo, host: str = "127.0.0.1", port: int = 0) -> None:
        if not _loopback(host) and silo.options.secret is None:
            raise ConfigurationError(
                f"dashboard host {host!r}: serving the silo's figures beyond loopback needs "
                "the silo's secret set (--secret): requests then present it as "
                "'Authorization: Bearer SECRET'")
        self.silo = silo
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._listener: asyncio.Server | None = None
        self.connections: CappedConnections | None = None
        self._health: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
        self._registry = registry_for(silo, lambda: self._health)
        self.view = ClusterView()
        self._metrics_first_seen = FirstSeen()
        self._view_cache: tuple[float, asyncio.Future[str]] | None = None
        self.log = get_logger(__name__, silo=silo.name)
        self.refusals = RateLimitedLog(self.log)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1024)  # GET only: no bodies worth reading
        app[_SILO] = self.silo
        app[_SERVER] = self
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/api/silo", self._api_silo)
        app.router.add_get("/api/cluster", self._api_cluster)
        app.router.add_get("/api/grains/{type}/{key}", self._api_grain)
        app.router.add_get("/", self._page)
        return app

    async def start(self) -> None:
        """Listen with the bounds of ``silo.dashboard.bounds``: a connection cap under the
        fd limit, a head deadline and an idle timeout per connection."""
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        assert runner.server is not None
        loop = asyncio.get_running_loop()
        self.connections = CappedConnections(runner.server, self.refusals,
                                             cap=ops_connection_cap(), loop=loop)
        try:
            listener = await loop.create_server(self.connections, self.host, self.port,
                                                reuse_address=True, backlog=128)
        except OSError as exc:
            await runner.cleanup()
            why = ("is in use" if exc.errno == errno.EADDRINUSE
                   else f"cannot be opened ({exc.strerror})")
            raise ConfigurationError(
                f"dashboard port {self.host}:{self.port} {why}: pick another with "
                "--dashboard-port (0: any free port), or stop the process that holds it"
            ) from None
        self._runner = runner
        self._listener = listener
        self.port = int(listener.sockets[0].getsockname()[1])
        self.log.info("dashboard_started", address=self.address,
                      max_connections=self.connections.cap)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- handlers -------------------------------------------------------------------------
    def _authorized(self, request: web.Request) -> bool:
        secret = self.silo.options.secret
        if secret is None:
            return True
        given = request.headers.get("Authorization", "")
        try:  # a header that is not UTF-8 arrives with surrogates: not a credential
            presented = given.encode()
        except UnicodeEncodeError:
            return False
        return hmac.compare_digest(presented, f"Bearer {secret}".encode())

    def _refuse(self) -> web.Response:
        return web.json_response(
            {"error": "this silo has a secret: present it as 'Authorization: Bearer SECRET'"},
            status=401, headers={"WWW-Authenticate": "Bearer"})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        silo = self.silo
        reasons = []
        if not silo.active:
            reasons.append("the silo is not active")
        if silo.gateway is not None and not silo.gateway.address:
            reasons.append("the gateway does not listen")
        for name, provider in silo.stream_providers.items():
            if getattr(provider, "manager", None) is None:
                reasons.append(f"stream provider {name} has not started")
        if reasons:
            return web.json_response({"ready": False, "reasons": reasons}, status=503)
        return web.json_response({"ready": True})

    def _starting(self) -> web.Response | None:
        """503 while the silo starts (the port is bound early; the figures come once its
        components run), else None."""
        if self.silo.active or self.silo.stopping:
            return None
        return web.json_response(
            {"error": f"silo {self.silo.name} is starting; its figures follow once it is "
             "active"}, status=503, headers={"Retry-After": "1"})

    async def _metrics(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._refuse()
        if (starting := self._starting()) is not None:
            return starting
        if self.silo.cluster is not None:
            self._health = await self.table_health()
        body = metrics_text(self._registry)  # reads loop-owned state: on the loop
        return web.Response(body=body, headers={"Content-Type": _PROMETHEUS})

    async def _api_silo(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._refuse()
        if (starting := self._starting()) is not None:
            return starting
        stats = self.silo.statistics()
        return web.Response(text=json.dumps(plain(stats)), content_type="application/json")

    async def _api_grain(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._refuse()
        if (starting := self._starting()) is not None:
            return starting
        key_type = request.query.get("key_type", "auto")
        text = request.match_info["key"]
        if key_type not in ("auto", "int", "str", "uuid"):
            return web.json_response(
                {"error": f"key_type {key_type!r}: use auto, int, str or uuid"}, status=400)
        try:
            key = parse_key(text, key_type)
        except ValueError as exc:
            return web.json_response(
                {"error": f"key {text!r} is not a valid {key_type} key: {exc}"}, status=400)
        try:
            page = await self.grain_page(request.match_info["type"], key)
        except MessageRejectedError as exc:
            return web.json_response({"error": str(exc)}, status=404)
        return web.Response(text=json.dumps(page), content_type="application/json")

    async def grain_page(self, type_name: str, key: Any) -> dict[str, Any]:
        """The grain page of ``type_name``/``key``, asked of the cluster through this silo,
        or read here for a lone silo; never activates the grain."""
        silo = self.silo
        if silo.operations is not None:
            page: dict[str, Any] = await silo.operations.grain(type_name, key)
            return page
        grain_id = GrainId(type_name, key)
        info = silo.catalog.info_for(grain_id)
        local = activation_report(silo, grain_id)
        return await grain_page(silo, grain_id, info, local,
                                [{"silo": silo.name, **streams_report(silo)}])

    async def _page(self, request: web.Request) -> web.Response:
        """The dashboard: a static page whose script reads ``/api/cluster`` (with the
        secret from the page's ``#token=`` fragment, which the browser never sends)."""
        return web.Response(body=_PAGE, content_type="text/html", charset="utf-8",
                            headers={"Content-Security-Policy": _CSP,
                                     "X-Content-Type-Options": "nosniff"})

    async def _api_cluster(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return self._refuse()
        if (starting := self._starting()) is not None:
            return starting
        return web.Response(text=await self._cluster_json(), content_type="application/json")

    async def _cluster_json(self) -> str:
        """The cluster view as JSON, shared by the requests of one VIEW_REUSE interval (and
        by those that arrive while it is being gathered): however many pages are open, or
        however fast someone asks, the peers get one round of requests per interval."""
        loop = asyncio.get_running_loop()
        cached = self._view_cache
        if cached is not None and (not cached[1].done()
                                   or loop.time() - cached[0] < VIEW_REUSE):
            return await asyncio.shield(cached[1])
        future: asyncio.Future[str] = loop.create_future()
        self._view_cache = (loop.time(), future)
        try:
            text = json.dumps(await self.cluster_view())
        except BaseException as exc:
            self._view_cache = None
            future.set_exception(exc)
            future.exception()  # retrieved here: the waiters get it too
            raise
        future.set_result(text)
        return text

    async def cluster_view(self) -> dict[str, Any]:
        """Every silo's figures, gathered through the runtime: this silo's own, and each
        live peer's answers to the read-only ``status``, ``streams``, ``calls`` and
        ``reminders`` requests (a peer that does not answer in time is shown unreachable),
        with every row of the membership table and the stream-queue leases."""
        silo = self.silo
        cluster = silo.cluster
        answers: list[SiloAnswers]
        if cluster is None:
            stats = silo.statistics()
            status: dict[str, Any] = {"silo": stats.name, **status_report(silo, stats)}
            answers = [(status, {"silo": stats.name, **streams_report(silo)},
                        {"silo": stats.name, "types": silo.call_statistics.snapshot()},
                        {"silo": stats.name, **reminders_report(silo)})]
            return self.view.build(silo.options.cluster_id, answers)
        snapshot = cluster.snapshot
        peers = [s for s, e in snapshot.entries.items()
                 if s != cluster.me and not e.status.is_gone]

        async def ask(peer: Any) -> SiloAnswers | None:
            request = cluster.transport.request
            try:
                got = await asyncio.gather(*(
                    request(peer, op, [], 2.0)
                    for op in ("status", "streams", "calls", "reminders")))
            except Exception:
                return None
            if not all(isinstance(g, dict) for g in got):
                return None  # a peer that answers nonsense is shown unreachable
            return (got[0], got[1], got[2], got[3])

        ops = silo.operations
        own: SiloAnswers = (ops.status(), ops.streams_status(),
                            ops.call_statistics(), ops.reminders_status())
        asked, leases = await asyncio.gather(asyncio.gather(*map(ask, peers)),
                                             self.leases())
        answers = [own, *[a for a in asked if a]]
        return self.view.build(silo.options.cluster_id, answers, self.membership(leases))

    def membership(self, leases: dict[str, Any]) -> Membership:
        """Every row of this silo's membership view as ``health.silo_health`` rows."""
        cluster = self.silo.cluster
        assert cluster is not None
        now = time.time()
        service = cluster.membership
        expiration = (service.options.death_vote_expiration_timeout if service is not None
                      else 120.0)
        rows = [silo_health(e, now, expiration) for e in cluster.snapshot.entries.values()]
        return Membership(rows, leases, now)

    async def table_health(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """What ``/metrics`` says of the cluster, from this silo's membership view and the
        leases alone (a scrape asks no peer): every row of the table, and the queues whose
        lease is missing, expired or held by a silo that is no longer active."""
        leases = await self.leases()
        membership = self.membership(leases)
        by_silo = {r["silo"]: r for r in membership.silos}
        all_queues = {name: [str(q) for q in provider.mapper.all_queues()]
                      for name, provider in self.silo.stream_providers.items()
                      if getattr(provider, "mapper", None) is not None}
        held = set()
        for name, queues in all_queues.items():
            for queue in queues:
                lease = leases.get(queue)
                holder = by_silo.get(lease.owner) if lease is not None else None
                if (lease is not None and holder is not None
                        and holder["status"] == "active" and lease.expiry >= membership.now):
                    held.add((name, queue))
        unowned = unowned_queues(all_queues, held, leases, by_silo, membership.now,
                                 self._metrics_first_seen)
        return membership.silos, unowned

    async def leases(self) -> dict[str, Any]:
        """The stream-queue leases (queue -> ``Lease``) as the first lease-balanced stream
        provider reads them; empty without one, or when the store does not answer in 2 s."""
        for provider in self.silo.stream_providers.values():
            store = getattr(getattr(provider, "balancer", None), "store", None)
            if store is None:
                continue
            try:
                async with asyncio.timeout(2.0):
                    leases: dict[str, Any] = await store.read_all()
                    return leases
            except Exception as exc:
                self.log.warning("dashboard_leases_unread", error=repr(exc))
                return {}
        return {}


def ops_server_of(silo: Silo) -> OpsServer | None:
    """The operations server installed on ``silo``, if any."""
    server: OpsServer | None = silo.lifecycle.component(OpsServer)
    return server


def install_ops_server(silo: Silo, host: str = "127.0.0.1", port: int = 0) -> OpsServer:
    """Serve ``silo``'s operations endpoints from its first stage (with its other ports, so
    that a taken port fails the start before anything else starts): ``/healthz`` at once,
    ``/readyz`` 503 until the silo is active, the figures once it is active. It closes
    last on the way down, so that ``/readyz`` tells a stopping silo apart."""
    from orleanspy._util.lifecycle import SiloStage

    server = OpsServer(silo, host, port)
    silo.lifecycle.set_component(OpsServer, server)
    silo.lifecycle.subscribe("dashboard", SiloStage.LISTEN,
                             on_start=server.start, on_stop=server.stop)
    return server
