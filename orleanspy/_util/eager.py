"""Eager turns: run a coroutine up to its first suspension in the frame that starts it.

A grain turn that completes without suspending (the common case for small methods) then
costs no future and no event-loop iteration. What a turn promises about its current task,
cancellation, context variables and task factories is the same on every supported Python
(docs/grains.md, "A turn's task"); how it is kept differs by version, and ``PRIVATE_TURNS``
(pinned by a test) says which path this interpreter takes:

* **Python 3.12 and newer: public asyncio only.** A turn is an ``asyncio.Task`` started with
  ``eager_start=True``: its first step runs here, and a turn that suspends goes on in that
  Task. With a task factory on the loop, the factory makes the Task
  (``loop.create_task``), and the first step runs when the factory's Task runs it.
* **Python 3.11: one private internal,** ``asyncio.tasks._current_tasks``
  (``_util.private_asyncio``, which fails at import if it is missing). 3.11 has no eager
  Task; a Task made per turn costs about 2 µs a call, the difference between beating a bare
  asyncio mailbox and losing to it (docs/benchmarks.md, the ``suspending`` rows). So the
  first step runs here with a ``StandIn`` registered as the loop's current task
  (``_util.stand_in``); a turn that suspends goes on in the task of the local caller that
  awaits it (``_util.carrier``, when ``carry`` is given) or else in a Task of its own
  (``_util.continuation``), with the same stand-in as its current task throughout.

Nesting is bounded (``MAX_DEPTH``) so a long synchronous call chain cannot overflow the
stack: beyond it the turn starts as an ordinary task.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Callable, Coroutine
from contextvars import Context
from types import CodeType
from typing import Any, Final

__all__ = ["CARRY_CODE", "MAX_DEPTH", "PRIVATE_TURNS", "eager_start"]

MAX_DEPTH: Final = 20

#: this interpreter keeps turns with asyncio's private table of current tasks (3.11 only)
PRIVATE_TURNS: Final = sys.version_info < (3, 12)

_depth = 0

Done = Callable[[Any, bool, Any], None]

#: the code of the carrying awaitable ``eager_start`` may return (None where turns are
#: never carried): how a caller tells it from a Task
CARRY_CODE: CodeType | None = None


if sys.version_info >= (3, 12):  # (spelled out for type checkers: not PRIVATE_TURNS)
    _Task = asyncio.Task

    def eager_start(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: Context,
        enter: Callable[[Any, Any], None] | None,
        a: Any,
        b: Any,
        host: Any = None,
        carry: bool = False,
    ) -> tuple[Any, Any]:
        """Start ``coro``: ``(None, result)`` if it finished (raises its exception), else
        ``(task, None)`` with the Task that runs the rest. ``enter(a, b)`` runs first,
        inside ``context``; ``host.turn_done(b, ok, value)`` hears the outcome of a Task
        (from its done callback). ``carry`` is not used here: the turn's own Task runs
        the rest."""
        global _depth
        if enter is not None:
            context.run(enter, a, b)
        if _depth >= MAX_DEPTH or loop.get_task_factory() is not None:
            task = loop.create_task(coro, context=context)
        else:
            _depth += 1
            try:
                task = _Task(coro, loop=loop, context=context, eager_start=True)
            finally:
                _depth -= 1
        if task.done():
            return None, task.result()
        if host is not None:
            done = host.turn_done
            task.add_done_callback(lambda t: _report(t, done, b))
        return task, None

    def _report(task: asyncio.Task[Any], done: Done, arg: Any) -> None:
        if task.cancelled():
            done(arg, False, asyncio.CancelledError())
        elif (error := task.exception()) is not None:
            done(arg, False, error)
        else:
            done(arg, True, task.result())

else:
    from orleanspy._util.carrier import CARRY_CODE as _CARRY_CODE
    from orleanspy._util.carrier import MAX_CARRY, stand_in_spare
    from orleanspy._util.carrier import carry as _carry
    from orleanspy._util.continuation import FRESH, Continuation, task_for
    from orleanspy._util.private_asyncio import current_tasks as _current_tasks
    from orleanspy._util.stand_in import StandIn

    CARRY_CODE = _CARRY_CODE
    _refcount = sys.getrefcount
    _weakrefs = weakref.getweakrefcount

    def _first_step(
        coro: Coroutine[Any, Any, Any], enter: Callable[[Any, Any], None], a: Any, b: Any
    ) -> Any:
        enter(a, b)
        return coro.send(None)


    # One stand-in per nesting depth, reused until a turn suspends and keeps it.
    _free: list[StandIn | None] = [None] * (MAX_DEPTH + 1)

    def eager_start(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: Context,
        enter: Callable[[Any, Any], None] | None,
        a: Any,
        b: Any,
        host: Any = None,
        carry: bool = False,
    ) -> tuple[Any, Any]:
        """Start ``coro``: ``(None, result)`` if it finished (raises its exception), else
        ``(runner, None)``. The runner is ``carry(...)`` for the caller to await when
        ``carry`` is set (``host`` is then a ``CarryHost`` and ``b`` gets the turn's stand-in
        as its ``runner``) and the stack is not too deep, else the Task that runs the rest.
        ``enter(a, b)`` (if given) runs first, inside ``context``;
        ``host.turn_done(b, ok, value)`` hears the outcome of a Task in the step that ends
        it (see ``Continuation``)."""
        global _depth
        depth = _depth
        if depth >= MAX_DEPTH:
            if enter is not None:
                context.run(enter, a, b)
            if host is None:
                return loop.create_task(coro, context=context), None
            rest = Continuation(coro, FRESH, host.turn_done, b)
            return loop.create_task(rest, context=context), None
        stand_in = _free[depth]
        if stand_in is None or stand_in._loop is not loop:
            stand_in = stand_in_spare.pop() if stand_in_spare else None
            if stand_in is None or stand_in._loop is not loop:
                stand_in = StandIn(loop)
            _free[depth] = stand_in
        elif stand_in._cancels or stand_in._must_cancel:
            stand_in.reset()
        previous = _current_tasks.get(loop)
        stand_in._carrying = previous
        _current_tasks[loop] = stand_in
        _depth += 1
        try:
            yielded = (context.run(coro.send, None) if enter is None
                       else context.run(_first_step, coro, enter, a, b))
        except StopIteration as stop:
            # References now: ``_free``, the loop's current task (until ``finally``), this
            # frame and the call. One more, a weak one or a done callback: the turn kept its
            # current task, which must not become a later turn's current task.
            if (_refcount(stand_in) > 4 or _weakrefs(stand_in)
                    or stand_in._callbacks is not None):
                _free[depth] = None
                stand_in.ended()
            return None, stop.value
        except BaseException:
            if (_refcount(stand_in) > 4 or _weakrefs(stand_in)
                    or stand_in._callbacks is not None):
                _free[depth] = None
                stand_in.ended()
            raise
        finally:
            _depth -= 1
            if previous is None:
                del _current_tasks[loop]
            else:
                _current_tasks[loop] = previous
        _free[depth] = None  # this stand-in now belongs to the turn
        if carry:
            level = previous._level + 1 if type(previous) is StandIn else 1
            if level <= MAX_CARRY:
                stand_in._level = level
                b.runner = stand_in
                return _carry(coro, context, stand_in, yielded, host, b), None
        if getattr(yielded, "_asyncio_future_blocking", None):
            # ``await fut`` marks the future "blocking" until a Task takes it, and a second
            # ``await`` of a still-marked pending future fails ("await wasn't used with
            # future"). The Task takes it only in a later loop pass, so another turn that
            # awaits the same future in this pass would fail: unmark it now, and the
            # Continuation marks it again when it hands it to the Task.
            yielded._asyncio_future_blocking = False
        rest = Continuation(coro, yielded, None if host is None else host.turn_done, b,
                            stand_in)
        task = task_for(loop, rest, context)
        stand_in.bind(task)
        return task, None
