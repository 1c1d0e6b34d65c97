"""orleanspy: virtual actors (grains) for Python on asyncio, in the spirit of Orleans.

The names here are what an application writes against: grains and grain interfaces, the silo
and the client, publishing and subscribing to streams, and the errors a caller handles.
Everything else lives in its subpackage (``orleanspy.streams`` for providers and adapters,
``orleanspy.testing``, ``orleanspy.errors`` for every error, ``orleanspy.ids``, ...).
"""

from orleanspy.client import ClusterClient
from orleanspy.errors import (
    ActivationFailedError,
    ConfigurationError,
    DeadlockError,
    GrainCallError,
    GrainCallTimeoutError,
    InconsistentStateError,
    MailboxFullError,
    MessageRejectedError,
    OrleansPyError,
    RemoteGrainError,
    SerializationError,
    SiloUnavailableError,
    StreamError,
)
from orleanspy.grains.context import allow_call_chain_reentrancy
from orleanspy.grains.grain import Grain
from orleanspy.grains.grain_interface import GrainInterface
from orleanspy.grains.host import DeactivationReason
from orleanspy.grains.interface import (
    always_interleave,
    call_chain_reentrant,
    cancellable,
    collection_age,
    grain_type,
    mailbox,
    may_interleave,
    one_way,
    placement,
    read_only,
    reentrant,
    stateless_worker,
    stream_handler,
)
from orleanspy.grains.observer import ObserverManager
from orleanspy.grains.reference import GrainRef
from orleanspy.grains.request_context import RequestContext
from orleanspy.grains.state import PersistentState, persistent_state
from orleanspy.hosting.silo import Silo
from orleanspy.messaging.types import serializable
from orleanspy.options import ClientOptions, SiloOptions
from orleanspy.reminders.service import TickStatus
from orleanspy.runtime.call_filters import GrainCall, system_filter
from orleanspy.runtime.timers import GrainTimer
from orleanspy.streams import (
    AsyncStream,
    SequenceToken,
    StreamId,
    StreamSubscriptionHandle,
    implicit_subscription,
)

__version__ = "0.1.0"

__all__ = [
    "ActivationFailedError",
    "AsyncStream",
    "ClientOptions",
    "ClusterClient",
    "ConfigurationError",
    "DeactivationReason",
    "DeadlockError",
    "Grain",
    "GrainCall",
    "GrainCallError",
    "GrainCallTimeoutError",
    "GrainInterface",
    "GrainRef",
    "GrainTimer",
    "InconsistentStateError",
    "MailboxFullError",
    "MessageRejectedError",
    "ObserverManager",
    "OrleansPyError",
    "PersistentState",
    "RemoteGrainError",
    "RequestContext",
    "SequenceToken",
    "SerializationError",
    "Silo",
    "SiloOptions",
    "SiloUnavailableError",
    "StreamError",
    "StreamId",
    "StreamSubscriptionHandle",
    "TickStatus",
    "allow_call_chain_reentrancy",
    "always_interleave",
    "call_chain_reentrant",
    "cancellable",
    "collection_age",
    "grain_type",
    "implicit_subscription",
    "mailbox",
    "may_interleave",
    "one_way",
    "persistent_state",
    "placement",
    "read_only",
    "reentrant",
    "serializable",
    "stateless_worker",
    "stream_handler",
    "system_filter",
]
