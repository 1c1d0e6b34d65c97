"""ClientStreamConsumer: the consumer grain that stands for a ClusterClient's subscriptions.

A client cannot host a grain, so each client that subscribes gets one of these, keyed by its
client id. To the pulling agents it is an ordinary consumer: a subscription's events are one
awaited call of ``__orleanspy_stream_deliver__`` at a time, retried, failed and faulted as
for any grain. The grain hands each delivery to its client, which long-polls it through any
gateway (``poll``), runs the client's handler and answers with ``ack``; the delivery call
returns (or raises the handler's error) only then. Routing by grain id makes a gateway
failover invisible here: the client's next poll reaches this grain, wherever it lives,
through another gateway.

The grain stores its client's subscriptions (``pubsub`` storage), so a reactivation after a
silo's loss knows them. While the client is away (no poll for ``AWAY_AFTER`` seconds) a
delivery fails at once and the agent backs off and retries; once the client has been away
for its providers' ``client_timeout`` the grain removes its subscriptions.

Only a connection that proved the id that is the grain's key may call it (checked by the
gateway, ``runtime/gateway.py``), and one client holds at most its provider's
``max_client_subscriptions`` subscriptions.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from orleanspy.errors import StreamDeliveryInterrupted, StreamError
from orleanspy.grains.grain import REMOVED_KEPT, Grain
from orleanspy.grains.interface import client_endpoint, grain_type, reentrant, runtime_grain
from orleanspy.grains.state import persistent_state
from orleanspy.logging import get_logger
from orleanspy.runtime.activation_state import ActivationState
from orleanspy.runtime.gateway import CLIENT_CONSUMER_TYPE
from orleanspy.streams.pubsub import PubSubRendezvous, SubscriptionRecord
from orleanspy.streams.tokens import SequenceToken

__all__ = [
    "AWAY_AFTER", "ClientStreamConsumer", "ClientSubscriptionsState", "release_polls",
]

#: a client that has not polled for this long is away: deliveries fail at once
AWAY_AFTER: Final = 5.0
#: longest a poll waits for a delivery (the client's response timeout must exceed it)
MAX_POLL_WAIT: Final = 20.0
#: how long a delivery waits for the client's answer before it fails (and is retried)
ACK_TIMEOUT: Final = 20.0
_MAX_PART = 64

log = get_logger(__name__)


@dataclass
class ClientSubscriptionsState:
    #: sub_id -> [provider, namespace, key]
    subscriptions: dict[str, list[Any]] = field(default_factory=dict)
    #: the subscriptions removed last, oldest first (at most ``REMOVED_KEPT``): a delivery
    #: that reaches one of them later is dropped (delivered), not failed, also after this
    #: grain deactivated (the removal of its last subscription deactivates it)
    removed: list[str] = field(default_factory=list)


class _Pending:
    __slots__ = ("events", "future", "handed", "id", "sub_id")

    def __init__(self, id_: int, sub_id: str, events: bytes, future: asyncio.Future[Any]) -> None:
        self.id = id_
        self.sub_id = sub_id
        self.events = events
        self.future = future
        self.handed = False


@client_endpoint
@runtime_grain
@reentrant
@grain_type(CLIENT_CONSUMER_TYPE)
class ClientStreamConsumer(Grain):
    """Keyed by the client's id. Public methods are called by that client only."""

    state = persistent_state(ClientSubscriptionsState, storage="pubsub")

    async def on_activate(self) -> None:
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._errors: list[list[Any]] = []  # [sub_id, packed error] for the client's on_error
        self._waiter: asyncio.Future[bool] | None = None  # the poll waiting for a delivery
        self._wait = 0.0  # how long the last poll may wait
        self._seen = self._now()  # a fresh activation gives its client a full grace period
        self._expiry: Any = None
        self._arm()

    def _now(self) -> float:
        return float(self._orleanspy_activation.silo.clock.monotonic())

    def _away_for(self) -> float:
        """How long the client has been gone: since its last call, beyond the time its last
        poll may wait (a poll still waiting may be orphaned by a lost connection, so it does
        not count as presence)."""
        return max(0.0, self._now() - self._seen - self._wait)

    # -- the client's side ------------------------------------------------------------------
    async def subscribe(
        self, provider: str, namespace: str, key: Any, part: str,
        token: SequenceToken | None = None, tag: str | None = None,
    ) -> str:
        """Subscribe this client to ``(namespace, key)`` of ``provider``; ``part`` (chosen by
        the client, so that it knows the subscription before its first event) names it."""
        self._touch()
        if not isinstance(part, str) or not part or len(part) > _MAX_PART:
            raise ValueError(f"subscription name must be 1..{_MAX_PART} characters")
        cap = self._provider(provider).options.max_client_subscriptions
        subs = self.state.value.subscriptions
        held = sum(1 for where in subs.values() if where[0] == provider)
        if held >= cap:
            raise ValueError(f"client {self.key} holds {held} subscriptions to streams of "
                             f"{provider!r}, the most one client may (the provider's "
                             "max_client_subscriptions): unsubscribe some first")
        sub_id = f"{self.key}/{part}"
        record = SubscriptionRecord(
            sub_id=sub_id, namespace=namespace, key=key, consumer_type=CLIENT_CONSUMER_TYPE,
            consumer_key=self.key, token=token, tag=tag,
        )
        subs[sub_id] = [provider, namespace, key]
        try:
            await self.state.write()
        except BaseException:
            subs.pop(sub_id, None)
            raise
        try:
            await self._rendezvous(provider, namespace, key).add_subscription(record)
        except BaseException:
            subs.pop(sub_id, None)
            await self.state.write()
            raise
        self._arm()
        return sub_id

    async def resume(self, sub_id: str, token: SequenceToken | None = None) -> bool:
        """Rewind (``token``) or re-attach one of this client's subscriptions."""
        self._touch()
        where = self._own(sub_id)
        return bool(await self._rendezvous(*where).update_subscription(sub_id, token))

    async def unsubscribe(self, sub_id: str) -> None:
        self._touch()
        where = self._own(sub_id)
        await self._rendezvous(*where).remove_subscription(sub_id)
        await self._forget([sub_id])

    async def subscriptions(self, provider: str, namespace: str, key: Any) -> list[str]:
        """This client's subscriptions to the stream."""
        self._touch()
        return [s for s, where in self.state.value.subscriptions.items()
                if where == [provider, namespace, key]]

    async def poll(self, wait: float, handling: list[int] | None = None) -> list[list[Any]]:
        """The deliveries not handed to the client yet (``[id, sub_id, packed events]``) and
        stream errors (``[0, sub_id, packed error]``); waits up to ``wait`` seconds for one.

        ``handling``: the deliveries the client is running now. A delivery handed out
        earlier and not among them was lost on the way (a gateway failed): it is handed out
        again. A newer poll ends an older one that still waits (its answer would go to a
        connection the client gave up).
        """
        wait = max(0.0, min(float(wait), MAX_POLL_WAIT))
        self._wait = wait
        self._touch()
        keep = set(handling or ())
        for p in self._pending.values():
            if p.handed and p.id not in keep:
                p.handed = False
        self._wake(False)
        out = self._take()
        if out or wait <= 0:
            return out
        if self._leaving():
            return []
        # A deactivation must not be held up by a poll that waits: the silo's stop
        # (``release_polls``) and this grain's own ``deactivate_on_idle`` end the wait, and
        # the client polls elsewhere.
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        current = True
        try:
            async with self._orleanspy_activation.silo.clock.timeout(wait):
                current = await waiter
        except TimeoutError:
            pass
        finally:
            if self._waiter is waiter:
                self._waiter = None
        return self._take() if current and not self._leaving() else []

    def _leaving(self) -> bool:
        """Deactivating, or the silo stops (its drain waits for running requests)."""
        act = self._orleanspy_activation
        return bool(act.state >= ActivationState.DEACTIVATING or act.silo.stopping)

    def _wake(self, current: bool = True) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(current)

    async def leave(self) -> None:
        """The client closes: it is away from now on (its subscriptions last
        ``client_timeout`` more), and a poll still waiting answers at once."""
        self._touch()
        self._wait = 0.0
        self._wake(False)

    async def ack(self, delivery: int, ok: bool, delivered: int = 0, error: str = "") -> None:
        """The client handled delivery ``delivery`` (``ok``), or its handler failed after
        ``delivered`` events with ``error``."""
        self._touch()
        pending = self._pending.pop(int(delivery), None)
        if pending is None or pending.future.done():
            return
        if ok:
            pending.future.set_result(None)
        elif delivered > 0:
            pending.future.set_exception(StreamDeliveryInterrupted(int(delivered), str(error)))
        else:
            pending.future.set_exception(StreamError(f"the client's handler failed: {error}"))

    # -- the pulling agents' side -------------------------------------------------------------
    async def __orleanspy_stream_deliver__(
        self, sub_id: str, namespace: str, key: Any, events: list[Any],
        handshake: str | None = None,
    ) -> None:
        if sub_id not in self.state.value.subscriptions:
            if sub_id in self.state.value.removed:
                return None  # removed while this delivery was on its way: dropped
            raise StreamError(f"client {self.key} has no subscription {sub_id}")
        if self._away_for() > AWAY_AFTER:
            raise StreamError(f"client {self.key} is not connected (it will be retried)")
        silo = self._orleanspy_activation.silo
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending = _Pending(next(self._ids), sub_id, silo.codec.packb(events), future)
        self._pending[pending.id] = pending
        self._wake()
        try:
            async with silo.clock.timeout(ACK_TIMEOUT):
                await future
        except TimeoutError:
            raise StreamError(
                f"client {self.key} did not answer delivery {pending.id} within "
                f"{ACK_TIMEOUT:g} s (it will be retried)"
            ) from None
        finally:
            self._pending.pop(pending.id, None)

    async def subscription_removed(self, sub_id: str) -> None:
        """The subscription manager (a grain's or an operator's) removes ``sub_id``: remove
        it from its stream and forget it. Unlike ``unsubscribe`` it says nothing of the
        client's presence, and an id this client does not hold is no error."""
        where = self.state.value.subscriptions.get(sub_id)
        if where is not None:
            await self._rendezvous(*where).remove_subscription(sub_id)
            await self._forget([sub_id])

    async def __orleanspy_stream_error__(self, sub_id: str, error: BaseException) -> None:
        if self._away_for() > AWAY_AFTER:
            log.info("client_stream_error_dropped", client=self.key, subscription=sub_id,
                     error=repr(error))
            return
        self._errors.append([0, sub_id, self._orleanspy_activation.silo.codec.packb(error)])
        self._wake()

    # -- housekeeping -------------------------------------------------------------------------
    def _take(self) -> list[list[Any]]:
        out: list[list[Any]] = self._errors
        self._errors = []
        for p in self._pending.values():
            if not p.handed:
                p.handed = True
                out.append([p.id, p.sub_id, p.events])
        return out

    def _touch(self) -> None:
        self._seen = self._now()

    def _provider(self, name: str) -> Any:
        providers = self._orleanspy_activation.silo.stream_providers
        if name not in providers:
            raise KeyError(f"no stream provider {name!r} on this silo "
                           f"(configured: {sorted(providers) or 'none'})")
        return providers[name]

    def _own(self, sub_id: str) -> list[Any]:
        where = self.state.value.subscriptions.get(sub_id)
        if where is None:
            raise KeyError(f"client {self.key} has no subscription {sub_id}")
        return where

    def _rendezvous(self, provider: str, namespace: str, key: Any) -> Any:
        return self.get_grain(PubSubRendezvous, (provider, namespace, key))

    def _timeout(self) -> float:
        providers = self._orleanspy_activation.silo.stream_providers
        times = [providers[p].options.client_timeout
                 for p, _, _ in self.state.value.subscriptions.values() if p in providers]
        return max(times, default=60.0)

    def _arm(self) -> None:
        """Check for expiry every quarter of the timeout while there are subscriptions."""
        if self._expiry is not None or not self.state.value.subscriptions:
            return
        every = max(0.05, self._timeout() / 4)
        self._expiry = self.register_timer(self._check_expiry, every, every, interleave=True,
                                           keep_alive=True, name="client-expiry")

    async def _check_expiry(self) -> None:
        if not self.state.value.subscriptions:
            self._disarm()
            return
        if self._away_for() <= self._timeout():
            return
        subs = list(self.state.value.subscriptions.items())
        log.info("client_subscriptions_expired", client=self.key, subscriptions=len(subs))
        gone = []
        for sub_id, where in subs:
            try:
                await self._rendezvous(*where).remove_subscription(sub_id)
                gone.append(sub_id)
            except Exception as exc:  # retried at the next check
                log.warning("client_unsubscribe_failed", client=self.key, subscription=sub_id,
                            error=repr(exc))
        await self._forget(gone)

    async def _forget(self, sub_ids: list[str]) -> None:
        subs = self.state.value.subscriptions
        removed = self.state.value.removed
        for sub_id in sub_ids:
            subs.pop(sub_id, None)
            if sub_id not in removed:
                removed.append(sub_id)
            del removed[:-REMOVED_KEPT]
            # Its deliveries on their way are dropped, not failed: a failure would be
            # retried, or at a queue's hand-off leave the events to be delivered again to
            # every other subscriber of the stream.
            for p in [p for p in self._pending.values() if p.sub_id == sub_id]:
                if not p.future.done():
                    p.future.set_result(None)
        await self.state.write()
        if not subs:
            self._disarm()
            self._wake(False)  # a poll that waits answers at once: this activation goes
            self.deactivate_on_idle()

    def _disarm(self) -> None:
        if self._expiry is not None:
            self._expiry.dispose()
            self._expiry = None


def release_polls(catalog: Iterable[Any]) -> None:
    """The silo stops: every client's poll that waits answers at once, so the drain of
    running requests is not held up by it (the client polls another gateway)."""
    for act in catalog:
        grain = act.grain
        if isinstance(grain, ClientStreamConsumer) and getattr(grain, "_waiter", None):
            grain._wake(False)
