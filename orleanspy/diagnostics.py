"""Runtime events: typed records of what a silo does, free when nobody listens.

Each silo (and client) owns one ``Diagnostics`` hub; components emit through it and anyone
may listen: tests await an event instead of polling state (``orleanspy.testing.EventRecorder``),
operations tooling counts them. Emitting code guards on ``hub.listening`` so that no event
object is built when there is no listener::

    if diag.listening:
        diag.emit(ActivationCreated(silo=name, grain_id=grain_id))

Events are frozen slotted dataclasses; stream and queue identities are strings so that this
module sits below every package that emits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from orleanspy.ids import GrainId

__all__ = [
    "ActivationCreated",
    "ActivationDeactivated",
    "CachePressureChanged",
    "CachePurged",
    "CallFailed",
    "DeliveryAbandoned",
    "DeliveryFailed",
    "DeliveryRetried",
    "Diagnostics",
    "EventsAcknowledged",
    "Listener",
    "PullPeriodChanged",
    "QueueAcquired",
    "QueueRead",
    "QueueReleased",
    "RequestDropped",
    "RequestQueued",
    "RuntimeEvent",
    "SiloStatusChanged",
    "SubscriptionRejoined",
    "SubscriptionSpilled",
]


@dataclass(frozen=True, slots=True)
class RuntimeEvent:
    """Base of every runtime event; ``silo`` names the silo (``host:port``) that emitted it."""

    silo: str


@dataclass(frozen=True, slots=True)
class ActivationCreated(RuntimeEvent):
    """An activation finished ``on_activate`` and serves requests."""

    grain_id: GrainId


@dataclass(frozen=True, slots=True)
class ActivationDeactivated(RuntimeEvent):
    """An activation ended (``reason``: idle, requested, shutting_down, failed, ...)."""

    grain_id: GrainId
    reason: str


@dataclass(frozen=True, slots=True)
class CallFailed(RuntimeEvent):
    """A grain method raised; ``error`` is its ``repr``."""

    grain_id: GrainId
    method: str
    error: str


@dataclass(frozen=True, slots=True)
class RequestDropped(RuntimeEvent):
    """A request was not run (``reason``: expired, rejected, shutting_down, ...)."""

    grain_id: GrainId
    method: str
    reason: str


@dataclass(frozen=True, slots=True)
class DeliveryFailed(RuntimeEvent):
    """A stream delivery to a subscription raised (it will be retried or abandoned)."""

    provider: str
    stream: str
    subscription: str
    attempt: int
    error: str


@dataclass(frozen=True, slots=True)
class DeliveryRetried(RuntimeEvent):
    """A failed stream delivery is about to be tried again after ``delay`` seconds."""

    provider: str
    stream: str
    subscription: str
    attempt: int
    delay: float


@dataclass(frozen=True, slots=True)
class DeliveryAbandoned(RuntimeEvent):
    """A stream delivery kept failing past its retry limit; ``action`` says what followed."""

    provider: str
    stream: str
    subscription: str
    action: str
    error: str


@dataclass(frozen=True, slots=True)
class QueueAcquired(RuntimeEvent):
    """This silo's pulling agent for ``queue`` started."""

    provider: str
    queue: str


@dataclass(frozen=True, slots=True)
class QueueReleased(RuntimeEvent):
    """This silo's pulling agent for ``queue`` stopped (its deliveries finished)."""

    provider: str
    queue: str


@dataclass(frozen=True, slots=True)
class CachePressureChanged(RuntimeEvent):
    """A queue cache came under pressure (``on``) or left it."""

    provider: str
    queue: str
    on: bool


@dataclass(frozen=True, slots=True)
class QueueRead(RuntimeEvent):
    """A pulling agent read ``count`` containers from ``queue`` (``total`` since it started)."""

    provider: str
    queue: str
    count: int
    total: int


@dataclass(frozen=True, slots=True)
class CachePurged(RuntimeEvent):
    """A queue cache dropped ``count`` containers every gating cursor is past; ``remaining``
    containers stay cached."""

    provider: str
    queue: str
    count: int
    remaining: int


@dataclass(frozen=True, slots=True)
class EventsAcknowledged(RuntimeEvent):
    """A pulling agent acknowledged ``count`` containers to ``queue`` (``total`` since it
    started); acknowledged containers are gone from the queue."""

    provider: str
    queue: str
    count: int
    total: int


@dataclass(frozen=True, slots=True)
class PullPeriodChanged(RuntimeEvent):
    """A pulling agent's period between reads changed: it backs off under cache pressure
    and returns to its ``pull_period`` once the cache has room."""

    provider: str
    queue: str
    period: float


@dataclass(frozen=True, slots=True)
class SubscriptionSpilled(RuntimeEvent):
    """A lagging subscription left the queue cache: its events are read from the queue."""

    provider: str
    queue: str
    stream: str
    subscription: str


@dataclass(frozen=True, slots=True)
class SubscriptionRejoined(RuntimeEvent):
    """A spilled subscription caught up with the queue and is served from the cache again."""

    provider: str
    queue: str
    stream: str
    subscription: str


@dataclass(frozen=True, slots=True)
class SiloStatusChanged(RuntimeEvent):
    """A silo's status in this silo's view changed (``subject`` is the silo concerned)."""

    subject: str
    status: str


@dataclass(frozen=True, slots=True)
class RequestQueued(RuntimeEvent):
    """A message could not start at once: it waits in the mailbox (``blocked`` False) or, the
    mailbox being full, its sender is suspended (``blocked`` True). ``queued`` and
    ``blocked_senders`` are the counts after it."""

    grain_id: GrainId
    method: str
    blocked: bool
    queued: int
    blocked_senders: int


Listener = Callable[[RuntimeEvent], Any]


class Diagnostics:
    """The event hub of one silo or client.

    ``listening`` is a plain attribute, true while any listener is subscribed: emitters test
    it before building an event. A listener that raises is dropped from nothing and breaks
    nothing: the error is swallowed after being counted in ``listener_errors``.
    """

    __slots__ = ("_listeners", "listener_errors", "listening")

    def __init__(self) -> None:
        self._listeners: tuple[Listener, ...] = ()
        self.listening = False
        self.listener_errors = 0

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every event from now on; returns an unsubscribe."""
        self._listeners = (*self._listeners, listener)
        self.listening = True

        def unsubscribe() -> None:
            self._listeners = tuple(x for x in self._listeners if x is not listener)
            self.listening = bool(self._listeners)

        return unsubscribe

    def emit(self, event: RuntimeEvent) -> None:
        """Hand ``event`` to every listener, synchronously, in subscription order."""
        for listener in self._listeners:
            try:
                listener(event)
            except Exception:
                self.listener_errors += 1
