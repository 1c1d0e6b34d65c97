"""A delivery on its way to a subscription that its grain removes meanwhile is dropped.

Consumer ``gone`` holds a turn; an event is published, and its delivery to ``gone`` waits
behind that turn; the turn unsubscribes. When the delivery runs, the grain has no handler
for the subscription any more: it drops the events (the grain removed the subscription
itself) instead of failing the call. A failure would be retried, and if the queue is handed
off meanwhile, abandoned unacknowledged, so that the next owner delivers the event again
to ``stay``, the other subscriber of the stream, which had handled it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.diagnostics import DeliveryFailed
from orleanspy.errors import StreamError
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.delivery import DELIVER
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import EventRecorder

WAIT = 30.0

GOT: dict[str, list[Any]] = defaultdict(list)
HOLDING = asyncio.Event()
RELEASE = asyncio.Event()


class Follower(Grain):
    def _stream(self) -> Any:
        return self.get_stream_provider("s").get_stream("uf", "k")

    async def follow(self) -> None:
        async def on_next(item: Any, token: Any) -> None:
            GOT[self.key].append(item)
        await self._stream().subscribe(on_next)

    async def subscription_ids(self) -> list[str]:
        return [h.sub_id for h in await self._stream().get_subscriptions()]

    async def hold_then_unsubscribe(self) -> None:
        HOLDING.set()
        await RELEASE.wait()
        for handle in await self._stream().get_subscriptions():
            await handle.unsubscribe()


class Publisher(Grain):
    async def publish(self, item: Any) -> None:
        await self.get_stream_provider("s").get_stream("uf", "k").on_next(item)


async def _until(done: Any) -> None:
    """Poll the agent's state (it has no event to await), bounded by ``WAIT``."""
    async with asyncio.timeout(WAIT):
        while not done():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def test_a_delivery_to_a_subscription_removed_meanwhile_is_dropped(
    tmp_path: Path,
) -> None:
    GOT.clear()
    HOLDING.clear()
    RELEASE.clear()
    factory = SqliteAdapterFactory(str(tmp_path / "queues.db"))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
                grains=[Follower, Publisher],
                stream_providers={"s": PersistentStreamProvider(factory, StreamProviderOptions(
                    total_queues=1, pull_period=0.01, delivery_backoff=0.05,
                    max_delivery_backoff=0.1))})
    await silo.start()
    try:
        provider = silo.stream_providers["s"]
        (queue,) = provider.agents
        await silo.get_grain(Follower, "stay").follow()
        gone = silo.get_grain(Follower, "gone")
        await gone.follow()
        with EventRecorder(silo.diagnostics) as rec:
            holding = asyncio.ensure_future(gone.hold_then_unsubscribe())
            async with asyncio.timeout(WAIT):
                await HOLDING.wait()
            await silo.get_grain(Publisher, "p").publish(0)
            await _until(lambda: GOT["stay"] == [0])
            # the delivery to ``gone`` is under way, queued behind the held turn
            agent = provider.agents[queue]
            await _until(lambda: any(s.task is not None and s.consumer.grain_id.key == "gone"
                                     for s in agent.table.subscriptions()))
            restart = asyncio.ensure_future(provider.manager.restart_agent(queue))
            RELEASE.set()
            async with asyncio.timeout(WAIT):
                await holding
                assert await restart
            await silo.get_grain(Publisher, "p").publish(1)
            await _until(lambda: GOT["stay"][-1:] == [1])
        assert GOT["stay"] == [0, 1]  # the new agent did not deliver 0 again
        assert GOT["gone"] == []
        assert rec.of(DeliveryFailed) == []
    finally:
        await silo.stop()


async def test_a_late_delivery_is_dropped_only_for_a_subscription_the_grain_removed(
    tmp_path: Path,
) -> None:
    """The grain tells a late delivery (a subscription it removed) from one it cannot
    handle (a subscription it never resumed), which fails as before."""
    GOT.clear()
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
                grains=[Follower, Publisher],
                stream_providers={"s": PersistentStreamProvider(
                    SqliteAdapterFactory(str(tmp_path / "queues.db")),
                    StreamProviderOptions(total_queues=1))})
    await silo.start()
    try:
        gone = silo.get_grain(Follower, "gone")
        await gone.follow()
        subs = await gone.subscription_ids()
        RELEASE.set()
        await gone.hold_then_unsubscribe()
        token = SequenceToken(1, 0)
        dropped = await gone.invoke(DELIVER, subs[0], "uf", "k", [(5, token)])
        assert dropped is None and GOT["gone"] == []
        with pytest.raises(StreamError, match="no handler for subscription"):
            await gone.invoke(DELIVER, "never-resumed", "uf", "k", [(6, token)])
    finally:
        await silo.stop()
