"""The subscription manager and the stream operator commands.

``StreamSubscriptionManager`` (Orleans' ``IStreamSubscriptionManager``) lists and removes the
subscriptions of one stream from outside its consumers: explicit ones are the stream's
pub-sub rendezvous's (``orleanspy.streams.pubsub``), implicit ones follow from the grain
classes this silo hosts (``@implicit_subscription``), and where each one is comes from the
pulling agent that delivers the stream, if one does. An implicit subscription cannot be
removed (it follows from a class); removing an explicit one stops its deliveries at once,
and a client's is also forgotten by the client's consumer grain.

``StreamOperations`` answers the control requests of ``orleanspy streams subscriptions``,
``streams unsubscribe`` and ``streams agents`` on the silo port (the silo builder puts them
in the transport's handler table; a tool presents the client secret, docs/security.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any, Final

from orleanspy.errors import StreamError
from orleanspy.runtime.gateway import CLIENT_CONSUMER_TYPE
from orleanspy.streams.ids import StreamId
from orleanspy.streams.pubsub import PULLING_AGENT_TYPE, PubSubRendezvous, SubscriptionRecord

__all__ = ["AGENT_COMMANDS", "StreamOperations", "StreamSubscriptionManager",
           "SubscriptionInfo"]

#: How long a listing waits for the pulling agents' positions (they are left unknown then).
POSITION_TIMEOUT: Final = 2.0
#: The verbs of ``orleanspy streams agents``.
AGENT_COMMANDS: Final = ("start", "status", "stop")


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """One subscription of a stream, as the subscription manager lists it."""

    sub_id: str
    #: the consuming grain, ``type/key`` (a client's is its ``orleanspy.ClientStreamConsumer``)
    consumer: str
    implicit: bool
    filter: str | None = None
    #: its deliveries failed for good; it receives nothing until it is resumed
    faulted: bool = False
    #: the sequence of the next container it is to take (None: caught up, or not known)
    next: int | None = None
    #: queue positions behind the newest event read (None: no agent delivers the stream now)
    lag: int | None = None

    @property
    def kind(self) -> str:
        return "implicit" if self.implicit else "explicit"


class StreamSubscriptionManager:
    """The subscriptions of the streams of provider ``provider``, seen from ``silo``:
    ``provider.subscription_manager()`` in a grain or in the silo's own code."""

    def __init__(self, silo: Any, provider: str) -> None:
        self._silo = silo
        self._provider = provider

    def _rendezvous(self, namespace: str, key: Any) -> Any:
        return self._silo.get_grain(PubSubRendezvous, (self._provider, namespace, key))

    async def subscriptions(self, namespace: str, key: Any) -> list[SubscriptionInfo]:
        """Every subscription of ``(namespace, key)``: the implicit ones (of the grain
        classes this silo hosts) first, then the explicit ones, with where each one is when
        an agent delivers the stream.

        Raises:
            KeyError: this silo has no stream provider of that name.
        """
        provider = self._silo.get_stream_provider(self._provider)
        rendezvous = self._rendezvous(namespace, key)
        records: list[SubscriptionRecord] = [
            *provider.implicit_records(StreamId(namespace, key)),
            *await rendezvous.all_subscriptions(),
        ]
        positions = await self._positions(await rendezvous.producers(), namespace, key)
        out = []
        for r in records:
            where = positions.get(r.sub_id)
            out.append(SubscriptionInfo(
                sub_id=r.sub_id, consumer=f"{r.consumer_type}/{r.consumer_key}",
                implicit=r.implicit, filter=r.filter, faulted=r.faulted,
                next=where[0] if where else None, lag=where[1] if where else None,
            ))
        return out

    async def _positions(self, agents: list[tuple[Any, ...]], namespace: str,
                         key: Any) -> dict[str, list[Any]]:
        async def ask(agent: tuple[Any, ...]) -> dict[str, list[Any]]:
            ref = self._silo.get_grain(PULLING_AGENT_TYPE, agent).with_timeout(
                POSITION_TIMEOUT)
            answer: dict[str, list[Any]] = await ref.invoke("positions", namespace, key)
            return answer

        found: dict[str, list[Any]] = {}
        for answer in await asyncio.gather(*(ask(a) for a in agents), return_exceptions=True):
            if isinstance(answer, dict):  # an agent that stopped or died knows nothing
                found.update(answer)
        return found

    async def remove(self, namespace: str, key: Any, sub_id: str) -> None:
        """Remove the explicit subscription ``sub_id`` of ``(namespace, key)``: its
        deliveries stop (one under way may finish). A client's subscription is also
        forgotten by its client's consumer grain.

        Raises:
            StreamError: ``sub_id`` is implicit, or the stream has no such subscription.
        """
        stream = f"{self._provider}/{namespace}/{key}"
        if sub_id.startswith("implicit:"):
            raise StreamError(
                f"{sub_id} on {stream} is implicit: it follows from the grain class's "
                "@implicit_subscription and cannot be removed (remove the decorator, or "
                "filter its events with @implicit_subscription(..., filter=...))")
        rendezvous = self._rendezvous(namespace, key)
        records: list[SubscriptionRecord] = await rendezvous.all_subscriptions()
        record = next((r for r in records if r.sub_id == sub_id), None)
        if record is None:
            known = ", ".join(r.sub_id for r in records) or "none"
            raise StreamError(f"stream {stream} has no subscription {sub_id!r} "
                              f"(its explicit subscriptions: {known})")
        if record.consumer_type == CLIENT_CONSUMER_TYPE:  # the client's grain forgets it
            consumer = self._silo.get_grain(CLIENT_CONSUMER_TYPE, record.consumer_key)
            await consumer.invoke("subscription_removed", sub_id)
        await rendezvous.remove_subscription(sub_id)  # nothing to do if the consumer did


