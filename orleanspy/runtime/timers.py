"""GrainTimer: turn-respecting, non-overlapping timers that die with their activation."""

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
        if due < 0 or (period is not None and period <= 0):
            raise ValueError(
                f"register_timer(due={due}, period={period}): need due >= 0 and period > 0"
            )
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
        self.ticks = 0

    def start(self) -> None:
        self._activation.timers.add(self)
        self._schedule(self.due)

    def _schedule(self, delay: float) -> None:
        self._handle = self._activation.silo.clock.call_later(delay, self._tick)

    def _tick(self) -> None:
        self._handle = None
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
        if not self._disposed and self.period is not None:
            self._schedule(self.period)
        elif self.period is None:
            self.dispose()

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
