"""Persistent streams: producers → durable queues → pulling agents → bounded cache → consumers.

Configure a provider on the silo, publish from grains or clients, subscribe from grains::

    provider = PersistentStreamProvider(SqliteAdapterFactory("streams.db"))
    silo = Silo(options, grains=[...], stream_providers={"events": provider})

    stream = self.get_stream_provider("events").get_stream("clicks", user_id)
    await stream.on_next(click)                       # producer
    handle = await stream.subscribe(self.on_click)    # consumer (inside a grain; on_click
                                                      # is marked @stream_handler)

See docs/streams.md.
"""

from orleanspy.streams.adapters import (
    BatchContainer,
    GeneratorAdapterFactory,
    GeneratorOptions,
    MemoryAdapterFactory,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
    QueueFullError,
    SqliteAdapterFactory,
)
from orleanspy.streams.balancer import (
    AssignedQueueBalancer,
    LeaseQueueBalancer,
    QueueBalancer,
    StaticQueueBalancer,
)
from orleanspy.streams.effectively_once import effectively_once
from orleanspy.streams.filters import FilterError
from orleanspy.streams.flow_control import FlowStrategy
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.options import FlowControl, StreamProviderOptions, parse_flow_control
from orleanspy.streams.provider import PersistentStreamProvider, implicit_subscription
from orleanspy.streams.pulling.agent import AgentStatistics
from orleanspy.streams.stream import AsyncStream, StreamObserver, StreamSubscriptionHandle
from orleanspy.streams.tokens import SequenceToken

__all__ = [
    "AgentStatistics",
    "AssignedQueueBalancer",
    "AsyncStream",
    "BatchContainer",
    "FilterError",
    "FlowControl",
    "FlowStrategy",
    "GeneratorAdapterFactory",
    "GeneratorOptions",
    "HashRingQueueMapper",
    "LeaseQueueBalancer",
    "MemoryAdapterFactory",
    "PersistentStreamProvider",
    "QueueAdapter",
    "QueueAdapterFactory",
    "QueueAdapterReceiver",
    "QueueBalancer",
    "QueueFullError",
    "QueueId",
    "SequenceToken",
    "SqliteAdapterFactory",
    "StaticQueueBalancer",
    "StreamId",
    "StreamObserver",
    "StreamProviderOptions",
    "StreamSubscriptionHandle",
    "effectively_once",
    "implicit_subscription",
    "parse_flow_control",
]
