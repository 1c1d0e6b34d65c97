"""TaskSet: the background tasks a component owns, cancelled and awaited when it stops.

No loop in the runtime is fire-and-forget: a component spawns its loops into its own
``TaskSet`` and ``await tasks.close()`` in its stop, so nothing outlives it and a failed
task is logged instead of vanishing with "Task exception was never retrieved".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["TaskSet"]

T = TypeVar("T")


class TaskSet:
    """Owned tasks. ``spawn`` starts one; ``close`` cancels the rest and waits for them.

    Args:
        on_error: called with ``(task, exception)`` when an owned task fails (not when it is
            cancelled); by default the failure is left for whoever awaits the task.
    """

    __slots__ = ("_closed", "_on_error", "_tasks")

    def __init__(
        self, on_error: Callable[[asyncio.Task[Any], BaseException], None] | None = None
    ) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._on_error = on_error
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Start ``coro`` as an owned task.

        Raises:
            RuntimeError: the set was closed (the owner is stopping).
        """
        if self._closed:
            coro.close()
            raise RuntimeError("TaskSet.spawn after close(): the owner has stopped")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.add(task)
        return task

    def add(self, task: asyncio.Task[Any]) -> None:
        """Own a task created elsewhere."""
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if self._on_error is not None and not task.cancelled():
            exc = task.exception()
            if exc is not None:
                self._on_error(task, exc)

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(list(self._tasks))

    def cancel(self) -> None:
        """Cancel every owned task (without waiting)."""
        for task in list(self._tasks):
            task.cancel()

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait until no owned task is left running, up to ``timeout`` real seconds;
        True when none is left."""
        pending = [t for t in self._tasks if t is not asyncio.current_task()]
        if pending:
            await asyncio.wait(pending, timeout=timeout)
        return not any(t for t in self._tasks if t is not asyncio.current_task())

    async def close(self) -> None:
        """Refuse new tasks, cancel the owned ones and wait until they have ended. The task
        that calls ``close`` is not waited for (a stop started from inside a loop)."""
        self._closed = True
        current = asyncio.current_task()
        pending = [t for t in self._tasks if t is not current]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
