"""What a grain asks of the runtime that hosts it: the contracts, not the implementations.

The grains layer sits below the runtime, reminders and storage. A ``Grain`` talks to its
activation, its timers and the silo's reminder registry through the protocols here; the
runtime's ``Activation`` and ``GrainTimer`` and the reminder service implement them and are
handed to the grain when it is activated.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from orleanspy.ids import GrainId

__all__ = [
    "ActivationHandle",
    "DeactivationReason",
    "ReminderEntry",
    "ReminderOwner",
    "ReminderRegistry",
    "TimerHandle",
]


class DeactivationReason(StrEnum):
    """Why an activation goes away (passed to ``Grain.on_deactivate``)."""

    IDLE = "idle"
    REQUESTED = "requested"
    SHUTTING_DOWN = "shutting_down"
    ACTIVATION_FAILED = "activation_failed"
    INCONSISTENT_STATE = "inconsistent_state"
    DUPLICATE = "duplicate"
    #: the cluster declared this silo dead: its grains live elsewhere now, so the activation
    #: goes without ``on_deactivate`` and without writing its state
    DECLARED_DEAD = "declared_dead"


@dataclass(frozen=True, slots=True)
class ReminderEntry:
    """One durable reminder: fire ``name`` on ``grain_id`` at start_at + k·period (epoch s)."""

    grain_id: GrainId
    name: str
    start_at: float
    period: float
    etag: str = ""


class TimerHandle(Protocol):
    """A grain timer: ``dispose()`` stops it; ``change(due, period)`` reschedules it (the
    next tick ``due`` seconds on, or after the tick in flight); ``ticks`` counts the
    callbacks run."""

    name: str
    ticks: int

    def change(self, due: float, period: float | None) -> None: ...

    def dispose(self) -> None: ...


class ReminderOwner(Protocol):
    """The grain registering a reminder (a ``Grain``; its class must define
    ``receive_reminder``)."""

    @property
    def grain_id(self) -> GrainId: ...


class ReminderRegistry(Protocol):
    """The silo's durable reminders, as a grain sees them."""

    async def register(self, grain: ReminderOwner, name: str, due: float,
                       period: float) -> ReminderEntry: ...

    async def unregister(self, grain_id: GrainId, name: str) -> bool: ...

    async def list(self, grain_id: GrainId) -> list[ReminderEntry]: ...


class ActivationHandle(Protocol):
    """The live activation behind a grain instance."""

    grain_id: GrainId
    keep_alive_until: float

    @property
    def silo(self) -> Any: ...

    @property
    def state(self) -> int:
        """Activating 1, valid 2, deactivating 3, gone 4 (``runtime.ActivationState``)."""
        ...

    @property
    def closing(self) -> bool:
        """Deactivating or gone."""
        ...

    def deactivate(self, reason: DeactivationReason) -> None: ...

    async def pull_streamed(self, token: str, count: int) -> dict[str, Any]:
        """The next items of one of its streamed responses (``runtime.streamed_calls``)."""
        ...

    async def close_streamed(self, token: str) -> bool:
        """End one of its streamed responses; True if it was open."""
        ...

    def start_timer(
        self,
        callback: Callable[[], Awaitable[Any]],
        due: float,
        period: float | None,
        *,
        interleave: bool,
        keep_alive: bool,
        name: str | None,
    ) -> TimerHandle: ...
