"""A ClusterClient subscribed to a stream that a grain produces keeps getting every event,
in order, while the silo behind its consumer's gateway is killed (kill -9).

Two real silo processes share SQLite membership, grain storage (so the client's
subscriptions and the stream's rendezvous survive the silo) and the SQLite stream queue. The
client knows both gateways. After the kill its polls go through the survivor, the client's
consumer grain is activated there again, the dead silo's queues are owned again, and the
events they had not acknowledged are delivered again: at least once, nothing lost, and the
first arrival of each event in publishing order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient
from orleanspy.ids import GrainId
from orleanspy.options import ClientOptions
from orleanspy.runtime.gateway import CLIENT_CONSUMER_TYPE

from .silo_process import SiloLauncher, SiloProcess, poll_until
from .test_cluster_streams import APP, CLUSTER, FAST, wait_balanced, write_config

pytestmark = pytest.mark.integration

KEY = "f1"
RECOVERY = 60.0  # kill -9 to the last event delivered, on a loaded 2-core machine


async def start_silo(launcher: SiloLauncher, config: Path) -> SiloProcess:
    return await launcher.start(
        "--membership", "sqlite:membership.db", "--cluster-id", CLUSTER,
        "--storage", "sqlite:grains.db", "--reminders", "memory", "--config", str(config),
        *FAST, app=APP,
    )


async def produce(client: ClusterClient, start: int, count: int, deadline: float) -> None:
    """Publish ``start .. start + count - 1`` through the producer grain, retrying a call
    that failed (at least once: a retried batch may publish some numbers twice)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            await client.get_grain("FeedProducer", KEY).produce(start, count)
            return
        except Exception:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


def first_arrivals(got: list[int]) -> list[int]:
    seen: set[int] = set()
    out = []
    for n in got:
        if n not in seen:
            seen.add(n)
            out.append(n)
    return out


async def test_a_client_subscription_survives_the_loss_of_its_gateways_silo(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    config = write_config(silo_launcher.data_dir)
    silos = [await start_silo(silo_launcher, config) for _ in range(2)]
    await wait_balanced(silo_launcher.data_dir, silos, timeout=20)
    client = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, gateways=tuple(s.gateway for s in silos), response_timeout=30.0,
        reconnect_delay=0.2, reconnect_delay_max=1.0,
    ))
    got: list[int] = []
    arrived = asyncio.Event()

    async def on_next(item: int, token: Any) -> None:
        got.append(item)
        arrived.set()

    loop = asyncio.get_running_loop()
    try:
        await client.connect()
        stream = client.get_stream_provider("s").get_stream("feed", KEY)
        await stream.subscribe(on_next)
        await produce(client, 0, 50, loop.time() + 30)
        await poll_until(lambda: asyncio.sleep(0, len(set(got))), lambda n: n >= 50,
                         timeout=30, interval=0.05)
        assert first_arrivals(got) == list(range(50))

        # The silo whose gateway carries the client's polls and acknowledgements.
        route = client._pool.slots
        consumer = GrainId(CLIENT_CONSUMER_TYPE, client.client_id)
        conn = route[consumer._hash % len(route)]
        assert conn is not None
        victim = next(s for s in silos if s.gateway == conn.address)
        survivor = next(s for s in silos if s is not victim)

        await produce(client, 50, 50, loop.time() + 30)  # some still undelivered at the kill
        await victim.kill()
        await produce(client, 100, 50, loop.time() + RECOVERY)
        await poll_until(lambda: asyncio.sleep(0, len(set(got))), lambda n: n >= 150,
                         timeout=RECOVERY, interval=0.1)
        assert first_arrivals(got) == list(range(150))
        assert client.connected_gateways == [survivor.gateway]
    finally:
        await client.close()
