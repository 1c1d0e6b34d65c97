"""orleanspy: virtual actors (grains) for Python on asyncio, in the spirit of Orleans.

The names here are what an application writes against: grains and grain interfaces, the silo
and the client, publishing and subscribing to streams, and the errors a caller handles.
Everything else lives in its subpackage (``orleanspy.streams`` for providers and adapters,
``orleanspy.testing``, ``orleanspy.errors`` for every error, ``orleanspy.ids``, ...).
"""

from typing import TYPE_CHECKING

from orleanspy._util.lazy import lazy_exports

if TYPE_CHECKING:
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

#: each exported name and the module it is imported from on first use
_EXPORTS = {
    "ActivationFailedError": "orleanspy.errors",
    "AsyncStream": "orleanspy.streams",
    "ClientOptions": "orleanspy.options",
    "ClusterClient": "orleanspy.client",
    "ConfigurationError": "orleanspy.errors",
    "DeactivationReason": "orleanspy.grains.host",
    "DeadlockError": "orleanspy.errors",
    "Grain": "orleanspy.grains.grain",
    "GrainCall": "orleanspy.runtime.call_filters",
    "GrainCallError": "orleanspy.errors",
    "GrainCallTimeoutError": "orleanspy.errors",
    "GrainInterface": "orleanspy.grains.grain_interface",
    "GrainRef": "orleanspy.grains.reference",
    "GrainTimer": "orleanspy.runtime.timers",
    "InconsistentStateError": "orleanspy.errors",
    "MailboxFullError": "orleanspy.errors",
    "MessageRejectedError": "orleanspy.errors",
    "ObserverManager": "orleanspy.grains.observer",
    "OrleansPyError": "orleanspy.errors",
    "PersistentState": "orleanspy.grains.state",
    "RemoteGrainError": "orleanspy.errors",
    "RequestContext": "orleanspy.grains.request_context",
    "SequenceToken": "orleanspy.streams",
    "SerializationError": "orleanspy.errors",
    "Silo": "orleanspy.hosting.silo",
    "SiloOptions": "orleanspy.options",
    "SiloUnavailableError": "orleanspy.errors",
    "StreamError": "orleanspy.errors",
    "StreamId": "orleanspy.streams",
    "StreamSubscriptionHandle": "orleanspy.streams",
    "TickStatus": "orleanspy.reminders.service",
    "allow_call_chain_reentrancy": "orleanspy.grains.context",
    "always_interleave": "orleanspy.grains.interface",
    "call_chain_reentrant": "orleanspy.grains.interface",
    "cancellable": "orleanspy.grains.interface",
    "collection_age": "orleanspy.grains.interface",
    "grain_type": "orleanspy.grains.interface",
    "implicit_subscription": "orleanspy.streams",
    "mailbox": "orleanspy.grains.interface",
    "may_interleave": "orleanspy.grains.interface",
    "one_way": "orleanspy.grains.interface",
    "persistent_state": "orleanspy.grains.state",
    "placement": "orleanspy.grains.interface",
    "read_only": "orleanspy.grains.interface",
    "reentrant": "orleanspy.grains.interface",
    "serializable": "orleanspy.messaging.types",
    "stateless_worker": "orleanspy.grains.interface",
    "stream_handler": "orleanspy.grains.interface",
    "system_filter": "orleanspy.runtime.call_filters",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

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
