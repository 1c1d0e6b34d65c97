"""A silo on PostgreSQL (grain state and a stream queue) while the server drops every one of
its connections every 300 ms (``pg_terminate_backend`` of this test's connections only):
nothing acknowledged is lost, an event is delivered twice only within the at-least-once
window, and the same silo serves again once the connections stay up, without a restart."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions, persistent_state
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import PostgresAdapterFactory

from .backends import terminate_backends

pytestmark = pytest.mark.integration

GOT: list[int] = []
EVENTS = 400
LAST: list[asyncio.Event] = []  # set when event EVENTS (sent after the faults) arrives


@dataclass
class Ledger:
    ids: list[int] = field(default_factory=list)


class Account(Grain):
    state = persistent_state(Ledger)

    async def record(self, n: int) -> None:
        self.state.value.ids.append(n)
        await self.state.write()

    async def ids(self) -> list[int]:
        return list(self.state.value.ids)

    async def leave(self) -> None:
        self.deactivate_on_idle()


class Reader(Grain):
    async def join(self) -> None:
        async def on_next(item: Any, token: Any) -> None:
            GOT.append(item)
            if item == EVENTS:
                LAST[0].set()

        await self.get_stream_provider("s").get_stream("ns", "k").subscribe(on_next)


class Writer(Grain):
    async def write(self, item: int) -> None:
        await self.get_stream_provider("s").get_stream("ns", "k").on_next(item)


async def test_a_silo_on_postgres_loses_nothing_acknowledged_while_connections_drop(
    postgres_url: str,
) -> None:
    GOT.clear()
    LAST[:] = [asyncio.Event()]
    provider = PersistentStreamProvider(
        PostgresAdapterFactory(postgres_url),
        StreamProviderOptions(total_queues=1, pull_period=0.02))
    silo = Silo(SiloOptions(gateway_port=None, storage=postgres_url, shutdown_timeout=5.0),
                grains=[Account, Reader, Writer], stream_providers={"s": provider})
    await silo.start()
    stop = asyncio.Event()
    recorded: set[int] = set()
    published: set[int] = set()
    failed_publish: set[int] = set()
    try:
        await silo.get_grain(Reader, "r").join()

        async def record(account: int) -> None:
            for n in range(account * 1000, account * 1000 + 60):
                with contextlib.suppress(Exception):  # a failed call is not acknowledged
                    await silo.get_grain(Account, str(account)).record(n)
                    recorded.add(n)

        async def publish() -> None:
            for n in range(EVENTS):
                while True:
                    try:
                        await silo.get_grain(Writer, "w").write(n)
                        published.add(n)
                        break
                    except Exception:
                        failed_publish.add(n)  # sent again: may arrive twice

        killer = asyncio.create_task(terminate_backends(postgres_url, stop))
        async with asyncio.timeout(120):
            await asyncio.gather(publish(), *(record(a) for a in range(3)))
            stop.set()
            killed = await killer
            assert killed > 0
            # recovered without a restart: the same silo serves, the stream delivers
            await silo.get_grain(Writer, "w").write(EVENTS)
            await LAST[0].wait()
        for account in range(3):
            ref = silo.get_grain(Account, str(account))
            activation = silo.catalog.get(ref.grain_id)
            await ref.leave()  # the next call activates it anew from what is stored
            await activation.wait_deactivated()
            stored = set(await ref.ids())
            mine = {n for n in recorded if n // 1000 == account}
            assert mine <= stored, f"account {account} lost acknowledged writes"
        assert set(GOT) >= published | {EVENTS}
        duplicated = {n for n in GOT if GOT.count(n) > 1}
        assert duplicated <= failed_publish
    finally:
        stop.set()
        await silo.stop()
