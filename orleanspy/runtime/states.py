"""ActivationState: where an activation is in its life."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ActivationState"]


class ActivationState(IntEnum):
    ACTIVATING = 1
    VALID = 2
    DEACTIVATING = 3
    INVALID = 4
