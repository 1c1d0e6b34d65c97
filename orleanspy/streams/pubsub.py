"""Pub-sub: the persistent rendezvous of a stream's subscriptions and producing agents.

One ``PubSubRendezvous`` grain per (provider, stream). Its state — the explicit
subscriptions and the pulling agents that currently deliver the stream — is persistent, so a
collected or restarted rendezvous still knows whom to tell.

Why a subscriber never misses an event published after ``subscribe`` returned: the
rendezvous is turn-based, so a subscription and an agent's registration are ordered. If the
agent registered first, ``add_subscription`` awaits ``agent.add_subscriber`` before it
returns, and the agent opens the new cursor behind everything it has read so far; whatever
is published afterwards is read later, so it is delivered. If the subscription came first,
the agent's ``register_producer`` returns it. Orleans tells the agent without waiting
(its issue #9501); here the agent never calls the rendezvous from inside one of its own
turns, so waiting cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orleanspy.errors import InconsistentStateError, MessageRejectedError, SiloUnavailableError
from orleanspy.grains.grain import Grain
from orleanspy.grains.interface import grain_type, runtime_grain
from orleanspy.grains.state import persistent_state
from orleanspy.logging import get_logger
from orleanspy.streams.tokens import SequenceToken

__all__ = ["PubSubRendezvous", "PubSubState", "SubscriptionRecord"]

log = get_logger(__name__)


@dataclass
class SubscriptionRecord:
    """An explicit (or implicit) subscription: which grain consumes which stream, from where."""

    sub_id: str
    namespace: str
    key: Any
    consumer_type: str
    consumer_key: Any
    token: SequenceToken | None = None
    tag: str | None = None
    faulted: bool = False
    #: a filter expression (``orleanspy.streams.filters``): only matching events are delivered
    filter: str | None = None
    #: set by a resume from ``token``: the deliveries of this attachment carry it, and the
    #: consumer refuses a delivery that does not (one that was on its way before the resume)
    handshake: str | None = None

    @property
    def implicit(self) -> bool:
        return self.sub_id.startswith("implicit:")


@dataclass
class PubSubState:
    subscriptions: dict[str, SubscriptionRecord] = field(default_factory=dict)
    producers: list[tuple[Any, ...]] = field(default_factory=list)


@runtime_grain
@grain_type("orleanspy.PubSubRendezvous")
class PubSubRendezvous(Grain):
    """Keyed by (provider, namespace, stream key)."""

    state = persistent_state(PubSubState, storage="pubsub")

    async def _store(self, change: Callable[[PubSubState], Callable[[], None] | None]) -> bool:
        """Apply ``change`` to the state and store it; ``change`` returns its undo, or None
        when there is nothing to change (then nothing is written and this returns False).

        A change that is not stored never takes effect (nor is it told to the agents): a
        failed write undoes it in memory and raises. A write that finds the stored state
        moved on (during a membership change a second activation of this rendezvous can run
        for a moment, until the directory deactivates one) reads the state again and applies
        the change to what is stored: each change is a function of the state and its
        arguments, so applying it again is what one activation would have done."""
        for attempt in range(STALE_WRITE_ATTEMPTS):
            undo = change(self.state.value)
            if undo is None:
                return False
            try:
                await self.state.write()
                return True
            except InconsistentStateError:
                undo()
                if attempt == STALE_WRITE_ATTEMPTS - 1:
                    raise
                log.info("pubsub_state_reread", grain=str(self.grain_id), attempt=attempt + 1)
                await self.state.read()
            except BaseException:
                undo()
                raise
        raise AssertionError("unreachable")

    async def register_producer(self, agent: tuple[Any, ...]) -> list[SubscriptionRecord]:
        agent = _agent_key(agent)

        def change(state: PubSubState) -> Callable[[], None] | None:
            if agent in state.producers:
                return None
            state.producers.append(agent)
            return lambda: state.producers.remove(agent)

        await self._store(change)
        return [r for r in self.state.value.subscriptions.values() if not r.faulted]

    async def unregister_producer(self, agent: tuple[Any, ...]) -> None:
        agent = _agent_key(agent)

        def change(state: PubSubState) -> Callable[[], None] | None:
            if agent not in state.producers:
                return None
            at = state.producers.index(agent)
            del state.producers[at]
            return lambda: state.producers.insert(at, agent)

        await self._store(change)

    async def add_subscription(self, record: SubscriptionRecord) -> None:
        def change(state: PubSubState) -> Callable[[], None]:
            subscriptions = state.subscriptions
            previous = subscriptions.get(record.sub_id)
            subscriptions[record.sub_id] = record

            def undo() -> None:
                if previous is None:
                    subscriptions.pop(record.sub_id, None)
                else:
                    subscriptions[record.sub_id] = previous

            return undo

        await self._store(change)
        await self._tell_agents("add_subscriber", record)

    async def update_subscription(self, sub_id: str, token: SequenceToken | None,
                                  handshake: str | None = None) -> bool:
        def change(state: PubSubState) -> Callable[[], None] | None:
            record = state.subscriptions.get(sub_id)
            if record is None:
                return None
            before = (record.token, record.faulted, record.handshake)
            record.token = token
            record.faulted = False
            record.handshake = handshake

            def undo() -> None:
                record.token, record.faulted, record.handshake = before

            return undo

        if not await self._store(change):
            return False
        await self._tell_agents("add_subscriber", self.state.value.subscriptions[sub_id])
        return True

    async def remove_subscription(self, sub_id: str) -> bool:
        removed: SubscriptionRecord | None = None

        def change(state: PubSubState) -> Callable[[], None] | None:
            nonlocal removed
            removed = record = state.subscriptions.pop(sub_id, None)
            if record is None:
                return None
            return lambda: state.subscriptions.__setitem__(sub_id, record)

        if not await self._store(change) or removed is None:
            return False
        await self._tell_agents("remove_subscriber", removed)
        return True

    async def resume_implicit(self, record: SubscriptionRecord) -> None:
        """An implicit subscription resumes (from ``record.token``, a checkpoint): tell the
        agents that deliver the stream. Nothing is stored: implicit subscriptions follow from
        the consumer's class, and an agent that registers the stream later starts them at its
        first unacknowledged event, which is never after an acknowledged checkpoint."""
        if not record.implicit:
            raise ValueError(f"subscription {record.sub_id} is not implicit")
        await self._tell_agents("add_subscriber", record)

    async def fault_subscription(self, sub_id: str) -> None:
        def change(state: PubSubState) -> Callable[[], None] | None:
            record = state.subscriptions.get(sub_id)
            if record is None or record.faulted:
                return None
            record.faulted = True
            return lambda: setattr(record, "faulted", False)

        await self._store(change)

    async def subscriptions_of(
        self, consumer_type: str, consumer_key: Any
    ) -> list[SubscriptionRecord]:
        return [
            r for r in self.state.value.subscriptions.values()
            if r.consumer_type == consumer_type and r.consumer_key == consumer_key
        ]

    async def all_subscriptions(self) -> list[SubscriptionRecord]:
        """Every explicit subscription of the stream, faulted ones included (the
        subscription manager, ``orleanspy.streams.admin``)."""
        return list(self.state.value.subscriptions.values())

    async def producers(self) -> list[tuple[Any, ...]]:
        return list(self.state.value.producers)

    async def _tell_agents(self, method: str, record: SubscriptionRecord) -> None:
        gone = []
        for agent in list(self.state.value.producers):
            ref = self.silo.get_grain(PULLING_AGENT_TYPE, agent)
            try:
                await ref.invoke(method, record)
            except SiloUnavailableError:
                gone.append(agent)  # its silo died: the queue's next owner registers anew
            except MessageRejectedError as exc:
                if exc.kind != "unknown_system_target":
                    raise
                gone.append(agent)  # that agent stopped: it re-registers when it restarts
        if gone:
            def change(state: PubSubState) -> Callable[[], None] | None:
                before = list(state.producers)
                state.producers[:] = [a for a in before if a not in gone]
                if len(state.producers) == len(before):
                    return None
                return lambda: state.producers.__setitem__(slice(None), before)

            await self._store(change)


#: How many times a change is applied to a state that another activation of the same
#: rendezvous moved on (each time read again) before the conflict is raised to the caller.
STALE_WRITE_ATTEMPTS = 3

#: The grain type of the pulling agents (``orleanspy.streams.pulling.agent``), which the
#: rendezvous calls by name: the agents register here, so this module sits below them.
PULLING_AGENT_TYPE = "orleanspy.PullingAgent"


def _agent_key(agent: Any) -> tuple[Any, ...]:
    """A pulling agent's system-target key: (provider, queue index, silo address text); the
    silo lets a rendezvous on another silo of a cluster reach it."""
    return (str(agent[0]), int(agent[1]), *(str(a) for a in agent[2:]))
