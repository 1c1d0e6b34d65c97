"""An activation's lifecycle state, its statistics, and the marker of a request that must wait."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Final

__all__ = ["NOT_NOW", "ActivationState", "ActivationStatistics"]


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


# Returned by ``Activation._start(msg, inline=True)`` when the request must be queued instead.
NOT_NOW: Final = object()
