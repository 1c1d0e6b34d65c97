"""Concurrent single-event publishes of one stream share a SQLite row (one container per
commit), each event with its own token, each producer's events in order; a batch stays a
row of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from orleanspy import Grain, Silo, SiloOptions, stream_handler
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import SqliteAdapterFactory

WAIT = 10.0
PRODUCERS, EACH = 10, 20
GOT: list[tuple[Any, Any]] = []
DONE: dict[str, asyncio.Event] = {}


class Sink(Grain):
    async def join(self) -> None:
        await self.get_stream_provider("s").get_stream("co", "k").subscribe(self.got)

    @stream_handler
    async def got(self, item: Any, token: Any) -> None:
        GOT.append((item, token))
        if len(GOT) == PRODUCERS * EACH + 3:
            DONE["all"].set()


async def test_concurrent_producers_of_a_stream_share_rows(tmp_path: Path) -> None:
    GOT.clear()
    DONE["all"] = asyncio.Event()
    provider = PersistentStreamProvider(SqliteAdapterFactory(str(tmp_path / "s.db")),
                                        StreamProviderOptions(total_queues=1, pull_period=0.01))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Sink],
                stream_providers={"s": provider})
    await silo.start()
    try:
        await silo.get_grain(Sink, "c").join()
        stream = provider.get_stream("co", "k")
        before = provider.adapter.statistics().containers_committed

        async def produce(p: int) -> None:
            for i in range(EACH):
                await stream.on_next([p, i])  # returns once its row is committed

        await asyncio.gather(*(produce(p) for p in range(PRODUCERS)))
        await stream.on_next_batch([["b", 0], ["b", 1], ["b", 2]])
        async with asyncio.timeout(WAIT):
            await DONE["all"].wait()
        rows = provider.adapter.statistics().containers_committed - before
        assert rows < PRODUCERS * EACH // 2  # shared rows: about one per commit
        tokens = [t for _, t in GOT]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
        for p in range(PRODUCERS):
            assert [i for (q, i), _ in GOT if q == p] == list(range(EACH))
        batch = [t for (q, _), t in GOT if q == "b"]
        assert len({t.sequence for t in batch}) == 1  # the batch is one container
        assert [t.index for t in batch] == [0, 1, 2]
    finally:
        await silo.stop()
