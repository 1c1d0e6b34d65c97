"""StandIn: the current task of a turn that runs without an ``asyncio.Task`` of its own.

Python 3.11 only (``_util.eager``): 3.12 and newer give each turn an eagerly started Task.

A turn's first step runs eagerly in the frame that starts it, and a turn its caller carries
(``_util.carrier``) runs its later steps in the caller's Task. While either runs, a
``StandIn`` is registered as the loop's current task, so grain code that calls
``asyncio.current_task()``, ``asyncio.timeout()`` or opens a ``TaskGroup`` gets an object
whose ``cancel``/``uncancel``/``cancelling`` act on the turn alone — never on the caller —
with a Task's semantics: a cancel while the turn awaits a future cancels that future; one
while the turn runs or waits a bare loop pass is thrown in at its next step. When the turn
moves to a Task of its own, the stand-in is bound to it, stays the turn's current task
(``_util.continuation``) and forwards everything there, its cancellation count included.
Anything else (``get_name()``, ...) is the carrying task's.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

__all__ = ["BOUND", "CARRIED", "ENDED", "PENDING", "StandIn"]

#: the turn's first step runs, or has not suspended yet
PENDING: Final = 0
#: a caller's Task runs the turn (``_carrier`` is set)
CARRIED: Final = 1
#: a Task of its own runs the turn (``_task`` is set)
BOUND: Final = 2
#: the carried turn has ended
ENDED: Final = 3


class StandIn:
    """The current task while a turn runs without a Task of its own."""

    __slots__ = (
        "__weakref__", "_callbacks", "_cancel_msg", "_cancels", "_carrier", "_carrying",
        "_level", "_loop", "_must_cancel", "_state", "_task",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._state = PENDING
        self._task: asyncio.Task[Any] | None = None
        self._carrier: Any = None
        #: while carried: the ``Carrier`` once the turn waits for a future (or None)
        #: the task running the turn's current step (the caller's, or an outer stand-in)
        self._carrying: Any = None
        #: how many turns without a Task of their own run in this stack, this one included
        self._level = 1
        self._cancels = 0
        self._must_cancel = False
        self._cancel_msg: Any = None
        #: done callbacks (with their contexts) added before the turn ended or moved
        self._callbacks: list[tuple[Any, Any]] | None = None

    def reset(self) -> None:
        """Ready for the next first step (the stand-in of a turn that did not suspend)."""
        self._cancels = 0
        self._must_cancel = False
        self._cancel_msg = None

    def bind(self, task: asyncio.Task[Any]) -> None:
        """The turn goes on in ``task``: a cancel not yet delivered and the done callbacks
        go there; the cancellations counted so far stay here and add to the Task's."""
        self._state = BOUND
        self._task = task
        self._carrier = None
        callbacks, self._callbacks = self._callbacks, None
        for fn, context in callbacks or ():
            task.add_done_callback(fn, context=context)
        if self._must_cancel:
            self._must_cancel = False
            task.cancel(self._cancel_msg)

    def ended(self) -> None:
        """The turn ended without a Task of its own: its done callbacks run."""
        self._state = ENDED
        self._carrier = self._carrying = None
        callbacks, self._callbacks = self._callbacks, None
        for fn, context in callbacks or ():
            self._loop.call_soon(fn, self, context=context)

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        """``fn(task)`` once the turn has ended (not when the task carrying it does)."""
        state = self._state
        if state == BOUND:
            self._task.add_done_callback(fn, context=context)  # type: ignore[union-attr]
        elif state == ENDED:
            self._loop.call_soon(fn, self, context=context)
        elif self._callbacks is None:
            self._callbacks = [(fn, context)]
        else:
            self._callbacks.append((fn, context))

    def remove_done_callback(self, fn: Any) -> int:
        if self._state == BOUND:
            return self._task.remove_done_callback(fn)  # type: ignore[union-attr]
        callbacks = self._callbacks or []
        kept = [c for c in callbacks if c[0] != fn]
        self._callbacks = kept or None
        return len(callbacks) - len(kept)

    def cancel(self, msg: Any = None) -> bool:
        state = self._state
        if state == BOUND:
            return self._task.cancel(msg)  # type: ignore[union-attr]
        if state == ENDED:
            return False
        self._cancels += 1
        carrier = self._carrier
        if state == CARRIED and carrier is not None:
            waiter = carrier._waiter
            if waiter is not None and waiter.cancel(msg):
                return True
        self._must_cancel = True
        self._cancel_msg = msg
        return True

    def uncancel(self) -> int:
        if self._state == BOUND:
            task: asyncio.Task[Any] = self._task  # type: ignore[assignment]
            if task.cancelling():
                return task.uncancel() + self._cancels
        if self._cancels > 0:
            self._cancels -= 1
        return self._cancels

    def cancelling(self) -> int:
        if self._state == BOUND:
            return self._task.cancelling() + self._cancels  # type: ignore[union-attr]
        return self._cancels

    def cancelled(self) -> bool:
        return self._task.cancelled() if self._state == BOUND else False  # type: ignore[union-attr]

    def done(self) -> bool:
        state = self._state
        if state == BOUND:
            return self._task.done()  # type: ignore[union-attr]
        return state == ENDED

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def __getattr__(self, name: str) -> Any:
        task = self._task if self._state == BOUND else self._carrying
        if task is None:
            raise AttributeError(
                f"the current grain turn runs outside any task: {name!r} is not available"
            )
        return getattr(task, name)

    def __repr__(self) -> str:
        state = ("pending", "carried", "bound", "ended")[self._state]
        return f"<grain turn {state}>"
