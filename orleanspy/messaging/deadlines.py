"""Deadlines: the response timeouts of many calls, with one timer for all of them.

Calls are kept in batches per timeout value: a batch takes the calls made within one
*tick* (``min(timeout / 16, 0.1 s)``) and shares one deadline, the end of that tick plus the
timeout. A call therefore costs appending four items to a list (no object, no timer and no
clock entry of its own), and it fails with ``GrainCallTimeoutError`` no sooner than its
timeout and at most one tick later. A call is live while its key is in its pending map.

One clock timer is armed for the earliest batch deadline. When it fires, every call of an
overdue batch that is still pending fails; the others are gone already. Batches whose calls
have mostly finished are compacted as new batches open, so what a silo keeps stays in
proportion to the calls in flight. The silo's dispatcher and each client keep one.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

from orleanspy._util.clock import Clock, TimerHandle
from orleanspy.errors import GrainCallTimeoutError
from orleanspy.ids import GrainId

__all__ = ["Deadlines"]

#: longest tick: how late a call's timeout may fire at most
MAX_TICK: Final = 0.1
#: the tick as a share of the timeout, for short timeouts
TICK_SHARE: Final = 1 / 16
_HEAD: Final = 2  # a batch is [deadline, open until, key, grain id, method, pending, ...]
_COMPACT_AT: Final = 4096  # entries kept before the first compaction


class Deadlines:
    """Request timeouts on one clock. ``default`` names where the default timeout is set,
    for the error message (``client: response_timeout``)."""

    __slots__ = ("_clock", "_default", "_handle", "_kept", "_limit", "_queues", "_when")

    def __init__(self, clock: Clock, default: str) -> None:
        self._clock = clock
        self._default = default
        #: per timeout value, its batches oldest first (the last one may still be open)
        self._queues: dict[float, deque[list[Any]]] = {}
        self._handle: TimerHandle | None = None
        self._when = 0.0
        #: entries kept in batches, and how many may be kept before a compaction
        self._kept = 0
        self._limit = _COMPACT_AT

    def add(
        self, timeout: float, key: Any, grain_id: GrainId, method: str,
        pending: dict[Any, Any],
    ) -> None:
        """Fail the future ``pending[key]`` with GrainCallTimeoutError unless it is gone
        by ``timeout`` seconds from now (at most a tick later)."""
        q = self._queues.get(timeout)
        now = self._clock.monotonic()
        if q and now < q[-1][1]:
            q[-1].extend((key, grain_id, method, pending))
            return
        self._open(timeout, now).extend((key, grain_id, method, pending))

    def _open(self, timeout: float, now: float) -> list[Any]:
        """A new batch for ``timeout``, open for one tick from ``now``."""
        tick = min(MAX_TICK, max(0.001, timeout * TICK_SHARE))
        deadline = now + tick + timeout
        batch: list[Any] = [deadline, now + tick]
        q = self._queues.get(timeout)
        if q is None:
            q = self._queues[timeout] = deque()
        elif q:
            self._kept += len(q[-1]) - _HEAD
        q.append(batch)
        if self._kept > self._limit:
            self._compact()
        handle = self._handle
        if handle is None:
            self._arm(deadline)
        elif deadline < self._when:
            handle.cancel()
            self._arm(deadline)
        return batch

    def _compact(self) -> None:
        """Keep only the live calls of closed batches (the open ones are counted later)."""
        kept = 0
        for q in self._queues.values():
            for i in range(len(q) - 1):  # the last batch is the one just opened
                batch = q[i]
                live = [batch[0], batch[1]]
                for j in range(_HEAD, len(batch), 4):
                    if batch[j] in batch[j + 3]:
                        live.extend(batch[j:j + 4])
                q[i] = live
                kept += len(live) - _HEAD
            while len(q) > 1 and len(q[0]) == _HEAD:
                q.popleft()
        self._kept = kept
        self._limit = max(_COMPACT_AT, 4 * kept)

    def _arm(self, deadline: float) -> None:
        self._when = deadline
        self._handle = self._clock.call_later(
            max(0.0, deadline - self._clock.monotonic()), self._sweep
        )

    def _sweep(self) -> None:
        self._handle = None
        now = self._clock.monotonic()
        earliest = None
        for timeout, q in list(self._queues.items()):
            while q and q[0][0] <= now:
                batch = q.popleft()
                if q:  # a closed batch (the open one, expired, was never counted)
                    self._kept -= len(batch) - _HEAD
                for j in range(_HEAD, len(batch), 4):
                    key, grain_id, method, pending = batch[j:j + 4]
                    fut = pending.pop(key, None)
                    if fut is not None and not fut.done():
                        fut.set_exception(
                            GrainCallTimeoutError(
                                f"call {grain_id}.{method} timed out after {timeout:g} s "
                                f"(per-call: ref.with_timeout(s); {self._default}: "
                                "response_timeout)"
                            )
                        )
            if not q:
                del self._queues[timeout]
            elif earliest is None or q[0][0] < earliest:
                earliest = q[0][0]
        if earliest is not None:
            self._arm(earliest)

    def cancel(self) -> None:
        """Forget every deadline (the owner is closing)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._queues.clear()
        self._kept = 0
