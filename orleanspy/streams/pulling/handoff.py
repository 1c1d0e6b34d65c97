"""The hand-off (3): a pulling agent that stops passes its queue on without delivering
anything twice.

It stops reading, lets the delivery loops deliver what is cached (for up to
``handoff_timeout``), acknowledges what every subscription has been given, shuts its
receiver and unregisters from its streams' rendezvous. A delivery that fails while it drains
is abandoned at once: its events from the container the consumer failed on stay
unacknowledged and the queue's next owner delivers them (at least once).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

from orleanspy.streams.pulling.registry import StreamTable
from orleanspy.streams.subscription import Subscription

if TYPE_CHECKING:
    from orleanspy._util.clock import Clock
    from orleanspy.streams.adapters.base import BatchContainer, QueueAdapterReceiver
    from orleanspy.streams.cache import QueueCache
    from orleanspy.streams.options import StreamProviderOptions
    from orleanspy.streams.spill import Spiller

__all__ = ["HandoffHost", "hand_off"]


class HandoffHost(Protocol):
    """What the hand-off needs of its pulling agent."""

    clock: Clock
    options: StreamProviderOptions
    table: StreamTable
    cache: QueueCache
    spiller: Spiller
    receiver: QueueAdapterReceiver | None
    log: Any

    @property
    def key_tuple(self) -> tuple[str, int, str]: ...

    def restart(self, sub: Subscription) -> None: ...

    def stopped(self) -> None: ...

    async def ack(self) -> None: ...

    async def acknowledge(self, containers: list[BatchContainer]) -> None: ...


async def hand_off(agent: HandoffHost) -> None:
    """Stop ``agent`` gracefully (``agent.draining`` is set and its read cycle is over)."""
    await _drain(agent)
    agent.stopped()
    tasks = [s.task for s in agent.table.subscriptions() if s.task]
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    await agent.ack()
    await _ack_handed_off(agent)
    if agent.receiver is not None:
        await agent.receiver.shutdown()
    table = agent.table
    for sid in list(table.streams):
        try:
            await table.rendezvous(sid).unregister_producer(agent.key_tuple)
        except Exception as exc:
            agent.log.warning("stream_unregister_failed", stream=str(sid), error=repr(exc))
    table.streams.clear()


async def _drain(agent: HandoffHost) -> None:
    """Let the delivery loops deliver what is cached, until every subscription that is
    served from the cache has caught up (and no stream is registering), or
    ``handoff_timeout``."""
    clock = agent.clock
    table = agent.table
    deadline = clock.monotonic() + agent.options.handoff_timeout
    while True:
        await agent.ack()
        subs = [s for s in table.subscriptions() if s.spilled_from is None and not s.abandoned]
        for sub in subs:
            agent.restart(sub)  # no-op without cached events (or a task already)
        waits: list[asyncio.Future[Any]] = [s.task for s in subs if s.task is not None]
        if (not waits and not table.registering) or clock.monotonic() >= deadline:
            return
        registered = None
        if table.registering:  # a registration ends: its subscriptions attach
            table.registered.clear()
            registered = asyncio.ensure_future(table.registered.wait())
            waits.append(registered)
        try:
            async with clock.timeout_at(deadline):
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            return
        finally:
            if registered is not None:
                registered.cancel()


async def _ack_handed_off(agent: HandoffHost) -> None:
    """After the deliveries finished, also acknowledge the cached containers that every
    subscription of their stream has been given. The purge frees whole buckets only, so
    without this the queue's next owner would deliver them again.

    Conservative: only streams with subscriptions; nothing while a subscription is spilled,
    a stream is registering, or a cursor does not gate (max / tagged flow control); there
    the next owner re-delivers (at-least-once).
    """
    if agent.receiver is None or agent.spiller.busy or agent.table.registering:
        return
    done = agent.cache.delivered_to_all()
    if done:
        await agent.acknowledge(done)
