"""The one private asyncio internal orleanspy uses, on Python 3.11 only: the current tasks.

On 3.11 a grain turn's first step (``_util.eager``), the later steps of a turn its caller
carries (``_util.carrier``) and the steps of a turn handed to a Task of its own
(``_util.continuation``) run with the turn's ``StandIn`` registered as the loop's current
task, so that ``asyncio.current_task()`` answers for the turn. 3.11 has no public way to
set the current task (3.12 starts a Task eagerly instead, with public asyncio only), so
these modules write ``asyncio.tasks._current_tasks``, the table that 3.11's C ``Task``
keeps its current task in.

This module is imported only on 3.11 (``_util.eager`` decides). It fails at import, naming
the problem, if that table is not what the 3.11 path relies on, rather than letting turns
misbehave.
"""

from __future__ import annotations

import asyncio
import sys
from asyncio import tasks as _tasks
from typing import Any, Final

__all__ = ["current_tasks"]


def _table() -> dict[asyncio.AbstractEventLoop, Any]:
    if sys.version_info[:2] != (3, 11):  # pragma: no cover - the fence itself
        raise ImportError(
            "orleanspy._util.private_asyncio is the Python 3.11 turn path; this is Python "
            f"{sys.version_info[0]}.{sys.version_info[1]}, which takes the public asyncio path"
        )
    table = getattr(_tasks, "_current_tasks", None)
    if type(table) is not dict:  # pragma: no cover - a CPython build without it
        raise ImportError(
            "orleanspy needs asyncio.tasks._current_tasks (a dict) on Python 3.11 to run "
            f"grain turns, and this Python ({sys.version.split()[0]}) has {table!r}: "
            "use CPython 3.11.x, 3.12 or 3.13"
        )
    return table


#: the loop's current task, by loop: what ``asyncio.current_task()`` reads
current_tasks: Final[dict[asyncio.AbstractEventLoop, Any]] = _table()
