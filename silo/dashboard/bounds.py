"""What one port of a silo process may cost: the operations server's connection cap and
timeouts, the process's file-descriptor limit, and a bounded rate of accept-error lines.

- **File descriptors.** ``raise_fd_limit`` raises the soft ``RLIMIT_NOFILE`` to the hard
  limit at start. The operations server keeps ``FD_RESERVE`` descriptors of the soft limit
  for everything else (gateway and silo connections, storage files, logs): its cap is
  ``ops_connection_cap(soft)``, at most ``OPS_MAX_CONNECTIONS``.
- **Connections.** At the cap, a new connection closes the connection that has waited
  longest without a request in progress (as the handshake guard of the other ports does),
  so idle connections cannot keep a probe out; if every connection is serving a request,
  the new one is closed.
- **Timeouts.** A connection must deliver its first request head within ``HEAD_TIMEOUT``
  seconds; a connection idle between requests (keep-alive), or before its first, is closed
  after ``IDLE_TIMEOUT`` seconds.
- **Logs.** Refusals and the event loop's errors (``socket.accept() out of system
  resource`` and the like) are logged at most ``LOG_BURST`` lines per event per second; the
  lines held back are counted in the next one.
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web

__all__ = [
    "FD_RESERVE",
    "HEAD_TIMEOUT",
    "IDLE_TIMEOUT",
    "LOG_BURST",
    "OPS_MAX_CONNECTIONS",
    "CappedConnections",
    "RateLimitedLog",
    "limit_loop_error_logs",
    "ops_connection_cap",
    "raise_fd_limit",
]

#: descriptors of the soft limit the operations server leaves to the rest of the silo
FD_RESERVE: Final = 512
#: connections the operations server holds at most (fewer under a low fd limit)
OPS_MAX_CONNECTIONS: Final = 128
#: seconds within which a connection must deliver its first request head
HEAD_TIMEOUT: Final = 5.0
#: seconds a connection may stay idle, before its first request or between requests
IDLE_TIMEOUT: Final = 15.0
#: lines of one event logged per second at most
LOG_BURST: Final = 10
#: a hard limit of "unlimited" is raised to this many descriptors
_UNLIMITED_FDS: Final = 1 << 20


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit; returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_FDS if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # e.g. above the kernel's nr_open: keep the soft one
            return soft, hard
        soft = target
    return soft, hard


def ops_connection_cap(soft_limit: int | None = None) -> int:
    """The operations server's connection cap under a soft fd limit (default: the
    process's): at most ``OPS_MAX_CONNECTIONS``, and a quarter of what ``FD_RESERVE``
    leaves, but at least 8."""
    if soft_limit is None:
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft_limit == resource.RLIM_INFINITY:
            soft_limit = _UNLIMITED_FDS
    return max(8, min(OPS_MAX_CONNECTIONS, (soft_limit - FD_RESERVE) // 4))


class RateLimitedLog:
    """Logs an event at warning at most ``LOG_BURST`` times per second; the lines held back
    are counted (``suppressed``) in the next line of that event."""

    __slots__ = ("_clock", "_log", "_unlogged", "_windows")

    def __init__(self, log: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._clock = clock
        self._windows: dict[str, list[float]] = {}
        self._unlogged: dict[str, int] = {}

    def warning(self, event: str, *, key: str | None = None, **fields: Any) -> None:
        """Log ``event`` unless its window (``key``, default the event) is full."""
        key = event if key is None else key
        now = self._clock()
        window = self._windows.get(key)
        if window is None or now - window[0] >= 1.0:
            window = self._windows[key] = [now, 0]
        window[1] += 1
        if window[1] > LOG_BURST:
            self._unlogged[key] = self._unlogged.get(key, 0) + 1
            return
        suppressed = self._unlogged.pop(key, 0)
        self._log.warning(event, **fields, **({"suppressed": suppressed} if suppressed else {}))


def limit_loop_error_logs(loop: asyncio.AbstractEventLoop, log: RateLimitedLog) -> None:
    """Report the loop's errors through ``log``, at a bounded rate per message: an accept
    that fails for want of descriptors in one line without a traceback (the listener
    retries by itself), any other error (a callback that raised) with its traceback."""

    def handle(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message", "event loop error"))
        exc = context.get("exception")
        if message.startswith("socket.accept()") or exc is None:
            log.warning("event_loop_error", key=message, message=message,
                        error=repr(exc) if exc is not None else None)
        else:
            log.warning("event_loop_error", key=message, message=message, exc_info=exc)

    loop.set_exception_handler(handle)


class _Handler(web.RequestHandler):
    """aiohttp's request handler, counted by the server's cap, with a head deadline."""

    def __init__(self, caps: CappedConnections, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._caps = caps
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._head_deadline = self._loop.call_later(self._caps.head_timeout, self._no_head)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
        self._caps.open.pop(self, None)
        super().connection_lost(exc)

    def _no_head(self) -> None:
        self._head_deadline = None
        if getattr(self, "_request_count", 0) == 0 and self.transport is not None:
            self._caps.refused("ops_connection_closed",
                               f"no request head within {self._caps.head_timeout:g} s")
            self.force_close()

    @property
    def busy(self) -> bool:
        return bool(getattr(self, "_request_in_progress", False))


class _Refused(asyncio.Protocol):
    """A connection beyond the cap while every held one is serving: closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class CappedConnections:
    """The protocol factory of the operations server's listening socket (see the module)."""

    def __init__(self, server: web.Server, log: RateLimitedLog, *, cap: int,
                 head_timeout: float = HEAD_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.server = server
        self.cap = cap
        self.head_timeout = head_timeout
        self.idle_timeout = idle_timeout
        self.log = log
        self.loop = loop or asyncio.get_running_loop()
        #: the connections held, oldest first
        self.open: OrderedDict[_Handler, None] = OrderedDict()
        self.evicted = 0

    def __call__(self) -> asyncio.BaseProtocol:
        if len(self.open) >= self.cap and not self._evict_one():
            self.refused("ops_connection_refused",
                         f"{self.cap} connections held, each serving a request")
            return _Refused()
        handler = _Handler(self, self.server, loop=self.loop,
                           keepalive_timeout=self.idle_timeout, access_log=None)
        self.open[handler] = None
        return handler

    def _evict_one(self) -> bool:
        for handler in self.open:
            if not handler.busy:
                del self.open[handler]
                self.evicted += 1
                self.refused("ops_connection_closed",
                             f"{self.cap} connections held: closed the one idle longest")
                handler.force_close()
                return True
        return False

    def refused(self, event: str, reason: str) -> None:
        self.log.warning(event, reason=reason)
