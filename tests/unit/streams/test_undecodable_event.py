"""An event that cannot be decoded (corrupt bytes in the queue) fails the delivery of its
own container only: the consumer's ``on_error`` names its token, the failure policy decides
(the default skips it), and the events before and after it are delivered in order. Reading
the queue goes on: other streams are not held back by it."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.diagnostics import EventsAcknowledged
from orleanspy.errors import StreamDeliveryError
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.provider import implicit_subscription
from orleanspy.streams.tokens import SequenceToken
from orleanspy.testing import EventRecorder, FakeClock

WAIT = 10.0
GOT: dict[str, list[Any]] = {}
ERRORS: list[BaseException] = []
DONE: dict[str, asyncio.Event] = {}


@implicit_subscription("bad")
class Reader(Grain):
    async def on_next(self, item: Any, token: Any) -> None:
        GOT.setdefault(self.key, []).append(item)
        if item == "last":
            DONE.setdefault(self.key, asyncio.Event()).set()

    async def on_error(self, error: BaseException) -> None:
        ERRORS.append(error)


async def _fill(path: Path, streams: dict[str, list[list[Any]]]) -> None:
    adapter = SqliteAdapterFactory(str(path)).create_adapter("s")
    await adapter.open()
    try:
        for key, containers in streams.items():
            for events in containers:
                await adapter.enqueue(QueueId("s", 0), StreamId("bad", key), events)
    finally:
        await adapter.close()


async def test_an_undecodable_container_is_reported_and_the_rest_delivered(
    tmp_path: Path,
) -> None:
    GOT.clear()
    ERRORS.clear()
    DONE.clear()
    path = tmp_path / "q.db"
    await _fill(path, {
        "a": [[0], [1, 2], ["poison"], [3], ["last"]],
        "b": [["b0"], ["last"]],
    })
    # corrupt one container: an array of an invalid byte
    with closing(sqlite3.connect(path)) as conn, conn:
        (seq,) = conn.execute(
            "SELECT seq FROM stream_queue WHERE events = ?",
            (bytes.fromhex("91a6") + b"poison",),
        ).fetchone()
        conn.execute("UPDATE stream_queue SET events = ? WHERE seq = ?",
                     (bytes.fromhex("91c1"), seq))
    options = StreamProviderOptions(total_queues=1, pull_period=0.01, failure="skip")
    provider = PersistentStreamProvider(SqliteAdapterFactory(str(path)), options)
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader],
                stream_providers={"s": provider})
    recorder = EventRecorder(silo.diagnostics)
    await silo.start()
    try:
        async with asyncio.timeout(WAIT):
            for key in ("a", "b"):
                await DONE.setdefault(key, asyncio.Event()).wait()
        assert GOT == {"a": [0, 1, 2, 3, "last"], "b": ["b0", "last"]}
        (error,) = [e for e in ERRORS if isinstance(e, StreamDeliveryError)]
        assert f"token {seq}.0 " in str(error), str(error)
        (agent,) = provider.agents.values()
        # everything is acknowledged, the skipped container too
        await recorder.wait_state(EventsAcknowledged, lambda: agent.acknowledged == 7, WAIT)
        assert _rows(path) == 0
        assert agent.delivered == 7  # the undecodable one is skipped, not delivered
    finally:
        recorder.close()
        await silo.stop()


def _rows(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn, conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM stream_queue").fetchone()
    return int(count)


async def test_under_retry_a_subscription_waits_at_the_container_until_resumed_past_it(
    tmp_path: Path,
) -> None:
    """``failure="retry"``: the delivery parks at the undecodable container (nothing is
    skipped) and ends the moment the subscription is resumed past it; no time passes on the
    silo's clock meanwhile, so nothing polls for the resume."""
    GOT.clear()
    ERRORS.clear()
    DONE.clear()
    path = tmp_path / "q.db"
    await _fill(path, {"a": [[0], ["poison"], [3], ["last"]]})
    with closing(sqlite3.connect(path)) as conn, conn:
        (seq,) = conn.execute(
            "SELECT seq FROM stream_queue WHERE events = ?",
            (bytes.fromhex("91a6") + b"poison",),
        ).fetchone()
        conn.execute("UPDATE stream_queue SET events = ? WHERE seq = ?",
                     (bytes.fromhex("91c1"), seq))
    clock = FakeClock()
    options = StreamProviderOptions(total_queues=1, pull_period=0.01, failure="retry")
    provider = PersistentStreamProvider(SqliteAdapterFactory(str(path)), options)
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Reader],
                stream_providers={"s": provider}, clock=clock)
    await silo.start()
    try:
        (agent,) = provider.agents.values()
        async with asyncio.timeout(WAIT):
            while not any(isinstance(e, StreamDeliveryError) for e in ERRORS):
                await clock.run_for(0.01)  # the agent's first reads
        (sub,) = agent.streams[StreamId("bad", "a")].values()
        parked = sub.task
        assert GOT == {"a": [0]} and parked is not None and not parked.done()
        agent.table.add(replace(sub.record, token=SequenceToken(seq + 1)))
        async with asyncio.timeout(WAIT):
            await parked  # ended by the resume, not by a later look at the clock
            while "last" not in GOT["a"]:
                await clock.run_for(0.01)
        assert GOT == {"a": [0, 3, "last"]}
    finally:
        await silo.stop()
