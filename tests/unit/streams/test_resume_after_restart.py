"""A resume from a token the queue no longer holds is a QueueCacheMissError, also for an agent
that started after the token was acknowledged (a restart or a hand-off): never a silent gap."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.errors import QueueCacheMissError
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.stream import StreamObserver

WAIT = 10.0
GOT: dict[str, list[tuple[Any, Any]]] = {}
ERRORS: dict[str, list[BaseException]] = {}
CHANGED = asyncio.Event()


class Reader(Grain):
    async def join(self, token: Any = None) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k")
        await stream.subscribe(StreamObserver(self._got, on_error=self._error), token)

    async def _got(self, item: Any, token: Any = None) -> None:
        GOT.setdefault(self.key, []).append((item, token))
        CHANGED.set()

    async def _error(self, error: BaseException) -> None:
        ERRORS.setdefault(self.key, []).append(error)
        CHANGED.set()


async def until(predicate: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not predicate():
            CHANGED.clear()
            await CHANGED.wait()


def make_silo(path: Path) -> tuple[Silo, PersistentStreamProvider]:
    provider = PersistentStreamProvider(
        SqliteAdapterFactory(str(path)), StreamProviderOptions(total_queues=1, pull_period=0.01)
    )
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader],
                stream_providers={"s": provider})
    return silo, provider


async def test_an_acknowledged_token_is_a_cache_miss_for_a_new_agent(tmp_path: Path) -> None:
    GOT.clear()
    ERRORS.clear()
    path = tmp_path / "queues.db"
    first, provider = make_silo(path)
    await first.start()
    try:
        await first.get_grain(Reader, "early").join()
        for i in range(3):
            await provider.get_stream("ns", "k").on_next(f"e{i}")
        await until(lambda: len(GOT.get("early", [])) == 3)
    finally:
        await first.stop()  # the events are acknowledged: the queue no longer holds them
    old_token = GOT["early"][0][1]

    second, provider = make_silo(path)
    await second.start()
    try:
        for i in range(3, 5):
            await provider.get_stream("ns", "k").on_next(f"e{i}")
        await second.get_grain(Reader, "gapless").join()  # makes the new agent read e3..
        await provider.get_stream("ns", "k").on_next("e5")
        await until(lambda: any(item == "e5" for item, _ in GOT.get("gapless", [])))
        await second.get_grain(Reader, "late").join(old_token)
        await until(lambda: bool(ERRORS.get("late")))
        miss = ERRORS["late"][0]
        assert isinstance(miss, QueueCacheMissError)
        assert miss.requested == old_token
    finally:
        await second.stop()