class StreamOperations:
    """The stream control requests a silo answers for tools (``orleanspy streams ...``)."""

    def __init__(self, silo: Any, cluster: Any) -> None:
        self._silo = silo
        self._cluster = cluster  # its ``me``: this silo's address

    def _manager(self, provider: Any) -> StreamSubscriptionManager:
        if not isinstance(provider, str):
            raise ValueError("the stream provider must be named by a string")
        self._silo.get_stream_provider(provider)  # KeyError naming the configured ones
        return StreamSubscriptionManager(self._silo, provider)

    async def subscriptions(self, provider: Any, namespace: Any, key: Any) -> list[Any]:
        """``orleanspy streams subscriptions``: the stream's subscriptions, as dicts."""
        _check_stream(namespace, key)
        infos = await self._manager(provider).subscriptions(namespace, key)
        return [{**dataclasses.asdict(i), "kind": i.kind} for i in infos]

    async def unsubscribe(self, provider: Any, namespace: Any, key: Any, sub_id: Any) -> str:
        """``orleanspy streams unsubscribe``: remove one explicit subscription."""
        _check_stream(namespace, key)
        if not isinstance(sub_id, str) or not sub_id:
            raise ValueError("the subscription id must be a non-empty string")
        await self._manager(provider).remove(namespace, key, sub_id)
        return sub_id

    async def agents(self, provider: Any, command: Any) -> dict[str, Any]:
        """``orleanspy streams agents stop|start|status``: on this silo."""
        if command not in AGENT_COMMANDS:
            raise ValueError(f"streams agents takes {', '.join(AGENT_COMMANDS)}, "
                             f"not {command!r}")
        self._manager(provider)
        target = self._silo.get_stream_provider(provider)
        if not hasattr(target, "stop_agents"):
            raise ValueError(f"stream provider {provider!r} has no pulling agents")
        if command == "stop":
            await target.stop_agents()
        elif command == "start":
            await target.start_agents()
        return {"silo": str(self._cluster.me), "provider": provider, **target.agents_state()}


def _check_stream(namespace: Any, key: Any) -> None:
    if not isinstance(namespace, str) or not namespace:
        raise ValueError("the stream namespace must be a non-empty string")
    if type(key) not in (str, int, uuid.UUID):
        raise ValueError(f"a stream key is a str, int or UUID, not {type(key).__name__}")
