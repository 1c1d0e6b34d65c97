"""Carried turns: a turn whose local caller's task runs it to its end.

Python 3.11 only (``_util.eager``; it sets the current task through
``_util.private_asyncio``).

A local call that starts a turn eagerly (``_util.eager``) and sees it suspend does not hand
the rest to a Task of its own: the caller awaits ``carry(...)``, a generator-based
awaitable through which the caller's task drives the turn's coroutine step by step — in the
turn's own context, with the turn's ``StandIn`` as the current task — until it ends. That
costs no Task, no future and no loop pass of its own: the turn resumes exactly when a Task
would have, in the task that waits for it anyway.

The caller may give up on the turn; the turn does not end with it. If the caller's task is
cancelled, or the call's response deadline passes (``Carrier.set_exception``), the turn is
handed to a Task of its own (``Continuation``) exactly where it is suspended and goes on, and
the caller gets the ``CancelledError`` or the timeout at once. The turn's own cancels (its
``asyncio.timeout()``, a ``TaskGroup``, ``current_task().cancel()``) go through the stand-in
and reach only the turn.

A ``Carrier`` is made once the turn first waits for a future or yields a second time (until
then it has resumed within a loop pass, and most turns end so): it tells the host that the
caller's deadline now matters (``turn_suspended``), and it is what the caller's task awaits
instead of the turn's future — it forwards the task's wake-up callback to that future, so the
caller wakes directly from it, and it takes the task's ``cancel`` for the caller's own.
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, Final, Protocol
from weakref import getweakrefcount as _weakrefs

from orleanspy._util.continuation import Continuation, task_for
from orleanspy._util.private_asyncio import current_tasks as _current_tasks
from orleanspy._util.stand_in import CARRIED, PENDING, StandIn

__all__ = ["CARRY_CODE", "MAX_CARRY", "Carrier", "CarryHost", "carry", "stand_in_spare"]

#: nested carried turns one task may run (a turn deeper in a call chain gets a Task)
MAX_CARRY: Final = 16

#: a free list: stand-ins of ended carried turns that nobody kept, for the next first steps
stand_in_spare: list[StandIn] = []
_SPARE_MAX: Final = 256
_refcount = sys.getrefcount

_CancelledError = asyncio.CancelledError

_STEPPED: Final = object()  # the turn's step yielded: it goes on
_RUNNING: Final = 0  # the caller's task carries the turn
_DETACHED: Final = 1  # a Task of its own carries the turn; the caller is told ``_outcome``
_FINISHED: Final = 2


class CarryHost(Protocol):
    """Who started the turn: hears how it ends."""

    def turn_ended(self, arg: Any, exc: BaseException | None, watched: bool
                   ) -> BaseException | None:
        """The carried turn ended (``exc``: how it failed; ``watched``: after
        ``turn_suspended``); returns what its caller raises."""
        ...

    def turn_suspended(self, arg: Any, carrier: Carrier) -> None:
        """The turn waits for a future, or yields a second time: its caller's response
        deadline is to be watched from now on (``carrier.set_exception`` gives up)."""
        ...

    def turn_detached(self, arg: Any, task: asyncio.Task[Any]) -> None:
        """The caller gave up: ``task`` runs the rest of the turn (``turn_done`` hears how
        it ends; its caller's deadline no longer matters)."""
        ...

    def turn_done(self, arg: Any, ok: bool, value: Any) -> None:
        """A turn that moved to a Task of its own has ended (``Continuation``)."""
        ...


class Carrier:
    """A carried turn that waits for a future or may take a while: what its caller's task
    awaits, and where the caller gives up (``cancel``, ``set_exception``)."""

    __slots__ = (
        "_arg", "_asyncio_future_blocking", "_cb", "_cb_ctx", "_coro", "_ctx", "_host",
        "_loop", "_outcome", "_stand_in", "_state", "_waiter",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                 context: Context, stand_in: StandIn, host: CarryHost, arg: Any) -> None:
        self._loop = loop
        self._coro = coro
        self._ctx = context
        self._stand_in = stand_in
        self._host = host
        self._arg = arg
        self._state = _RUNNING
        #: the future the turn awaits, and the waiting task's wake-up registered on it
        self._waiter: Any = None
        self._cb: Callable[[Any], None] | None = None
        self._cb_ctx: Context | None = None
        self._outcome: BaseException | None = None
        self._asyncio_future_blocking = False
        stand_in._carrier = self

    # -- the future its caller's task waits on ----------------------------------------------
    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def add_done_callback(self, fn: Callable[[Any], None], *, context: Context | None = None
                          ) -> None:
        waiter = self._waiter
        if self._state or waiter is None:
            # Given up already (an outer turn that awaits this one may be handed to a Task
            # after this one was): done, as a future whose outcome is set.
            self._loop.call_soon(fn, self, context=context)
            return
        self._cb = fn
        self._cb_ctx = context
        waiter.add_done_callback(fn, context=context)

    def remove_done_callback(self, fn: Callable[[Any], None]) -> int:
        waiter = self._waiter
        if waiter is None or self._state:
            return 0
        if self._cb is fn:
            self._cb = None
        return int(waiter.remove_done_callback(fn))

    def cancel(self, msg: Any = None) -> bool:
        """The waiting task is cancelled: the turn goes on in a Task of its own. Once the
        turn went (the caller is about to be told why), the cancel is what it is told."""
        error = _CancelledError() if msg is None else _CancelledError(msg)
        if self._state == _DETACHED:
            self._outcome = error
            return True  # the waiting task's wake-up is scheduled already
        if self._state:
            return False
        self.detach(error, wake=True)
        return True

    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return self._state != _RUNNING

    def result(self) -> Any:
        outcome = self._outcome
        if outcome is None:
            raise asyncio.InvalidStateError("the turn is still carried")
        try:
            raise outcome
        finally:
            outcome = None

    def set_exception(self, exc: BaseException) -> None:
        """The caller's deadline passed: it gets ``exc``, the turn goes on."""
        if self._state == _RUNNING:
            self.detach(exc, wake=True)

    # -- handing the turn to a Task -------------------------------------------------------------
    def detach(self, outcome: BaseException | None, wake: bool) -> None:
        """The caller gives up (told ``outcome``): a Task runs the rest of the turn. The
        Task is made first: if the loop's task factory refuses, nothing has changed."""
        waiter, cb, loop = self._waiter, self._cb, self._loop
        rest = Continuation(self._coro, waiter, self._host.turn_done, self._arg,
                            self._stand_in)
        task = task_for(loop, rest, self._ctx)
        self._state = _DETACHED
        self._outcome = outcome
        self._waiter = self._cb = None
        # Wake the caller unless the future already did (its callback is scheduled).
        if waiter is not None and cb is not None and waiter.remove_done_callback(cb) and wake:
            loop.call_soon(cb, self, context=self._cb_ctx)
        self._stand_in.bind(task)
        self._host.turn_detached(self._arg, task)

    def ended(self) -> None:
        self._state = _FINISHED

    def __repr__(self) -> str:
        state = ("carried", "detached", "finished")[self._state]
        return f"<Carrier {state} {self._coro!r}>"


@types.coroutine
def carry(
    coro: Coroutine[Any, Any, Any],
    context: Context,
    stand_in: StandIn,
    yielded: Any,
    host: CarryHost,
    arg: Any,
) -> Generator[Any, Any, Any]:
    """Run the rest of a turn whose first step yielded ``yielded``, in the awaiting task;
    return its result or raise its error (``host.turn_ended`` says which)."""
    loop = stand_in._loop
    stand_in._state = CARRIED
    carrier: Carrier | None = None
    bare = 0
    while True:
        # -- hand what the turn yielded to the carrying task, and wait ----------------------
        if yielded is None:
            if carrier is None:
                bare += 1
                if bare > 1:  # a second bare yield: the turn may spin for a while
                    carrier = Carrier(loop, coro, context, stand_in, host, arg)
                    host.turn_suspended(arg, carrier)
            waited: Any = None
        elif (blocking := getattr(yielded, "_asyncio_future_blocking", None)) is None:
            waited = yielded  # not a future: the carrying task reports the bad yield
        else:
            if blocking:
                # Taken here, as a Task takes it: another turn may await the same future.
                yielded._asyncio_future_blocking = False
            if carrier is None:
                carrier = Carrier(loop, coro, context, stand_in, host, arg)
                host.turn_suspended(arg, carrier)
            carrier._waiter = yielded
            if stand_in._must_cancel and yielded.cancel(stand_in._cancel_msg):
                stand_in._must_cancel = False
            carrier._asyncio_future_blocking = True
            waited = carrier
        try:
            yield waited
        except BaseException as exc:  # thrown in by the carrying task
            thrown: BaseException | None = exc
        else:
            thrown = None
        # -- resumed: the caller may have given up meanwhile ---------------------------------
        if carrier is not None:
            if carrier._state:
                # What the caller is told: why it gave up (``cancel`` records a cancel that
                # came after a deadline). At a bare loop pass a CancelledError is the
                # caller's own (its pending cancel wins, as over a Task's future); after
                # awaiting a future it may be the turn's, cancelling that future.
                told = thrown if waited is None and isinstance(thrown, _CancelledError) else (
                    carrier._outcome or thrown)
                _release(stand_in, arg)
                try:
                    raise told if told is not None else asyncio.InvalidStateError(
                        "the turn's caller no longer carries it")
                finally:
                    told = thrown = None
            carrier._waiter = carrier._cb = None
        if thrown is not None and (
            isinstance(thrown, GeneratorExit)
            or (waited is None and isinstance(thrown, _CancelledError))
        ):
            # The caller's task was cancelled while the turn waited a bare loop pass, or
            # the awaiting coroutine is closed (the turn's own cancels never come this way:
            # they go through its stand-in): the turn goes on in a Task of its own.
            if carrier is None:
                carrier = Carrier(loop, coro, context, stand_in, host, arg)
            try:
                carrier.detach(thrown, wake=False)
            except RuntimeError:  # the loop is closed: nothing can run the turn
                coro.close()
            _release(stand_in, arg)
            try:
                raise thrown
            finally:
                thrown = None
        if thrown is None and stand_in._must_cancel:
            stand_in._must_cancel = False
            msg = stand_in._cancel_msg
            thrown = _CancelledError() if msg is None else _CancelledError(msg)
        # -- the turn's next step, in its context, with its stand-in current -------------------
        carrying = _current_tasks.get(loop)
        stand_in._carrying = carrying
        _current_tasks[loop] = stand_in
        failed: BaseException | None = None
        value: Any = None
        try:
            if thrown is None:
                yielded = context.run(coro.send, None)
            else:
                yielded = context.run(coro.throw, thrown)
                thrown = None
        except StopIteration as stop:
            value = stop.value
        except BaseException as error:
            failed = error
        else:
            value = _STEPPED
        if carrying is None:
            del _current_tasks[loop]
        else:
            _current_tasks[loop] = carrying
        if value is _STEPPED:
            continue
        if carrier is not None:
            carrier.ended()
        if failed is not None:
            _release(stand_in, arg)
            raised = host.turn_ended(arg, failed, carrier is not None)
            try:
                raise raised if raised is not None else failed
            finally:  # no cycle through this frame and the exception's traceback
                raised = failed = thrown = None
        _recycle(stand_in, arg)
        host.turn_ended(arg, None, carrier is not None)
        return value


#: the code of ``carry``: what tells a carried turn's awaitable from other generators
CARRY_CODE: Final = carry.__code__


def _recycle(stand_in: StandIn, arg: Any) -> None:
    """The turn has ended in its caller's task: its stand-in goes to ``stand_in_spare`` for
    the next first step, unless someone kept it (then it ends as a task does)."""
    stand_in._carrier = stand_in._carrying = None
    arg.runner = None
    # References: the ``carry`` frame, this one and the call's argument. One more, a weak
    # one or a done callback: the turn kept its current task.
    if (_refcount(stand_in) <= 3 and not _weakrefs(stand_in)
            and stand_in._callbacks is None and len(stand_in_spare) < _SPARE_MAX):
        stand_in._state = PENDING
        stand_in._cancels = 0
        stand_in._must_cancel = False
        stand_in._cancel_msg = None
        stand_in_spare.append(stand_in)
    else:
        stand_in.ended()


def _release(stand_in: StandIn, arg: Any) -> None:
    """The turn has ended, or left its caller's task."""
    stand_in._carrier = stand_in._carrying = None
    arg.runner = None
    if stand_in._state == CARRIED:
        stand_in.ended()
