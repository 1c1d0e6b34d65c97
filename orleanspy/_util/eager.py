"""Eager turns: run a coroutine up to its first suspension in the frame that starts it.

A grain turn that completes without suspending (the common case for small methods) then
costs no task, no future and no event-loop iteration; one that suspends continues in a Task.

Python 3.12+ does this natively (``Task(eager_start=True)``). On 3.11 the first step runs
here with a stand-in (``_PendingTask``) registered as the loop's current task, so grain code
that calls ``asyncio.current_task()``, ``asyncio.timeout()`` or opens a ``TaskGroup`` before
its first ``await`` gets an object whose ``cancel``/``uncancel``/``cancelling`` reach the Task
that later runs the rest of the turn. (A real Task per turn costs ~2 µs more per call: the
difference between beating a bare asyncio mailbox and losing to it.)

Nesting is bounded (``MAX_DEPTH``) so a long synchronous call chain cannot overflow the
stack: beyond it the turn starts as an ordinary task.
"""

from __future__ import annotations

import asyncio
import collections.abc
import sys
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, Final

__all__ = ["MAX_DEPTH", "Continuation", "Done", "eager_start"]

MAX_DEPTH: Final = 20

_depth = 0


Done = Callable[[Any, bool, Any], None]


class Continuation(collections.abc.Coroutine):  # type: ignore[type-arg]
    """The rest of a coroutine that already ran its first step and yielded ``yielded``.

    A Task drives it like any coroutine. Unlike a generator wrapper, a ``throw`` that
    arrives before the first ``send`` (a cancel requested during the eager step) reaches the
    grain's coroutine where it is suspended, so its ``except``/``finally`` blocks run.

    A bare first yield (``await asyncio.sleep(0)``) is not yielded again: the Task's first
    step already runs a loop pass later, which is what the bare yield asked for.

    With ``done``, the outcome is reported as ``done(arg, ok, value)`` in the step that
    finishes the coroutine, not a loop pass later by a done callback: a caller waiting for
    the turn wakes one pass sooner. An exception is then the callback's to report, and the
    Task ends normally (a ``CancelledError`` still cancels it).
    """

    __slots__ = ("_arg", "_coro", "_done", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any,
                 done: Done | None = None, arg: Any = None) -> None:
        self._coro = coro
        self._yielded: Any = _BARE if yielded is None else yielded
        self._done = done
        self._arg = arg

    def send(self, value: Any) -> Any:
        first = self._yielded
        if first is not _NOTHING:
            self._yielded = _NOTHING
            if first is not _BARE:
                if getattr(first, "_asyncio_future_blocking", None) is False:
                    first._asyncio_future_blocking = True  # unmarked by ``eager_start``
                return first
        if self._done is None:
            return self._coro.send(value)
        try:
            return self._coro.send(value)
        except BaseException as exc:
            self._finished(exc)
            raise  # pragma: no cover - _finished raises

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._yielded = _NOTHING
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)
            return self._coro.throw(typ, val, tb)  # pragma: no cover - legacy signature
        except BaseException as exc:
            if self._done is None:
                raise
            self._finished(exc)
            raise  # pragma: no cover - _finished raises

    def _finished(self, exc: BaseException) -> None:
        """Report the outcome (``exc`` ended the coroutine) and end the Task's step."""
        done, self._done = self._done, None
        assert done is not None
        if isinstance(exc, StopIteration):
            done(self._arg, True, exc.value)
            raise StopIteration(None) from None
        done(self._arg, False, exc)
        if isinstance(exc, (Exception,)) and not isinstance(exc, asyncio.CancelledError):
            raise StopIteration(None) from None  # reported: the Task ends normally
        raise exc

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("a Continuation is driven by its Task, not awaited")


_NOTHING: Final = object()
_BARE: Final = object()  # the coroutine yielded None (asyncio.sleep(0))
_FRESH: Final = _NOTHING  # a coroutine not started yet: the Task's first send starts it


if sys.version_info >= (3, 12):  # pragma: no cover - exercised on 3.12+ only

    def eager_start(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: Context,
        enter: Callable[[Any, Any], None],
        a: Any,
        b: Any,
        done: Done | None = None,
    ) -> tuple[asyncio.Task[Any] | None, Any]:
        """Start ``coro``: ``(None, result)`` if it finished (raises its exception), else
        ``(task, None)`` with the task that runs the rest. ``enter(a, b)`` runs first,
        inside ``context``; ``done(b, ok, value)`` hears the outcome of a task (see
        ``Continuation``; here from a done callback)."""
        global _depth
        context.run(enter, a, b)
        if _depth >= MAX_DEPTH:
            task = loop.create_task(coro, context=context)
        else:
            _depth += 1
            try:
                task = asyncio.Task(coro, loop=loop, context=context, eager_start=True)
            finally:
                _depth -= 1
            if task.done():
                return None, task.result()
        if done is not None:
            task.add_done_callback(lambda t: _report(t, done, b))
        return task, None

    def _report(task: asyncio.Task[Any], done: Done, arg: Any) -> None:
        if task.cancelled():
            done(arg, False, asyncio.CancelledError())
        elif task.exception() is not None:
            done(arg, False, task.exception())
        else:
            done(arg, True, task.result())

