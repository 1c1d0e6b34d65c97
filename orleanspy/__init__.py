"""orleanspy: virtual actors (grains) for Python on asyncio, in the spirit of Orleans."""

from orleanspy.client import ClusterClient
from orleanspy.errors import (
    ActivationFailedError,
    ConfigurationError,
    DeadlockError,
    EventsMissedError,
    FaultedSubscriptionError,
    GatingRevokedError,
    GrainCallError,
    GrainCallTimeoutError,
    InconsistentStateError,
    LeaseLostError,
    MailboxFullError,
    MessageRejectedError,
    OrleansPyError,
    QueueCacheMissError,
    RemoteGrainError,
    SerializationError,
    SiloUnavailableError,
    StorageCorruptionError,
    StorageError,
    StreamDeliveryError,
    StreamDeliveryInterrupted,
    StreamError,
)
from orleanspy.grains.context import allow_call_chain_reentrancy
from orleanspy.grains.grain import Grain
from orleanspy.grains.interface import (
    OverflowPolicy,
    PlacementStrategy,
    always_interleave,
    call_chain_reentrant,
    collection_age,
    grain_type,
    mailbox,
    one_way,
    placement,
    read_only,
    reentrant,
    stateless_worker,
)
from orleanspy.grains.ref import GrainRef
from orleanspy.grains.reference import GrainReference
from orleanspy.grains.state import PersistentState, persistent_state
from orleanspy.hosting.silo import Silo
from orleanspy.ids import GrainId, SiloAddress
from orleanspy.messaging.types import serializable
from orleanspy.options import ClientOptions, SiloOptions
from orleanspy.reminders.service import TickStatus
from orleanspy.runtime.activation import DeactivationReason
from orleanspy.runtime.system_target import SystemTarget
from orleanspy.runtime.timers import GrainTimer

__version__ = "0.1.0"

__all__ = [
    "ActivationFailedError",
    "ClientOptions",
    "ClusterClient",
    "ConfigurationError",
    "DeactivationReason",
    "DeadlockError",
    "EventsMissedError",
    "FaultedSubscriptionError",
    "GatingRevokedError",
    "Grain",
    "GrainCallError",
    "GrainCallTimeoutError",
    "GrainId",
    "GrainRef",
    "GrainReference",
    "GrainTimer",
    "InconsistentStateError",
    "LeaseLostError",
    "MailboxFullError",
    "MessageRejectedError",
    "OrleansPyError",
    "OverflowPolicy",
    "PersistentState",
    "PlacementStrategy",
    "QueueCacheMissError",
    "RemoteGrainError",
    "SerializationError",
    "Silo",
    "SiloAddress",
    "SiloOptions",
    "SiloUnavailableError",
    "StorageCorruptionError",
    "StorageError",
    "StreamDeliveryError",
    "StreamDeliveryInterrupted",
    "StreamError",
    "SystemTarget",
    "TickStatus",
    "allow_call_chain_reentrancy",
    "always_interleave",
    "call_chain_reentrant",
    "collection_age",
    "grain_type",
    "mailbox",
    "one_way",
    "persistent_state",
    "placement",
    "read_only",
    "reentrant",
    "serializable",
    "stateless_worker",
]
