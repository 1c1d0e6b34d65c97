"""Continuation: the rest of a coroutine that already ran its first step, for a Task to drive.

Python 3.11 only (``_util.eager``; it sets the current task through
``_util.private_asyncio``). A turn's first step runs eagerly (``_util.eager``); when the
rest of it needs a Task of its own (it was queued, or its caller stopped carrying it: see
``_util.carrier``), the Task drives a ``Continuation``: it yields what the coroutine last
yielded, then goes on, each step with the turn's stand-in as the current task.
"""

from __future__ import annotations

import asyncio
import collections.abc
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final

from orleanspy._util.private_asyncio import current_tasks as _current_tasks

__all__ = ["BARE", "FRESH", "Continuation", "Done", "task_for"]

Done = Callable[[Any, bool, Any], None]

_NOTHING: Final = object()
#: the coroutine yielded None (``asyncio.sleep(0)``)
BARE: Final = object()
#: a coroutine not started yet: the Task's first send starts it
FRESH: Final = _NOTHING


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

    With ``stand_in`` (the turn's current task so far, now bound to the Task), each step
    runs with it as the loop's current task: ``asyncio.current_task()`` is one object for
    the turn's whole life. The Task is current again before the step returns (asyncio
    checks that when it leaves the step).
    """

    __slots__ = ("_arg", "_coro", "_done", "_stand_in", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any,
                 done: Done | None = None, arg: Any = None, stand_in: Any = None) -> None:
        self._coro = coro
        self._yielded: Any = BARE if yielded is None else yielded
        self._done = done
        self._arg = arg
        self._stand_in = stand_in

    def send(self, value: Any) -> Any:
        first = self._yielded
        if first is not _NOTHING:
            self._yielded = _NOTHING
            if first is not BARE:
                if getattr(first, "_asyncio_future_blocking", None) is False:
                    first._asyncio_future_blocking = True  # unmarked by its first taker
                return first
        stand_in = self._stand_in
        try:
            if stand_in is None:
                return self._coro.send(value)
            return self._as(stand_in, self._coro.send, value)
        except BaseException as exc:
            if self._done is None:
                raise
            self._finished(exc)
            raise  # pragma: no cover - _finished raises

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._yielded = _NOTHING
        try:
            if val is not None or tb is not None:  # pragma: no cover - legacy signature
                return self._coro.throw(typ, val, tb)
            stand_in = self._stand_in
            if stand_in is None:
                return self._coro.throw(typ)
            return self._as(stand_in, self._coro.throw, typ)
        except BaseException as exc:
            if self._done is None:
                raise
            self._finished(exc)
            raise  # pragma: no cover - _finished raises

    @staticmethod
    def _as(stand_in: Any, step: Callable[[Any], Any], value: Any) -> Any:
        """``step(value)`` with ``stand_in`` as its loop's current task."""
        loop = stand_in._loop
        task = _current_tasks.get(loop)
        _current_tasks[loop] = stand_in
        try:
            return step(value)
        finally:
            if task is None:  # pragma: no cover - a Task step always has its task current
                del _current_tasks[loop]
            else:
                _current_tasks[loop] = task

    def _finished(self, exc: BaseException) -> None:
        """Report the outcome (``exc`` ended the coroutine) and end the Task's step."""
        done, self._done = self._done, None
        assert done is not None
        if isinstance(exc, StopIteration):
            done(self._arg, True, exc.value)
            raise StopIteration(None) from None
        done(self._arg, False, exc)
        if isinstance(exc, Exception) and not isinstance(exc, asyncio.CancelledError):
            raise StopIteration(None) from None  # reported: the Task ends normally
        raise exc

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("a Continuation is driven by its Task, not awaited")


_Task = asyncio.Task


def task_for(loop: asyncio.AbstractEventLoop, rest: Continuation, context: Any
             ) -> asyncio.Task[Any]:
    """The Task that runs ``rest``: made directly (``loop.create_task``'s checks skipped)
    unless the loop has a task factory."""
    if loop.get_task_factory() is None:
        return _Task(rest, loop=loop, context=context)
    return loop.create_task(rest, context=context)
