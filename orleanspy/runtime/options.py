"""Options of the silo and the client: frozen dataclasses, validated on creation."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Final

from orleanspy._util.urls import parse_backend_url, relative_sqlite
from orleanspy.errors import ConfigurationError

__all__ = ["SiloOptions"]

#: the back ends each URL setting accepts
BACKENDS_OF: Final[dict[str, frozenset[str]]] = {
    "storage": frozenset({"memory", "sqlite", "redis", "postgres"}),
    "reminders": frozenset({"memory", "sqlite", "redis", "postgres"}),
    "membership": frozenset({"memory", "sqlite", "redis", "postgres"}),
}


_WILDCARDS: Final = frozenset({"0.0.0.0", "::", ""})


def _loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _check(cls_name: str, name: str, ok: bool, value: object, rule: str) -> None:
    if not ok:
        raise ConfigurationError(f"{cls_name}.{name} = {value!r}: {rule}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SiloOptions:
    """Everything a silo needs to start. Durations are float seconds.

    ``storage`` and ``reminders`` are URLs: ``memory``, ``sqlite:PATH`` (relative paths
    resolve against ``data_dir``), ``redis://HOST:PORT/DB?prefix=P`` or
    ``postgresql://HOST:PORT/DB?schema=S``.

    ``host`` is the address the silo listens on; ``advertise`` (default: ``host``) the address
    it gives the other silos and clients (in the membership table). Listening on all
    interfaces (``0.0.0.0``) needs ``advertise``; listening beyond loopback needs the
    credentials set: ``cluster_key`` for a cluster's silo port and ``secret`` for the gateway.

    ``membership`` makes the silo a member of a cluster: ``memory`` (a cluster of silos in one
    process sharing the table object, see ``Silo(membership_table=...)``) or ``sqlite:PATH``
    (silo processes of one machine); None (the default) is a lone silo without a silo-to-silo
    port. In a cluster the silo listens on ``port`` (0 picks one) for the other silos.
    ``probe_period``, ``probe_timeout`` (None: the probe period), ``i_am_alive_period`` and
    ``table_refresh_period`` are the main failure-detection settings
    (``orleanspy.cluster.config.membership_options_of`` turns them into
    ``orleanspy.cluster.membership.MembershipOptions``). ``defunct_silo_expiration`` (default
    7 days) is the age at which the rows of stopped and dead silos are deleted from the
    membership table (by one active silo, at most hourly, or every ``defunct_silo_expiration``
    if that is shorter).

    ``grain_error_log_level`` (default debug): the level at which an exception a grain method
    raises is logged (``grain_call_failed``, with the grain, method and error); the caller
    gets the exception either way.

    ``gc_freeze`` (default True): once started, the silo collects garbage once and freezes
    every object alive (``gc.freeze``), so that CPython's full collections skip the
    process's long-lived objects (a third of the stream delivery path's time under load);
    the last silo of the process to stop unfreezes them. Set False when the silo shares its
    process with code that relies on the cyclic collector for objects made before it.

    ``allow_readable_secrets`` (default False): a file that holds the cluster key (the
    ``--cluster-key-file``, or the SQLite membership file that keeps the key when
    ``cluster_key`` is not set) must not be readable by group or others; True accepts one
    (docs/security.md).

    ``max_connection_requests`` (default 1,000) and ``max_client_requests`` (default 2,000):
    the requests (two-way and one-way) that one gateway connection, and one proven client
    over all its connections, may have in flight on this silo; at either cap the gateway
    stops reading the connection (the client's sends block) until both are at half
    (docs/security.md, "Back-pressure"). The client's cap is twice the connection's by
    default so that a client reconnecting while its old connection's requests still run is
    not held back by them alone.

    ``traceback_paths`` (default False): the server tracebacks in error replies to callers
    keep absolute file paths; by default a file is named relative to the import path
    (``myapp/grains.py``), with its line and function (docs/security.md).

    ``call_statistics`` (default True): count each grain method's calls, errors and a
    latency histogram (``orleanspy.runtime.call_stats``; ``orleanspy grains top``, the
    dashboard, ``/metrics``). It reads the clock twice per call; False saves that.

    ``grain_page_state`` (default False): the grain page (``orleanspy grains show``, the
    dashboard's grain lookup, ``/api/grains/TYPE/KEY``) shows the grain's persistent state
    as JSON (at most ``GRAIN_STATE_CAP`` bytes per state, truncated with a note): the
    activation's in-memory value when the grain is active, else the stored record. Off by
    default: state may hold what an operator should not read.
    """

    cluster_id: str = "dev"
    host: str = "127.0.0.1"
    advertise: str | None = None
    port: int = 11111
    gateway_port: int | None = 30000
    secret: str | None = None
    cluster_key: str | None = None
    allow_readable_secrets: bool = False
    handshake_timeout: float = 5.0
    max_pending_handshakes: int = 64
    max_connection_requests: int = 1000
    max_client_requests: int = 2000
    storage: str = "memory"
    reminders: str = "memory"
    data_dir: str = ".orleanspy"
    response_timeout: float = 30.0
    collection_age: float = 900.0
    collection_quantum: float = 60.0
    mailbox_capacity: int = 10_000
    max_forward_count: int = 2
    max_frame_size: int = 16 * 1024 * 1024
    max_local_workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    shutdown_timeout: float = 30.0
    minimum_reminder_period: float = 60.0
    log_format: str = "console"
    log_level: str = "info"
    grain_error_log_level: str = "debug"
    gc_freeze: bool = True
    call_statistics: bool = True
    grain_page_state: bool = False
    traceback_paths: bool = False
    membership: str | None = None
    probe_period: float = 5.0
    probe_timeout: float | None = None
    i_am_alive_period: float = 30.0
    table_refresh_period: float = 10.0
    defunct_silo_expiration: float = 7 * 24 * 3600.0

    def __post_init__(self) -> None:
        n = "SiloOptions"
        _check(n, "cluster_id", bool(self.cluster_id), self.cluster_id, "must be non-empty")
        _check(n, "port", 0 <= self.port < 65536, self.port, "must be 0..65535")
        if self.gateway_port is not None:
            _check(
                n, "gateway_port", 0 <= self.gateway_port < 65536, self.gateway_port,
                "must be 0..65535 (0 picks a free port; None disables the gateway)",
            )
        for name in ("response_timeout", "collection_age", "collection_quantum",
                     "shutdown_timeout", "minimum_reminder_period", "probe_period",
                     "i_am_alive_period", "table_refresh_period", "handshake_timeout",
                     "defunct_silo_expiration"):
            value = getattr(self, name)
            _check(n, name, value > 0, value, "must be > 0 seconds")
        _check(n, "mailbox_capacity", self.mailbox_capacity >= 1, self.mailbox_capacity,
               "must be >= 1")
        _check(n, "max_forward_count", self.max_forward_count >= 0, self.max_forward_count,
               "must be >= 0")
        _check(n, "max_pending_handshakes", self.max_pending_handshakes >= 1,
               self.max_pending_handshakes, "must be >= 1")
        _check(n, "max_connection_requests", self.max_connection_requests >= 2,
               self.max_connection_requests, "must be >= 2 (reading resumes at half)")
        _check(n, "max_client_requests",
               self.max_client_requests >= self.max_connection_requests,
               self.max_client_requests,
               f"must be >= max_connection_requests ({self.max_connection_requests})")
        if self.cluster_key is not None:
            _check(n, "cluster_key", len(self.cluster_key) >= 16, "<hidden>",
                   "must be at least 16 characters (e.g. `python -c 'import secrets; "
                   "print(secrets.token_hex(32))'`)")
        _check(n, "max_frame_size", self.max_frame_size >= 1024, self.max_frame_size,
               "must be >= 1024 bytes")
        _check(n, "max_local_workers", self.max_local_workers >= 1, self.max_local_workers,
               "must be >= 1")
        _check(n, "log_format", self.log_format in ("console", "json"), self.log_format,
               "must be 'console' or 'json'")
        _check(n, "log_level", self.log_level in ("debug", "info", "warning", "error"),
               self.log_level, "must be debug, info, warning or error")
        _check(n, "grain_error_log_level",
               self.grain_error_log_level in ("debug", "info", "warning", "error"),
               self.grain_error_log_level, "must be debug, info, warning or error")
        for name in ("storage", "reminders", "membership"):
            url = getattr(self, name)
            if url is not None:  # membership None: a lone silo
                parse_backend_url(url, key=f"{n}.{name}", allow=BACKENDS_OF[name],
                                  data_dir=self.data_dir, example=f"sqlite:{name}.db")
                if self.membership is not None and relative_sqlite(url):
                    raise ConfigurationError(
                        f"{n}.{name} = {url!r}: a relative SQLite path in a cluster would name "
                        "a different file for each silo (it resolves against each silo's "
                        "data_dir); every silo must open the same file: give an absolute "
                        "path, or use a server the silos share (redis://HOST:PORT/DB)")
        if self.probe_timeout is not None:
            _check(n, "probe_timeout", self.probe_timeout > 0, self.probe_timeout,
                   "must be > 0 seconds (or None: the probe period)")

    def check_listening(self) -> None:
        """The rules that tie ``host`` to other settings (checked when a silo is made from
        the final options, not for each setting alone).

        Raises:
            ConfigurationError: listening on every interface without ``advertise``; a silo
                port beyond loopback without ``cluster_key``; a gateway beyond loopback
                without ``secret``.
        """
        n = "SiloOptions"
        _check(n, "advertise", self.advertise is not None or self.host not in _WILDCARDS,
               self.host, "listening on every interface needs advertise: the address the "
               "other silos and clients reach (e.g. --advertise 10.0.0.11)")
        if not _loopback(self.host):
            _check(n, "host", self.membership is None or self.cluster_key is not None,
                   self.host, "a silo port beyond loopback needs cluster_key set (a "
                   "--cluster-key-file shared by the silos) so that only the cluster's "
                   "silos can join it")
            _check(n, "host", self.gateway_port is None or self.secret is not None,
                   self.host, "a gateway beyond loopback needs secret set (--secret): the "
                   "clients present it")

    @property
    def advertised_host(self) -> str:
        """The address the other silos and clients use: ``advertise``, else ``host``."""
        return self.advertise if self.advertise is not None else self.host

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
