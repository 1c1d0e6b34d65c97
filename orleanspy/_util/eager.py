"""Eager coroutine start: run a coroutine up to its first suspension in the caller's frame.

A grain turn that completes without suspending (the common case for small methods) then
costs no task, no future and no event-loop iteration. A turn that does suspend continues in
a Task that resumes exactly where it stopped (the same trick as Python 3.12's eager tasks,
which 3.11 lacks).
"""

from __future__ import annotations

import types
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["continue_in_generator"]


@types.coroutine
def continue_in_generator(
    coro: Coroutine[Any, Any, Any], yielded: Any
) -> Generator[Any, Any, Any]:
    """Resume ``coro``, which already yielded ``yielded``, inside a Task.

    The Task sees ``yielded`` (the future the coroutine waits on) as if the coroutine had
    yielded it under the Task's own control; sends and throws are forwarded.
    """
    send = coro.send
    throw = coro.throw
    while True:
        try:
            value = yield yielded
        except BaseException as exc:  # forwarded into the coroutine, incl. CancelledError
            try:
                yielded = throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = send(value)
            except StopIteration as stop:
                return stop.value
