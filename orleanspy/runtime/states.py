"""The activation's states and the values its callers handle (turn futures, statistics)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

__all__ = ["NOT_NOW", "ActivationState", "ActivationStatistics", "reply_to"]


class ActivationState(IntEnum):
    ACTIVATING = 1
    VALID = 2
    DEACTIVATING = 3
    INVALID = 4


@dataclass(frozen=True, slots=True)
class ActivationStatistics:
    grain_id: str
    state: str
    received: int
    completed: int
    failed: int
    running: int
    queued: int
    max_queued: int
    blocked_senders: int
    suspended: int
    rejected: int
    dropped_newest: int
    dropped_oldest: int
    idle_seconds: float
    #: queued requests dropped because their caller's deadline had passed before they started
    expired: int = 0


def reply_to(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Resolve the future a caller awaits (a request that could not finish inline, a control
    request to another silo) with its outcome (``msg.reply = partial(reply_to, fut)``);
    nothing once the caller has stopped waiting.

    The future is a plain ``asyncio.Future``, not a subclass: a Task awaiting exactly that
    type takes the C fast path of its step (a subclass costs about 0.5 µs per await).
    """
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


# Returned by ``Activation._start(msg, inline=True)`` when the request must be queued instead.
NOT_NOW: Final = object()
