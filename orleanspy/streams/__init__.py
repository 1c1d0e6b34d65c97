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

from typing import TYPE_CHECKING

from orleanspy._util.lazy import lazy_exports

if TYPE_CHECKING:
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

#: each exported name and the module it is imported from on first use
_EXPORTS = {
    "AgentStatistics": "orleanspy.streams.pulling.agent",
    "AssignedQueueBalancer": "orleanspy.streams.balancer",
    "AsyncStream": "orleanspy.streams.stream",
    "BatchContainer": "orleanspy.streams.adapters",
    "FilterError": "orleanspy.streams.filters",
    "FlowControl": "orleanspy.streams.options",
    "FlowStrategy": "orleanspy.streams.flow_control",
    "GeneratorAdapterFactory": "orleanspy.streams.adapters",
    "GeneratorOptions": "orleanspy.streams.adapters",
    "HashRingQueueMapper": "orleanspy.streams.mapper",
    "LeaseQueueBalancer": "orleanspy.streams.balancer",
    "MemoryAdapterFactory": "orleanspy.streams.adapters",
    "PersistentStreamProvider": "orleanspy.streams.provider",
    "QueueAdapter": "orleanspy.streams.adapters",
    "QueueAdapterFactory": "orleanspy.streams.adapters",
    "QueueAdapterReceiver": "orleanspy.streams.adapters",
    "QueueBalancer": "orleanspy.streams.balancer",
    "QueueFullError": "orleanspy.streams.adapters",
    "QueueId": "orleanspy.streams.ids",
    "SequenceToken": "orleanspy.streams.tokens",
    "SqliteAdapterFactory": "orleanspy.streams.adapters",
    "StaticQueueBalancer": "orleanspy.streams.balancer",
    "StreamId": "orleanspy.streams.ids",
    "StreamObserver": "orleanspy.streams.stream",
    "StreamProviderOptions": "orleanspy.streams.options",
    "StreamSubscriptionHandle": "orleanspy.streams.stream",
    "effectively_once": "orleanspy.streams.effectively_once",
    "implicit_subscription": "orleanspy.streams.provider",
    "parse_flow_control": "orleanspy.streams.options",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

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
