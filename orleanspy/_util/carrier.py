"""Carrier: a turn whose caller's task runs it to its end (in-process calls, Python 3.11).

A local call that starts a turn eagerly (``_util.eager``) and sees it suspend does not hand
the rest to a Task of its own: the caller awaits a ``Carrier``, and the caller's task drives
the turn's coroutine step by step — in the turn's own context, with the turn's ``StandIn``
as the current task — until it ends. That costs no Task, no future and no loop pass of its
own: the turn resumes exactly when a Task would have, in the task that waits for it anyway.

The caller may give up on the turn; the turn does not end with it. If the caller's task is
cancelled, or the call's response deadline passes (``set_exception``), the turn is handed to
a Task of its own (``Continuation``) exactly where it is suspended and goes on, and the
caller gets the ``CancelledError`` or the timeout at once. The turn's own cancels (its
``asyncio.timeout()``, a ``TaskGroup``, ``current_task().cancel()``) go through the stand-in
and reach only the turn.

To its caller's task a suspended carrier is the future it awaits: the carrier forwards the
task's wake-up callback to the future the turn awaits, so the caller wakes directly from it.
"""

from __future__ import annotations

import asyncio
import sys
from asyncio import tasks as _tasks
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, Final, Protocol

from orleanspy._util.continuation import Continuation
from orleanspy._util.stand_in import CARRIED, ENDED, PENDING, StandIn

__all__ = ["MAX_CARRY", "Carrier", "CarryHost", "stand_in_spare"]

#: nested carried turns one task may run (a turn deeper in a call chain gets a Task)
MAX_CARRY: Final = 16

#: a free list: stand-ins of ended carried turns that nobody kept, for the next first steps
stand_in_spare: list[StandIn] = []
_stand_in_spare_MAX: Final = 256
_refcount = sys.getrefcount

_current_tasks: dict[asyncio.AbstractEventLoop, Any] = _tasks._current_tasks  # type: ignore[attr-defined]
_CancelledError = asyncio.CancelledError
_Task = asyncio.Task

_RUNNING: Final = 0  # the caller's task carries the turn
_DETACHED: Final = 1  # a Task of its own carries the turn; the caller is told ``_outcome``
_FINISHED: Final = 2

_NONE: Final = object()
_BARE: Final = object()


class CarryHost(Protocol):
    """Who started the turn: hears how it ends."""

    def turn_ended(self, arg: Any, exc: BaseException | None, watched: bool
                   ) -> BaseException | None:
        """The carried turn ended (``exc``: how it failed; ``watched``: after
        ``turn_suspended``); returns what its caller raises."""
        ...

    def turn_detached(self, arg: Any, task: asyncio.Task[Any]) -> None:
        """The caller gave up: ``task`` runs the rest of the turn (``turn_done`` hears how
        it ends; its caller's deadline no longer matters)."""
        ...

    def turn_suspended(self, arg: Any, carrier: Carrier) -> None:
        """The turn waits for a future, or yields a second time: its caller's response
        deadline is to be watched from now on (``carrier.set_exception`` gives up)."""
        ...

    def turn_done(self, arg: Any, ok: bool, value: Any) -> None:
        """A turn that moved to a Task of its own has ended (``Continuation``)."""
        ...


