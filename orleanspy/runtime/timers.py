"""GrainTimer: turn-respecting, non-overlapping timers that die with their activation.

``change(due, period)`` follows Orleans' ``IGrainTimer.Change``: outside a tick the timer is
rescheduled at once (next tick ``due`` after the change, then every ``period``); while a tick
is in flight (queued or running, so also from inside the callback) the change is held until
the tick completes, and the next tick comes ``due`` after that completion. Ticks therefore
never overlap, whoever changes the timer.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from orleanspy._util.clock import TimerHandle
from orleanspy.grains.request_context import get_context
from orleanspy.ids import GrainId
from orleanspy.messaging.message import (
    FLAG_ALWAYS_INTERLEAVE,
    FLAG_SUPPRESS_KEEP_ALIVE,
    Direction,
    Message,
)
from orleanspy.runtime.host import SiloHost

__all__ = ["GrainTimer", "TimerOwner"]


class TimerOwner(Protocol):
    """The activation a timer belongs to (``runtime.activation.Activation``)."""

    grain_id: GrainId
    name: str
    timers: set[GrainTimer]

    @property
    def closing(self) -> bool: ...

    @property
    def silo(self) -> SiloHost: ...

    def enqueue(self, msg: Message) -> object: ...


class GrainTimer:
    """A timer of one activation. Each tick is a message admitted like a request."""

    __slots__ = (
        "_activation",
        "_callback",
        "_changed",
        "_disposed",
        "_flags",
        "_handle",
        "_rc",
        "due",
        "name",
        "period",
        "ticks",
    )

    def __init__(
        self,
        activation: TimerOwner,
        callback: Callable[[], Awaitable[Any]],
        due: float,
        period: float | None,
        *,
        interleave: bool,
        keep_alive: bool,
        name: str | None,
    ) -> None:
        _check("register_timer", due, period)
        if not callable(callback):
            raise TypeError("register_timer(callback): callback must be an async callable")
        self._activation = activation
        self._callback = callback
        self.due = due
        self.period = period
        self.name: str = name or str(getattr(callback, "__name__", "timer"))
        self._flags = (FLAG_ALWAYS_INTERLEAVE if interleave else 0) | (
            0 if keep_alive else FLAG_SUPPRESS_KEEP_ALIVE
        )
        #: the request context at registration: each tick runs with it
        self._rc = get_context()
        self._handle: TimerHandle | None = None
        self._disposed = False
        #: changed while a tick was in flight: the next tick comes ``due`` after it
        self._changed = False
        self.ticks = 0

    def start(self) -> None:
        self._activation.timers.add(self)
        self._schedule(self.due)

    def _schedule(self, delay: float) -> None:
        self._handle = self._activation.silo.clock.call_later(delay, self._tick)

    def _tick(self) -> None:
        # From here until ``_done`` the tick is in flight (``_handle`` is None).
        self._handle = None
        self._changed = False
        if self._disposed:
            return
        act = self._activation
        if act.closing:
            self.dispose()
            return
        msg = Message(Direction.ONE_WAY, act.grain_id, self.name, (), None, flags=self._flags)
        msg.invoke = self._invoke
        msg.rc = self._rc
        msg.reply = self._done
        act.enqueue(msg)

    async def _invoke(self) -> None:
        result = self._callback()
        if inspect.isawaitable(result):
            await result

    def _done(self, ok: bool, value: Any) -> None:
        self.ticks += 1
        if not ok:
            self._activation.silo.log.warning(
                "grain_timer_failed", grain=self._activation.name, timer=self.name,
                error=repr(value),
            )
        if self._disposed:
            return
        if self._changed:
            self._changed = False
            self._schedule(self.due)
        elif self.period is not None:
            self._schedule(self.period)
        else:
            self.dispose()

    def change(self, due: float, period: float | None) -> None:
        """Next tick ``due`` seconds from now, then every ``period`` (None: once).

        Called while a tick is queued or running (from the callback itself, say), the
        change waits for that tick to complete: the next tick comes ``due`` after it. A
        one-shot timer's callback can re-arm its timer so. Raises ``RuntimeError`` on a
        disposed timer (after ``dispose()``, its one-shot tick, or its activation's end).
        """
        _check("change", due, period)
        if self._disposed:
            raise RuntimeError(
                f"timer {self.name!r} of {self._activation.name} is disposed (by dispose(), "
                "after its one-shot tick, or with its activation): register a new timer "
                "with register_timer instead of changing this one"
            )
        self.due = due
        self.period = period
        handle = self._handle
        if handle is None:  # a tick is in flight: ``_done`` schedules the next one
            self._changed = True
            return
        handle.cancel()
        self._schedule(due)

    def dispose(self) -> None:
        """Stop the timer; a tick already running finishes."""
        self._disposed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._activation.timers.discard(self)

    @property
    def disposed(self) -> bool:
        return self._disposed


def _check(what: str, due: float, period: float | None) -> None:
    if due < 0 or (period is not None and period <= 0):
        raise ValueError(
            f"{what}(due={due}, period={period}): need due >= 0 and period > 0 "
            "(period=None for a timer that fires once)"
        )
