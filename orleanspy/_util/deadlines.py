"""Many waits' deadlines with one timer: a wait registers its deadline in a dict and removes
it when it ends, and one timer, armed while any wait is registered, expires the overdue ones
every ``granularity`` seconds.

A per-wait ``call_later`` costs a TimerHandle, a heap push and a cancel per call (about a
tenth of a local grain call that suspends); this costs a dict insert and a delete. The price
is precision: a wait expires up to ``granularity`` late, so callers keep ``call_later`` for
deadlines shorter than ``PRECISE_BELOW``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

__all__ = ["PRECISE_BELOW", "Deadlines"]

PRECISE_BELOW: Final = 1.0  # seconds: shorter waits get a timer of their own
GRANULARITY: Final = 0.1  # seconds between sweeps while waits are registered

Expire = Callable[[Any, Any, float], None]


class Deadlines:
    """Registered waits by key: ``add(key, deadline, a, b, timeout)`` and ``remove(key)``;
    an overdue wait gets ``expire(a, b, timeout)`` once and is removed."""

    __slots__ = ("_call_later", "_expire", "_monotonic", "_pending", "_timer", "granularity")

    def __init__(self, call_later: Callable[..., Any], monotonic: Callable[[], float],
                 expire: Expire, granularity: float = GRANULARITY) -> None:
        self._call_later = call_later
        self._monotonic = monotonic
        self._expire = expire
        self._pending: dict[Any, tuple[float, Any, Any, float]] = {}
        self._timer: Any = None
        self.granularity = granularity

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, key: Any, deadline: float, a: Any, b: Any, timeout: float) -> None:
        self._pending[key] = (deadline, a, b, timeout)
        if self._timer is None:
            self._timer = self._call_later(self.granularity, self._sweep)

    def remove(self, key: Any) -> None:
        self._pending.pop(key, None)

    def _sweep(self) -> None:
        self._timer = None
        pending = self._pending
        now = self._monotonic()
        overdue = [key for key, entry in pending.items() if entry[0] <= now]
        for key in overdue:
            entry = pending.pop(key, None)
            if entry is not None:
                self._expire(entry[1], entry[2], entry[3])
        if pending and self._timer is None:
            self._timer = self._call_later(self.granularity, self._sweep)

    def close(self) -> None:
        """Stop the timer (the registered waits stay; nothing expires them any more)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
