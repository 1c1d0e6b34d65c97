"""Every exception orleanspy raises.

Hierarchy::

    OrleansPyError
    ├── ConfigurationError            bad option, bad config file key (names the key and the fix)
    ├── SerializationError            a value that cannot cross a process boundary (TypeError too)
    ├── GrainCallError
    │   ├── GrainCallTimeoutError     the request timed out (also a TimeoutError)
    │   ├── MessageRejectedError      the runtime refused the request (kind says why)
    │   │   └── MailboxFullError      a bounded mailbox refused or evicted a message
    │   ├── SiloUnavailableError      the target silo or gateway is gone
    │   ├── DeadlockError             a call cycle would wait on itself
    │   └── RemoteGrainError          an exception whose type is not importable here
    ├── ActivationFailedError         on_activate or the state read failed
    ├── InconsistentStateError        etag mismatch on a state write
    ├── ProtocolError                 a malformed frame or handshake
    ├── StorageError                  a storage file that cannot be used (names file and fix)
    │   └── StorageCorruptionError    damaged file, or stored data that fails its checksum
    ├── StreamError
    │   ├── QueueCacheMissError       asked-for events are gone (requested, low, high)
    │   ├── ReplayUnavailableError    a replay point beyond retention (oldest_token/_time)
    │   ├── EventsMissedError         a laggard lost events first..last (flow control max/tagged)
    │   ├── StreamDeliveryError       delivery failed past the maximum delivery time
    │   ├── StreamDeliveryInterrupted a consumer's handler failed part-way through a batch
    │   ├── FaultedSubscriptionError  the subscription was faulted
    │   └── GatingRevokedError        a tagged consumer stopped gating (timeout)
    ├── MembershipError
    ├── WouldBlockError               a *_nowait call that would have to wait
    └── InternalError                 a bug in orleanspy: please report it

Errors keep their fields in ``args`` so that they cross process boundaries intact.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = [
    "ActivationFailedError",
    "ConfigurationError",
    "DeadlockError",
    "EventsMissedError",
    "FaultedSubscriptionError",
    "GatingRevokedError",
    "GrainCallError",
    "GrainCallTimeoutError",
    "InconsistentStateError",
    "InternalError",
    "LeaseLostError",
    "MailboxFullError",
    "MembershipError",
    "MessageRejectedError",
    "OrleansPyError",
    "ProtocolError",
    "QueueCacheMissError",
    "RemoteGrainError",
    "ReplayUnavailableError",
    "SerializationError",
    "SiloUnavailableError",
    "StorageCorruptionError",
    "StorageError",
    "StreamDeliveryError",
    "StreamDeliveryInterrupted",
    "StreamError",
    "WouldBlockError",
]


class OrleansPyError(Exception):
    """Root of every orleanspy error."""


class ConfigurationError(OrleansPyError, ValueError):
    """An option or config-file key has a bad value; the message names it and the fix."""


class SerializationError(OrleansPyError, TypeError):
    """A value cannot be serialised with msgpack (the wire and storage format)."""


class GrainCallError(OrleansPyError):
    """A grain call did not produce a result."""


class GrainCallTimeoutError(GrainCallError, TimeoutError):
    """The request's timeout elapsed before a response arrived."""


class MessageRejectedError(GrainCallError):
    """The runtime refused to deliver a request. ``kind`` says why."""

    def __init__(self, message: str, kind: str = "transient") -> None:
        super().__init__(message, kind)

    @property
    def kind(self) -> str:
        return str(self.args[1])

    def __str__(self) -> str:
        return str(self.args[0])


class MailboxFullError(MessageRejectedError):
    """A bounded mailbox refused (policy ``reject``) or evicted (``drop_oldest``) a message."""

    def __init__(self, message: str, kind: str = "mailbox_full") -> None:
        super().__init__(message, kind)


class SiloUnavailableError(GrainCallError):
    """The silo or gateway that should handle the call is not reachable."""


class DeadlockError(GrainCallError):
    """A call cycle would wait on itself. ``chain`` lists the grains in call order."""

    def __init__(self, message: str, chain: tuple[str, ...] = ()) -> None:
        super().__init__(message, tuple(chain))

    @property
    def chain(self) -> tuple[str, ...]:
        return tuple(self.args[1])

    def __str__(self) -> str:
        return str(self.args[0])


class RemoteGrainError(GrainCallError):
    """An exception raised in a grain whose type cannot be imported by the caller."""

    def __init__(self, type_name: str, message: str, remote_traceback: str = "") -> None:
        super().__init__(type_name, message, remote_traceback)

    @property
    def type_name(self) -> str:
        return str(self.args[0])

    @property
    def message(self) -> str:
        return str(self.args[1])

    @property
    def remote_traceback(self) -> str:
        return str(self.args[2])

    def __str__(self) -> str:
        return f"{self.args[0]}: {self.args[1]}"


