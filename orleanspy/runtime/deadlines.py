"""Deadlines: the response timeouts of many calls, with one timer for all of them.

Calls with the same timeout expire in the order they were made, so each timeout value keeps
a FIFO of (deadline, key, grain, method, pending map); a call is live while its key is in
its pending map. Finished heads are dropped as calls are added (and by ``trim``, which the
owner may call as replies arrive), and one clock timer is armed for the earliest head. A
call therefore costs a tuple append, never a timer of its own. The silo's dispatcher and
each client keep one.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from orleanspy._util.clock import Clock, TimerHandle
from orleanspy.errors import GrainCallTimeoutError
from orleanspy.ids import GrainId

__all__ = ["Deadlines"]

_Entry = tuple[float, Any, GrainId, str, dict[Any, Any]]


class Deadlines:
    """Request timeouts on one clock. ``default`` names where the default timeout is set,
    for the error message (``client: response_timeout``)."""

    __slots__ = ("_clock", "_default", "_handle", "_queues", "_when")

    def __init__(self, clock: Clock, default: str) -> None:
        self._clock = clock
        self._default = default
        self._queues: dict[float, deque[_Entry]] = {}
        self._handle: TimerHandle | None = None
        self._when = 0.0

    def add(
        self, timeout: float, key: Any, grain_id: GrainId, method: str,
        pending: dict[Any, Any],
    ) -> None:
        """Fail the future ``pending[key]`` with GrainCallTimeoutError unless it is gone
        by then."""
        q = self._queues.get(timeout)
        if q is None:
            q = self._queues[timeout] = deque()
        while q and q[0][1] not in q[0][4]:  # finished heads go as new calls come
            q.popleft()
        deadline = self._clock.monotonic() + timeout
        q.append((deadline, key, grain_id, method, pending))
        handle = self._handle
        if handle is None:
            self._arm(deadline)
        elif deadline < self._when:
            handle.cancel()
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        self._when = deadline
        self._handle = self._clock.call_later(
            max(0.0, deadline - self._clock.monotonic()), self._sweep
        )

    def trim(self) -> None:
        """Drop the heads whose call has finished (called as replies arrive)."""
        for q in self._queues.values():
            while q and q[0][1] not in q[0][4]:
                q.popleft()

    def _sweep(self) -> None:
        self._handle = None
        now = self._clock.monotonic()
        earliest = None
        for timeout, q in self._queues.items():
            while q and (q[0][0] <= now or q[0][1] not in q[0][4]):
                _, key, grain_id, method, pending = q.popleft()
                fut = pending.pop(key, None)
                if fut is not None and not fut.done():
                    fut.set_exception(
                        GrainCallTimeoutError(
                            f"call {grain_id}.{method} timed out after {timeout:g} s "
                            f"(per-call: ref.with_timeout(s); {self._default}: "
                            "response_timeout)"
                        )
                    )
            if q and (earliest is None or q[0][0] < earliest):
                earliest = q[0][0]
        if earliest is not None:
            self._arm(earliest)

    def cancel(self) -> None:
        """Forget every deadline (the owner is closing)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._queues.clear()
