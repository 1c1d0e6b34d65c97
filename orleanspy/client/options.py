"""ClientOptions: the settings of a ClusterClient (gateways, back-off, discovery, deadlines)."""

from __future__ import annotations

from dataclasses import dataclass

from orleanspy._util.urls import parse_backend_url
from orleanspy.errors import ConfigurationError

__all__ = ["ClientOptions"]


def _check(cls_name: str, name: str, ok: bool, value: object, rule: str) -> None:
    if not ok:
        raise ConfigurationError(f"{cls_name}.{name} = {value!r}: {rule}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    """Options of a ClusterClient.

    ``gateways`` lists one or more ``host:port`` gateways (a single string is accepted too;
    duplicates are ignored). The client keeps a connection to ``gateway_count`` of them (None:
    all) and reconnects a lost or unreachable gateway after ``reconnect_delay`` seconds,
    doubling up to ``reconnect_delay_max`` (with ±25% jitter).

    ``membership`` (``sqlite:PATH`` or ``sqlite://PATH``, relative to the current directory;
    ``redis://HOST:PORT/DB?prefix=P`` or ``postgresql://HOST:PORT/DB?schema=S``)
    lets the client read the cluster's membership table at connect and every
    ``gateway_refresh_period`` seconds and add the gateways of active silos that ``gateways``
    does not list.
    """

    cluster_id: str = "dev"
    gateways: tuple[str, ...] = ("127.0.0.1:30000",)
    secret: str | None = None
    response_timeout: float = 30.0
    connect_timeout: float = 5.0
    max_frame_size: int = 16 * 1024 * 1024
    gateway_count: int | None = None
    reconnect_delay: float = 0.5
    reconnect_delay_max: float = 10.0
    membership: str | None = None
    gateway_refresh_period: float = 10.0

    def __post_init__(self) -> None:
        n = "ClientOptions"
        if isinstance(self.gateways, str):
            object.__setattr__(self, "gateways", (self.gateways,))
        elif not isinstance(self.gateways, tuple):
            object.__setattr__(self, "gateways", tuple(self.gateways))
        _check(n, "gateways", bool(self.gateways), self.gateways, "needs at least one host:port")
        for gw in self.gateways:
            host, _, port = gw.rpartition(":")
            _check(n, "gateways", bool(host) and port.isdigit(), gw, "each must be host:port")
        if self.gateway_count is not None:
            _check(n, "gateway_count", self.gateway_count >= 1, self.gateway_count,
                   "must be >= 1 (or None: every gateway)")
        _check(n, "reconnect_delay", self.reconnect_delay > 0, self.reconnect_delay,
               "must be > 0 seconds")
        _check(n, "reconnect_delay_max", self.reconnect_delay_max >= self.reconnect_delay,
               self.reconnect_delay_max, "must be >= reconnect_delay")
        if self.membership is not None:
            parse_backend_url(self.membership, key=f"{n}.membership",
                              allow=frozenset({"sqlite", "redis", "postgres"}),
                              example="sqlite:membership.db")
        _check(n, "gateway_refresh_period", self.gateway_refresh_period > 0,
               self.gateway_refresh_period, "must be > 0 seconds")
        _check(n, "response_timeout", self.response_timeout > 0, self.response_timeout,
               "must be > 0 seconds")
        _check(n, "connect_timeout", self.connect_timeout > 0, self.connect_timeout,
               "must be > 0 seconds")

