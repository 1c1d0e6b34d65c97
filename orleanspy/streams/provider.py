"""PersistentStreamProvider: wires adapter, mapper, balancer, pulling agents and pub-sub.

Producer side (1): ``stream.on_next`` → ``adapter.enqueue`` on the stream's queue.
Consumer side (5): ``stream.subscribe`` records a subscription with the stream's pub-sub
rendezvous; the queue's pulling agent delivers to the subscribing grain.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from orleanspy.logging import get_logger
from orleanspy.streams.adapters.base import QueueAdapter, QueueAdapterFactory
from orleanspy.streams.balancer import QueueBalancer, StaticQueueBalancer
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.mapper import HashRingQueueMapper
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.pubsub import SubscriptionRecord
from orleanspy.streams.tokens import SequenceToken

if TYPE_CHECKING:
    from orleanspy.runtime.silo import Silo
    from orleanspy.streams.agent import PullingAgent

__all__ = ["PersistentStreamProvider", "implicit_namespaces", "implicit_subscription"]

_IMPLICIT_ATTR = "_orleanspy_implicit_namespaces"

FailureHandler = Callable[[SubscriptionRecord, StreamId, SequenceToken, BaseException], None]


def implicit_subscription(*namespaces: str) -> Callable[[type], type]:
    """Class decorator: the grain whose key is a stream's key receives every event of the
    stream in these namespaces, without subscribing. It implements
    ``async def on_next(self, item, token)`` (and optionally ``on_error(self, exc)``)."""
    if not namespaces or not all(isinstance(n, str) and n for n in namespaces):
        raise ValueError("implicit_subscription() needs one or more non-empty namespaces")

    def deco(cls: type) -> type:
        if not callable(getattr(cls, "on_next", None)):
            raise TypeError(
                f"{cls.__name__} subscribes implicitly to {namespaces} but has no "
                "'async def on_next(self, item, token)'"
            )
        setattr(cls, _IMPLICIT_ATTR, tuple(namespaces))
        return cls

    return deco


def implicit_namespaces(cls: type) -> tuple[str, ...]:
    return tuple(getattr(cls, _IMPLICIT_ATTR, ()))


class PersistentStreamProvider:
    """A named stream provider on a silo: ``Silo(stream_providers={"events": provider})``."""

    def __init__(
        self,
        adapter_factory: QueueAdapterFactory,
        options: StreamProviderOptions | None = None,
        *,
        balancer: QueueBalancer | None = None,
        failure_handler: FailureHandler | None = None,
    ) -> None:
        self.options = options or StreamProviderOptions()
        self.adapter_factory = adapter_factory
        self.balancer = balancer or StaticQueueBalancer()
        self.failure_handler = failure_handler
        self._queue_of: dict[StreamId, QueueId] = {}  # the mapper's answers, remembered
        self.name = ""
        self.adapter: QueueAdapter = None  # type: ignore[assignment]
        self.mapper: HashRingQueueMapper = None  # type: ignore[assignment]
        self.silo: Silo = None  # type: ignore[assignment]
        self.agents: dict[QueueId, PullingAgent] = {}
        self.delivery_failures = 0
        self.log: Any = None

    # -- lifecycle (the silo calls these) -------------------------------------------------------
    def bind(self, name: str, silo: Silo) -> None:
        self.name = name
        self.silo = silo
        self.mapper = HashRingQueueMapper(self.options.total_queues, name)
        self.adapter = self.adapter_factory.create_adapter(name)
        self.log = get_logger(__name__, provider=name, silo=silo.name)

    async def start(self) -> None:
        """Open the adapter and start an agent for every queue the balancer gives us."""
        from orleanspy.streams.agent import PullingAgent
        from orleanspy.streams.publisher import StreamPublisher

        await self.adapter.open()
        self.silo.add_system_target(StreamPublisher(self), self.name)
        for queue in self.balancer.my_queues(self.mapper.all_queues(), self.silo.name):
            agent = PullingAgent(self, queue)
            self.silo.add_system_target(agent, (self.name, queue.index))
            await agent.start()
            self.agents[queue] = agent
        self.log.info("stream_provider_started", queues=len(self.agents))

    async def stop(self) -> None:
        for agent in self.agents.values():
            await agent.stop()
        self.agents.clear()
        await self.adapter.close()

    # -- producing ----------------------------------------------------------------------------
    def stream(self, namespace: str, key: Any) -> Any:
        from orleanspy.streams.stream import AsyncStream

        return AsyncStream(self, StreamId(namespace, key))

    get_stream = stream

    async def enqueue(self, stream_id: StreamId, events: list[Any]) -> None:
        queues = self._queue_of
        queue = queues.get(stream_id)
        if queue is None:
            if len(queues) >= 65536:
                queues.clear()  # a bound, not an LRU: re-hashing is cheap, just not free
            queue = queues[stream_id] = self.mapper.queue_for(stream_id)
        await self.adapter.enqueue(queue, stream_id, events)

    # -- consuming ----------------------------------------------------------------------------
    def implicit_records(self, stream_id: StreamId) -> list[SubscriptionRecord]:
        records = []
        for type_name, info in self.silo.registry.items():
            if stream_id.namespace in implicit_namespaces(info.cls):
                records.append(SubscriptionRecord(
                    sub_id=f"implicit:{type_name}", namespace=stream_id.namespace,
                    key=stream_id.key, consumer_type=type_name, consumer_key=stream_id.key,
                ))
        return records

    @staticmethod
    def new_subscription_id() -> str:
        return uuid.uuid4().hex

    def on_delivery_failure(
        self, record: SubscriptionRecord, stream_id: StreamId, token: SequenceToken,
        exc: BaseException,
    ) -> None:
        self.delivery_failures += 1
        if self.failure_handler is not None:
            try:
                self.failure_handler(record, stream_id, token, exc)
            except Exception as err:
                self.log.error("stream_failure_handler_failed", error=repr(err))

    def statistics(self) -> list[Any]:
        """One ``AgentStatistics`` per pulling agent of this silo."""
        return [agent.snapshot() for agent in self.agents.values()]
