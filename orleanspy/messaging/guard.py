"""HandshakeGuard: what a listener lets a peer cost before it has proved who it is.

A connection that has not completed its handshake (gateway: cluster id and client secret;
silo port: the cluster-key challenge) is *unauthenticated*. For such a peer a listener
bounds, per port:

* how long it may take: the handshake must complete within ``timeout`` seconds of the
  connection being accepted, or the connection is closed (idle and slow-sending peers alike);
* how large a frame it may announce: ``frame_limit`` bytes (the connection checks each
  length prefix against it before buffering the frame), far below ``max_frame_size``;
* how many such connections may be open at once: ``max_pending``; when one more arrives, the
  one that has waited longest is closed.

So the memory unauthenticated peers can hold is at most about ``max_pending`` x
(``frame_limit`` + one socket read), whatever they send. Each refusal is logged at warning
with the peer and the reason; beyond ``LOG_BURST`` lines of one event in a second the rest
are counted and the count goes with the next line, so a flood cannot flood the log too.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

from orleanspy._util.clock import Clock, TimerHandle

__all__ = [
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_PENDING",
    "DEFAULT_PRE_AUTH_FRAME_LIMIT",
    "LOG_BURST",
    "Guarded",
    "HandshakeGuard",
]

DEFAULT_HANDSHAKE_TIMEOUT: Final = 5.0
DEFAULT_PRE_AUTH_FRAME_LIMIT: Final = 16 * 1024
DEFAULT_MAX_PENDING: Final = 64
LOG_BURST: Final = 10


class Guarded(Protocol):
    """A connection the guard watches."""

    peer: str

    def close(self) -> None: ...


class HandshakeGuard:
    """Bounds on the unauthenticated connections of one listener (see module doc)."""

    def __init__(
        self,
        clock: Clock,
        log: Any,
        *,
        port: str,
        timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
        frame_limit: int = DEFAULT_PRE_AUTH_FRAME_LIMIT,
        max_pending: int = DEFAULT_MAX_PENDING,
    ) -> None:
        self.clock = clock
        self.log = log
        self.port = port
        self.timeout = timeout
        self.frame_limit = frame_limit
        self.max_pending = max_pending
        self._pending: dict[Guarded, TimerHandle] = {}
        self._windows: dict[str, list[float]] = {}
        self._unlogged: dict[str, int] = {}
        self.evicted = 0
        self.timed_out = 0

    @property
    def pending(self) -> int:
        """Unauthenticated connections open now."""
        return len(self._pending)

    def admit(self, conn: Guarded) -> None:
        """A connection was accepted: start its deadline. When ``max_pending`` connections
        are already waiting, the one waiting longest is closed to make room (a peer holding
        idle connections open cannot keep a new, quick client out)."""
        if len(self._pending) >= self.max_pending:
            oldest = next(iter(self._pending))
            self._pending.pop(oldest).cancel()
            self.evicted += 1
            self.refuse(oldest, "connection_refused", f"more than {self.max_pending} "
                        "connections were waiting for their handshake and this one waited "
                        "longest (max_pending_handshakes)")
        self._pending[conn] = self.clock.call_later(self.timeout, self._expired, conn)

    def authenticated(self, conn: Guarded) -> None:
        """``conn`` completed its handshake: no more deadline, no longer counted."""
        handle = self._pending.pop(conn, None)
        if handle is not None:
            handle.cancel()

    def forget(self, conn: Guarded) -> None:
        """``conn`` closed (before or after its handshake)."""
        self.authenticated(conn)

    def _expired(self, conn: Guarded) -> None:
        if self._pending.pop(conn, None) is None:
            return
        self.timed_out += 1
        self.refuse(conn, "connection_handshake_timeout",
                    f"no complete handshake within {self.timeout:g} s (handshake_timeout)")

    def refuse(self, conn: Guarded, event: str, reason: str) -> None:
        """Close ``conn`` and log ``event`` with the reason (see ``report``)."""
        self.report(conn.peer, event, reason)
        conn.close()

    def report(self, peer: str, event: str, reason: str) -> None:
        """Log ``event`` for a refused peer at warning: at most ``LOG_BURST`` lines of one
        event per second; the lines held back are counted in the next one."""
        now = self.clock.monotonic()
        window = self._windows.get(event)
        if window is None or now - window[0] >= 1.0:
            window = self._windows[event] = [now, 0]
        window[1] += 1
        if window[1] > LOG_BURST:
            self._unlogged[event] = self._unlogged.get(event, 0) + 1
            return
        suppressed = self._unlogged.pop(event, 0)
        self.log.warning(event, port=self.port, peer=peer, reason=reason,
                         **({"suppressed": suppressed} if suppressed else {}))