else:
    from asyncio import tasks as _tasks

    _current_tasks: dict[asyncio.AbstractEventLoop, Any] = _tasks._current_tasks  # type: ignore[attr-defined]
    _Task = asyncio.Task

    class _PendingTask:
        """The current task while a turn's first step runs eagerly (3.11 only)."""

        __slots__ = ("__weakref__", "_cancel_msg", "_cancels", "_loop", "_task")

        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            self._loop = loop
            self._task: asyncio.Task[Any] | None = None
            self._cancels = 0
            self._cancel_msg: Any = None

        def bind(self, task: asyncio.Task[Any]) -> None:
            self._task = task
            if self._cancels:
                task.cancel(self._cancel_msg)

        def cancel(self, msg: Any = None) -> bool:
            if self._task is not None:
                return self._task.cancel(msg)
            self._cancels += 1
            self._cancel_msg = msg
            return True

        def uncancel(self) -> int:
            if self._task is not None:
                return self._task.uncancel()
            if self._cancels:
                self._cancels -= 1
            return self._cancels

        def cancelling(self) -> int:
            return self._task.cancelling() if self._task is not None else self._cancels

        def get_loop(self) -> asyncio.AbstractEventLoop:
            return self._loop

        def done(self) -> bool:
            return self._task.done() if self._task is not None else False

        def __getattr__(self, name: str) -> Any:
            task = object.__getattribute__(self, "_task")
            if task is None:
                raise AttributeError(
                    f"the current grain turn has no Task yet: {name!r} is available after "
                    "its first await"
                )
            return getattr(task, name)

    def _first_step(
        coro: Coroutine[Any, Any, Any], enter: Callable[[Any, Any], None], a: Any, b: Any
    ) -> Any:
        enter(a, b)
        return coro.send(None)

    # One stand-in per nesting depth, reused until a turn suspends and keeps it.
    _free: list[_PendingTask | None] = [None] * (MAX_DEPTH + 1)

    def eager_start(
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any],
        context: Context,
        enter: Callable[[Any, Any], None],
        a: Any,
        b: Any,
        done: Done | None = None,
    ) -> tuple[asyncio.Task[Any] | None, Any]:
        """Start ``coro``: ``(None, result)`` if it finished (raises its exception), else
        ``(task, None)`` with the task that runs the rest. ``enter(a, b)`` runs first,
        inside ``context``; ``done(b, ok, value)`` hears the outcome of a task in the step
        that ends it (see ``Continuation``)."""
        global _depth
        depth = _depth
        if depth >= MAX_DEPTH:
            context.run(enter, a, b)
            if done is None:
                return loop.create_task(coro, context=context), None
            return loop.create_task(Continuation(coro, _FRESH, done, b), context=context), None
        stand_in = _free[depth]
        if stand_in is None or stand_in._loop is not loop:
            stand_in = _free[depth] = _PendingTask(loop)
        elif stand_in._cancels:
            stand_in._cancels = 0
        previous = _current_tasks.get(loop)
        _current_tasks[loop] = stand_in
        _depth += 1
        try:
            yielded = context.run(_first_step, coro, enter, a, b)
        except StopIteration as stop:
            return None, stop.value
        finally:
            _depth -= 1
            if previous is None:
                del _current_tasks[loop]
            else:
                _current_tasks[loop] = previous
        if getattr(yielded, "_asyncio_future_blocking", None):
            # ``await fut`` marks the future "blocking" until a Task takes it, and a second
            # ``await`` of a still-marked pending future fails ("await wasn't used with
            # future"). The Task takes it only in a later loop pass, so another turn that
            # awaits the same future in this pass would fail: unmark it now, and the
            # Continuation marks it again when it hands it to the Task.
            yielded._asyncio_future_blocking = False
        if loop.get_task_factory() is None:  # the Task itself: loop.create_task's checks, skipped
            task = _Task(Continuation(coro, yielded, done, b), loop=loop, context=context)
        else:
            task = loop.create_task(Continuation(coro, yielded, done, b), context=context)
        _free[depth] = None  # this stand-in now belongs to the task
        stand_in.bind(task)
        return task, None