class Carrier:
    """The rest of a suspended turn, run by the task that awaits it."""

    __slots__ = (
        "_arg", "_asyncio_future_blocking", "_cb", "_cb_ctx", "_coro", "_ctx", "_ended",
        "_first", "_host", "_loop", "_outcome", "_stand_in", "_state", "_task", "_waiter",
        "_watched",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: Context,
        stand_in: StandIn,
        yielded: Any,
        host: CarryHost,
        arg: Any,
    ) -> None:
        """``yielded``: what the turn's first step yielded; ``host`` hears how the turn
        ends, told ``arg``."""
        self._loop = loop
        self._coro = coro
        self._ctx = context
        self._stand_in: Any = stand_in  # None once the turn has ended
        self._host = host
        self._arg = arg
        self._state = _RUNNING
        #: the future the turn awaits, and the waiting task's wake-up registered on it
        self._waiter: Any = None
        self._cb: Callable[[Any], None] | None = None
        self._outcome: BaseException | None = None
        self._ended: asyncio.Future[None] | None = None
        # (``_cb_ctx`` is set with ``_cb``, ``_task`` on detaching, and
        # ``_asyncio_future_blocking`` before this carrier is first yielded to a task)
        stand_in._state = CARRIED
        stand_in._carrier = self
        self._watched = False
        self._first: Any = _BARE if yielded is None else self._yield(yielded)

    # -- driven by the awaiting task ------------------------------------------------------
    def __await__(self) -> Generator[Any, Any, Any]:
        return self  # type: ignore[return-value]

    def __next__(self) -> Any:
        first = self._first
        if first is not _NONE:
            self._first = _NONE
            return None if first is _BARE else first
        stand_in = self._stand_in
        if self._state or stand_in._must_cancel:  # given up, or a cancel to deliver
            return self._given_up(None) if self._state else self._step(None)
        # _step(None), inlined: this runs once per suspension of every carried turn
        self._waiter = self._cb = None
        loop = self._loop
        carrying = _current_tasks.get(loop)
        stand_in._carrying = carrying
        _current_tasks[loop] = stand_in
        try:
            yielded = self._ctx.run(self._coro.send, None)
        except StopIteration as stop:
            value = stop.value
        except BaseException as error:
            if carrying is None:
                del _current_tasks[loop]
            else:
                _current_tasks[loop] = carrying
            return self._end(error)
        else:
            if carrying is None:
                del _current_tasks[loop]
            else:
                _current_tasks[loop] = carrying
            return self._yield(yielded)
        if carrying is None:
            del _current_tasks[loop]
        else:
            _current_tasks[loop] = carrying
        # _ended_ok(), inlined
        self._state = _FINISHED
        self._stand_in = None
        stand_in._carrier = stand_in._carrying = None
        if _refcount(stand_in) <= 2 and len(stand_in_spare) < _stand_in_spare_MAX:
            stand_in._state = PENDING
            stand_in._cancels = 0
            stand_in._must_cancel = False
            stand_in._cancel_msg = None
            stand_in_spare.append(stand_in)
        else:
            stand_in._state = ENDED
        self._host.turn_ended(self._arg, None, self._watched)
        if self._ended is not None:
            self._ended.set_result(None)
        raise StopIteration(value)

    def send(self, value: Any) -> Any:
        return self.__next__()

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if val is None else val
        if isinstance(exc, type):
            exc = exc()
        self._first = _NONE
        if self._state:
            return self._given_up(exc)
        try:
            if self._waiter is None and isinstance(exc, _CancelledError):
                # The carrying task was cancelled while the turn waited a bare loop pass
                # (the turn's own cancels never come this way: they go through its stand-in).
                self._detach(exc, wake=False)
                raise exc
            return self._step(exc)
        finally:
            exc = typ = val = None  # no cycle through this frame and the traceback

    def close(self) -> None:
        """The awaiting coroutine is closed: the turn goes on in a Task of its own."""
        if self._state == _RUNNING:
            try:
                self._detach(None, wake=False)
            except RuntimeError:  # the loop is closed: nothing can run the turn
                self._state = _FINISHED
                self._coro.close()

    def _step(self, exc: BaseException | None) -> Any:
        stand_in = self._stand_in
        if stand_in._must_cancel and exc is None:
            stand_in._must_cancel = False
            msg = stand_in._cancel_msg
            exc = _CancelledError() if msg is None else _CancelledError(msg)
        self._waiter = self._cb = None
        loop = self._loop
        carrying = _current_tasks.get(loop)
        stand_in._carrying = carrying
        _current_tasks[loop] = stand_in
        try:
            if exc is None:
                yielded = self._ctx.run(self._coro.send, None)
            else:
                yielded = self._ctx.run(self._coro.throw, exc)
        except BaseException as error:
            outcome: BaseException | None = error
        else:
            outcome = None
        if carrying is None:
            del _current_tasks[loop]
        else:
            _current_tasks[loop] = carrying
        if outcome is None:
            return self._yield(yielded)
        try:
            return self._end(outcome)
        finally:
            outcome = None  # no cycle through this frame and the exception's traceback

    def _yield(self, yielded: Any) -> Any:
        """What the carrying task waits for: nothing (a bare loop pass), or this carrier
        standing for the future the turn awaits. The turn's first wait for a future, or
        its second bare yield, tells the host that the turn may take a while (its caller's
        deadline starts to matter)."""
        if not self._watched:
            self._watched = True
            self._host.turn_suspended(self._arg, self)
        if yielded is None:
            return None
        blocking = getattr(yielded, "_asyncio_future_blocking", None)
        if blocking is None:
            return yielded  # not a future: the carrying task reports the bad yield
        if blocking:
            # Taken here, as a Task takes it: another turn may await the same future.
            yielded._asyncio_future_blocking = False
        self._waiter = yielded
        stand_in = self._stand_in
        if stand_in._must_cancel and yielded.cancel(stand_in._cancel_msg):
            stand_in._must_cancel = False
        self._asyncio_future_blocking = True
        return self

    def _release(self) -> None:
        """The turn has ended: its stand-in goes to the spares unless somebody kept it."""
        self._state = _FINISHED
        stand_in = self._stand_in
        self._stand_in = None
        stand_in._carrier = stand_in._carrying = None
        if _refcount(stand_in) <= 2 and len(stand_in_spare) < _stand_in_spare_MAX:
            stand_in._state = PENDING
            stand_in._cancels = 0
            stand_in._must_cancel = False
            stand_in._cancel_msg = None
            stand_in_spare.append(stand_in)
        else:
            stand_in._state = ENDED

    def _ended_ok(self) -> None:
        self._release()
        self._host.turn_ended(self._arg, None, self._watched)
        if self._ended is not None:
            self._ended.set_result(None)

    def _end(self, outcome: BaseException | None) -> Any:
        assert outcome is not None
        if type(outcome) is StopIteration:
            value = outcome.value
            outcome = None
            self._ended_ok()
            raise StopIteration(value)
        self._release()
        error: BaseException | None = self._host.turn_ended(self._arg, outcome, self._watched)
        if self._ended is not None:
            self._ended.set_result(None)
        try:
            raise error if error is not None else outcome
        finally:
            error = outcome = None

    def _given_up(self, exc: BaseException | None) -> Any:
        # The caller's own cancellation wins over the outcome it was about to be told (as
        # a Task's pending cancel wins over its future's exception).
        error: BaseException | None = (
            exc if isinstance(exc, _CancelledError) else self._outcome or exc)
        if error is None:
            raise asyncio.InvalidStateError("the turn's caller no longer carries it")
        try:
            raise error
        finally:
            error = exc = None

    # -- the future its caller's task waits on ----------------------------------------------
    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def add_done_callback(self, fn: Callable[[Any], None], *, context: Context | None = None
                          ) -> None:
        self._cb = fn
        self._cb_ctx = context
        self._waiter.add_done_callback(fn, context=context)

    def remove_done_callback(self, fn: Callable[[Any], None]) -> int:
        waiter = self._waiter
        if waiter is None or self._state:
            return 0
        if self._cb is fn:
            self._cb = None
        return int(waiter.remove_done_callback(fn))

    def cancel(self, msg: Any = None) -> bool:
        """The waiting task is cancelled: the turn goes on in a Task of its own."""
        if self._state:
            return False
        self._detach(_CancelledError() if msg is None else _CancelledError(msg), wake=True)
        return True

    def done(self) -> bool:
        return self._state != _RUNNING

    def cancelled(self) -> bool:
        return False

    def result(self) -> Any:
        return self._given_up(None)

    def set_exception(self, exc: BaseException) -> None:
        """The caller's deadline passed: it gets ``exc``, the turn goes on."""
        if self._state == _RUNNING:
            self._detach(exc, wake=True)

    # -- for the silo's shutdown --------------------------------------------------------------
    def ended(self) -> asyncio.Future[Any]:
        """Resolves when the turn has ended or moved to a Task of its own (then that Task)."""
        if self._state == _DETACHED:
            return self._task
        fut = self._ended
        if fut is None:
            fut = self._ended = self._loop.create_future()
            if self._state == _FINISHED:
                fut.set_result(None)
        return fut

    def cancel_turn(self, msg: Any = None) -> bool:
        """Cancel the turn itself (as ``Task.cancel`` would)."""
        stand_in = self._stand_in
        return stand_in.cancel(msg) if stand_in is not None else False

    # -- handing the turn to a Task -------------------------------------------------------------
    def _detach(self, outcome: BaseException | None, wake: bool) -> None:
        self._state = _DETACHED
        self._outcome = outcome
        self._first = _NONE
        waiter, cb = self._waiter, self._cb
        self._waiter = self._cb = None
        loop = self._loop
        # Wake the caller unless the future already did (its callback is scheduled).
        if waiter is not None and cb is not None and waiter.remove_done_callback(cb) and wake:
            loop.call_soon(cb, self, context=self._cb_ctx)
        rest = Continuation(self._coro, waiter, self._host.turn_done, self._arg)
        if loop.get_task_factory() is None:
            task = _Task(rest, loop=loop, context=self._ctx)
        else:
            task = loop.create_task(rest, context=self._ctx)
        self._task = task
        self._stand_in.bind(task)
        self._host.turn_detached(self._arg, task)
        if self._ended is not None and not self._ended.done():
            self._ended.set_result(None)

    def __repr__(self) -> str:
        state = ("carried", "detached", "finished")[self._state]
        return f"<Carrier {state} {self._coro!r}>"