class ActivationFailedError(OrleansPyError):
    """A grain could not be activated (state read or ``on_activate`` failed)."""


class InconsistentStateError(OrleansPyError):
    """A state write or clear carried a stale etag: another writer got there first."""

    def __init__(
        self, message: str, stored_etag: str | None = None, current_etag: str | None = None
    ) -> None:
        super().__init__(message, stored_etag, current_etag)

    @property
    def stored_etag(self) -> str | None:
        return self.args[1]  # type: ignore[no-any-return]

    @property
    def current_etag(self) -> str | None:
        return self.args[2]  # type: ignore[no-any-return]

    def __str__(self) -> str:
        return str(self.args[0])


class ProtocolError(OrleansPyError):
    """A peer sent a malformed frame, an oversized frame or a bad handshake."""


class StorageError(OrleansPyError):
    """A storage file cannot be used as it is: unreadable, not a database, another schema.
    The message names the file and what to do."""


class StorageCorruptionError(StorageError):
    """A storage file is damaged, or a stored value does not match its checksum (it was
    changed outside orleanspy): the value is not served."""


class StreamError(OrleansPyError):
    """Base of stream errors."""


class QueueCacheMissError(StreamError):
    """A subscription asked for events that are no longer cached or queued.

    ``requested`` is the token asked for; ``low`` and ``high`` the oldest and newest tokens of
    that stream still available (None if none).
    """

    def __init__(self, message: str, requested: Any = None, low: Any = None, high: Any = None):
        super().__init__(message, requested, low, high)

    requested = property(lambda self: self.args[1])
    low = property(lambda self: self.args[2])
    high = property(lambda self: self.args[3])

    def __str__(self) -> str:
        return str(self.args[0])


class ReplayUnavailableError(StreamError):
    """A replay from storage asked for a point its queue no longer keeps (beyond retention),
    or from an adapter that keeps nothing to replay.

    ``requested`` is the token or time (seconds since the epoch) asked for; ``oldest_token``
    and ``oldest_time`` the oldest point still kept from which nothing is missing (None if
    the adapter keeps nothing to replay).
    """

    def __init__(self, message: str, requested: Any = None, oldest_token: Any = None,
                 oldest_time: float | None = None):
        super().__init__(message, requested, oldest_token, oldest_time)

    requested = property(lambda self: self.args[1])
    oldest_token = property(lambda self: self.args[2])
    oldest_time = property(lambda self: self.args[3])

    def __str__(self) -> str:
        return str(self.args[0])

    @classmethod
    def beyond_retention(cls, queue: str, requested: Any, oldest_token: Any,
                         oldest_time: float) -> ReplayUnavailableError:
        """The error for ``requested`` (a token, or a time in seconds since the epoch) that
        queue ``queue`` keeps no longer, naming its oldest point."""
        def when(at: float) -> str:
            return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")

        asked = (f"time {when(float(requested))}" if isinstance(requested, int | float)
                 else f"token {requested}")
        return cls(f"queue {queue} no longer keeps everything from {asked} on (beyond its "
                   f"retention): the oldest point available is token {oldest_token} (enqueued "
                   f"at {when(oldest_time)}); replay from there or later, or raise the "
                   "provider's retention", requested, oldest_token, oldest_time)


class EventsMissedError(StreamError):
    """A lagging subscription (flow control ``max`` or ``tagged``) lost events ``first``..``last``
    (inclusive tokens): they were purged before it reached them. Delivery continues after them."""

    def __init__(self, message: str, first: Any = None, last: Any = None) -> None:
        super().__init__(message, first, last)

    first = property(lambda self: self.args[1])
    last = property(lambda self: self.args[2])

    def __str__(self) -> str:
        return str(self.args[0])


class LeaseLostError(StreamError):
    """A queue's acknowledgement was refused: the queue's lease is no longer this silo's
    (it was paused past its lease, and another silo owns the queue now)."""


class StreamDeliveryError(StreamError):
    """Delivering an event kept failing for longer than the maximum delivery time."""


class StreamDeliveryInterrupted(StreamError):
    """A consumer's ``on_next`` failed on the event at index ``delivered`` of a delivery: the
    events before it were handled; the agent retries from that event."""

    def __init__(self, delivered: int, message: str) -> None:
        super().__init__(delivered, message)

    @property
    def delivered(self) -> int:
        return int(self.args[0])

    def __str__(self) -> str:
        return str(self.args[1])


class FaultedSubscriptionError(StreamError):
    """The subscription was faulted by the failure handler and receives nothing more."""


class GatingRevokedError(StreamError):
    """A tagged subscription stopped gating the cache: it did not advance within the timeout."""


class MembershipError(OrleansPyError):
    """The membership table could not be read or written."""


class WouldBlockError(OrleansPyError):
    """A ``*_nowait`` operation would have had to wait."""


class InternalError(OrleansPyError):
    """A bug in orleanspy. Please report it with the log."""
