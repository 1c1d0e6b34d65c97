"""Randomized soak: subscriptions, publishing, agent restarts and queue moves interleaved.

Two clustered silos share a SQLite queue file and one grain storage. Each round does one
random thing: publish a few events, subscribe (a new or an existing consumer grain), unsubscribe,
restart one pulling agent (a graceful hand-off to a new agent on the same silo), or move queues
(a silo leaves, a new one joins and the queues are balanced again). At the end every live
subscription must have every event published on its stream after its subscribe returned, in
publishing order (first arrivals), and each of them once: a graceful hand-off delivers what it
cached and acknowledges it, so the next owner re-delivers nothing. The crash variant kills a
silo once (no hand-off): then every event arrives at least once, first arrivals in order.

``ORLEANSPY_SOAK_ROUNDS`` (default 300) sets the rounds, ``ORLEANSPY_SOAK_SEED`` the seed (a
failure prints the seed that reproduces it).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.testing import TestCluster

ROUNDS = int(os.environ.get("ORLEANSPY_SOAK_ROUNDS", "300"))
SEED = int(os.environ.get("ORLEANSPY_SOAK_SEED", str(random.randrange(1 << 30))))
KEYS = ["k0", "k1", "k2", "k3", "k4", "k5"]
QUEUES = 4
MOVE_EVERY = 100  # rounds between queue moves (each one takes a balancing round or two)
FINAL_WAIT = 60.0

#: sub_id -> the (key, n) events its handler received, in arrival order
RECEIVED: dict[str, list[tuple[str, int]]] = defaultdict(list)
#: consumer key -> {stream key: sub_id}: what a reactivated consumer resumes in on_activate
SUBSCRIBED: dict[str, dict[str, str]] = defaultdict(dict)
PROGRESS: dict[str, asyncio.Event] = {}


class SoakConsumer(Grain):
    async def on_activate(self) -> None:
        for key in SUBSCRIBED.get(self.key, {}):
            for handle in await self._stream(key).get_subscriptions():
                await handle.resume(self._handler(handle.sub_id))

    def _stream(self, key: str) -> Any:
        return self.get_stream_provider("s").get_stream("soak", key)

    def _handler(self, sub_id: str) -> Any:
        async def on_next(item: list[Any], token: Any) -> None:
            RECEIVED[sub_id].append((item[0], item[1]))
            event = PROGRESS.get("any")
            if event is not None:
                event.set()
        return on_next

    async def subscribe(self, key: str) -> str | None:
        if key in SUBSCRIBED[self.key]:
            return None
        stream = self._stream(key)
        handle = await stream.subscribe(self._on_next_placeholder)
        await handle.resume(self._handler(handle.sub_id))
        SUBSCRIBED[self.key][key] = handle.sub_id
        return str(handle.sub_id)

    async def _on_next_placeholder(self, item: Any, token: Any) -> None:
        raise RuntimeError("replaced by resume before any delivery is acknowledged")

    async def unsubscribe(self, key: str) -> None:
        SUBSCRIBED[self.key].pop(key, None)
        for handle in await self._stream(key).get_subscriptions():
            await handle.unsubscribe()


def providers_for(path: Path) -> Any:
    def make() -> dict[str, Any]:
        return {"s": PersistentStreamProvider(
            SqliteAdapterFactory(str(path)),
            StreamProviderOptions(total_queues=QUEUES, pull_period=0.01, balance_settle_time=0.05,
                                  lease_duration=3.0, lease_retry_period=0.05,
                                  delivery_backoff=0.01, max_delivery_backoff=0.1),
        )}
    return make


@pytest.mark.parametrize("crash", [False, True], ids=["graceful", "crash"])
async def test_streams_soak(tmp_path: Path, crash: bool) -> None:
    rng = random.Random(SEED)
    killed_queues = 0
    RECEIVED.clear()
    SUBSCRIBED.clear()
    PROGRESS.clear()
    cluster = TestCluster([SoakConsumer], silos=2, stream_providers=providers_for(
        tmp_path / "streams.db"), gateway=False)
    await cluster.start()
    published: dict[str, list[int]] = {k: [] for k in KEYS}
    start: dict[str, tuple[str, int]] = {}  # sub_id -> (key, events published before it)
    live: dict[tuple[str, str], str] = {}  # (consumer, key) -> sub_id
    log: list[str] = []
    try:
        for round_ in range(ROUNDS):
            silo = rng.choice(cluster.silos)
            roll = rng.random()
            if round_ and round_ % MOVE_EVERY == 0:
                log.append(f"{round_}: {'kill' if crash else 'move'}")
                if crash:
                    victim = cluster.silos[-1]
                    killed_queues += len(victim.stream_providers["s"].manager.agents)
                    await cluster.kill(victim)
                else:
                    await cluster.stop(cluster.silos[-1])
                await cluster.add_silo()
            elif roll < 0.5:
                key = rng.choice(KEYS)
                stream = silo.stream_providers["s"].get_stream("soak", key)
                for _ in range(rng.randint(1, 3)):
                    n = len(published[key])
                    published[key].append(n)
                    await stream.on_next([key, n])
                log.append(f"{round_}: publish {key} -> {len(published[key])}")
            elif roll < 0.7:
                consumer, key = f"c{rng.randrange(8)}", rng.choice(KEYS)
                if (consumer, key) in live:
                    continue
                before = len(published[key])
                sub_id = await silo.get_grain(SoakConsumer, consumer).subscribe(key)
                assert sub_id is not None
                live[(consumer, key)] = sub_id
                start[sub_id] = (key, before)
                log.append(f"{round_}: subscribe {consumer} {key} at {before}")
            elif roll < 0.75 and live:
                consumer, key = rng.choice(sorted(live))
                del live[(consumer, key)]
                await silo.get_grain(SoakConsumer, consumer).unsubscribe(key)
                log.append(f"{round_}: unsubscribe {consumer} {key}")
            else:
                manager = silo.stream_providers["s"].manager
                owned = sorted(manager.agents, key=str)
                if owned:
                    queue = rng.choice(owned)
                    if await manager.restart_agent(queue):
                        log.append(f"{round_}: restart {queue} on {silo.address}")

        # Every live subscription gets everything from its start.
        def missing() -> dict[str, int]:
            out = {}
            for sub_id in live.values():
                key, before = start[sub_id]
                got = {n for k, n in RECEIVED[sub_id] if k == key}
                lost = [n for n in published[key][before:] if n not in got]
                if lost:
                    out[sub_id] = len(lost)
            return out

        PROGRESS["any"] = progress = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FINAL_WAIT
        while missing() and loop.time() < deadline:
            progress.clear()
            try:
                async with asyncio.timeout(1.0):
                    await progress.wait()
            except TimeoutError:
                pass
        assert not missing(), f"seed {SEED}: events missing {missing()}\n" + "\n".join(log[-40:])
        checked = 0
        for sub_id in live.values():
            key, before = start[sub_id]
            got = [n for k, n in RECEIVED[sub_id] if k == key]
            checked += len(published[key]) - before
            firsts = list(dict.fromkeys(got))
            expected = published[key][before:]
            assert [n for n in firsts if n >= before] == expected, (
                f"seed {SEED}: {sub_id} on {key} out of order: {firsts}")
            dupes = len(got) - len(firsts)
            assert crash or dupes == 0, (
                f"seed {SEED}: {sub_id} on {key} got {dupes} duplicates: {got}\n"
                + "\n".join(log))
        assert not crash or killed_queues, "the killed silos pulled no queue: nothing tested"
        assert checked >= ROUNDS // 2, f"only {checked} deliveries checked"
    finally:
        await cluster.stop()
