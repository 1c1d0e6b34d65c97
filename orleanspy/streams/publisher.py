"""StreamPublisher: the system target through which a ClusterClient publishes (1).

Each silo hosts one per stream provider, keyed by the provider's name. A client's
``on_next`` is a call to it through the gateway; it enqueues like a grain's ``on_next``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Generic, TypeVar, overload

from orleanspy.grains.interface import client_endpoint, grain_type, reentrant
from orleanspy.grains.request_context import get_context
from orleanspy.runtime.system_target import SystemTarget
from orleanspy.streams.admin import StreamSubscriptionManager, SubscriptionInfo
from orleanspy.streams.ids import StreamId, StreamKey
from orleanspy.streams.stream import (
    ErrorHandler,
    StreamHandler,
    StreamProducer,
    with_context_events,
)
from orleanspy.streams.tokens import SequenceToken

__all__ = ["PUBLISHER_TYPE", "ClientStream", "ClientStreamProvider", "StreamPublisher"]

PUBLISHER_TYPE = "orleanspy.StreamPublisher"

T = TypeVar("T")


@client_endpoint
@reentrant
@grain_type(PUBLISHER_TYPE)
class StreamPublisher(SystemTarget):
    """Publishes events sent by clients (reentrant: enqueues from many clients overlap)."""

    def __init__(self, provider: StreamProducer) -> None:
        self.provider = provider

    async def publish(self, namespace: str, key: Any, events: list[Any]) -> None:
        if events:  # under the client's request context, as a grain's on_next
            await self.provider.enqueue(StreamId(namespace, key),
                                        with_context_events(list(events), get_context()))

    async def subscriptions(self, namespace: str, key: Any) -> list[SubscriptionInfo]:
        """The subscriptions of the stream (a client's ``list_subscriptions``)."""
        return await StreamSubscriptionManager(self.silo, self.provider.name).subscriptions(
            namespace, key)


class ClientStream(Generic[T]):
    """A stream of items ``T`` as a ClusterClient sees it: publish, and subscribe (the
    events come through the gateways, one delivery at a time per subscription)."""

    __slots__ = ("_client", "_provider", "_publisher", "stream_id")

    def __init__(self, publisher: Any, stream_id: StreamId, client: Any = None,
                 provider: str = "") -> None:
        self._publisher = publisher
        self.stream_id = stream_id
        self._client = client
        self._provider = provider

    def __repr__(self) -> str:
        return f"<ClientStream {self.stream_id}>"

    async def on_next(self, item: T) -> None:
        await self._publisher.publish(self.stream_id.namespace, self.stream_id.key, [item])

    async def on_next_batch(self, items: Iterable[T]) -> None:
        await self._publisher.publish(self.stream_id.namespace, self.stream_id.key, list(items))

    async def subscribe(
        self,
        handler: StreamHandler[T],
        token: SequenceToken | None = None,
        *,
        on_error: ErrorHandler | None = None,
        tag: str | None = None,
    ) -> Any:
        """Subscribe this client: every event published after this returns is delivered to
        ``handler`` (``async (item, token)``, a consumer object or a ``StreamObserver``);
        with ``token``, delivery starts there. Returns a ``ClientSubscriptionHandle``."""
        return await self._client._stream_receiver().subscribe(
            self._provider, self.stream_id, handler, token, on_error, tag)

    async def get_subscriptions(self) -> list[Any]:
        """This client's subscriptions to the stream (``ClientSubscriptionHandle``s)."""
        return list(await self._client._stream_receiver().subscriptions(
            self._provider, self.stream_id))


class ClientStreamProvider:
    """``client.get_stream_provider(name)``: streams of that provider, to publish and to
    subscribe."""

    __slots__ = ("_client", "_publisher", "name")

    def __init__(self, client: Any, name: str) -> None:
        self.name = name
        self._client = client
        self._publisher = client.get_grain(PUBLISHER_TYPE, name)

    @overload
    def get_stream(self, namespace: str, key: StreamKey) -> ClientStream[Any]: ...
    @overload
    def get_stream(
        self, namespace: str, key: StreamKey, item_type: type[T]
    ) -> ClientStream[T]: ...
    def get_stream(
        self, namespace: str, key: StreamKey, item_type: type[Any] | None = None
    ) -> ClientStream[Any]:
        """The stream ``(namespace, key)``; ``item_type`` names its items for type checkers
        and lets this client decode them (its module is allowed in the client's codec)."""
        if isinstance(item_type, type) and item_type.__module__ != "builtins":
            self._client.codec.policy.allow_module(item_type.__module__)
        return ClientStream(self._publisher, StreamId(namespace, key), self._client, self.name)

    async def list_subscriptions(self, namespace: str, key: StreamKey) -> list[SubscriptionInfo]:
        """Every subscription of the stream ``(namespace, key)``, of any consumer
        (``orleanspy.streams.admin.SubscriptionInfo``: id, consumer, kind, filter, where it
        is)."""
        return list(await self._publisher.subscriptions(namespace, key))

    async def remove_subscription(self, namespace: str, key: StreamKey, sub_id: str) -> None:
        """Remove one of this client's own subscriptions of the stream; its deliveries stop.

        Raises:
            PermissionError: ``sub_id`` is not this client's (a grain removes any explicit
                subscription with ``provider.subscription_manager()``, an operator with
                ``orleanspy streams unsubscribe``).
            KeyError: this client has no such subscription.
        """
        if not sub_id.startswith(f"{self._client.client_id}/"):
            raise PermissionError(
                f"subscription {sub_id!r} of {namespace}/{key} is not this client's: a "
                "client removes only its own; an operator removes any with `orleanspy "
                "streams unsubscribe`")
        await self._client._stream_receiver().unsubscribe(sub_id)
