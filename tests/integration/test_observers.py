"""Observers across real silo processes: a grain on one silo calls back an object in a
client, and keeps doing so after the silo whose gateway the client's observer calls came
through stopped: the client polls through its other gateway."""

from __future__ import annotations

from typing import Any

import pytest

from orleanspy import ClusterClient
from orleanspy.grains.observer import OBSERVER_HUB_TYPE
from orleanspy.ids import GrainId
from orleanspy.options import ClientOptions

from .silo_process import SiloLauncher, poll_until
from .test_cluster import CLUSTER, start_cluster

pytestmark = pytest.mark.integration

APP = "tests.integration.calls_app"


class Listener:
    def __init__(self) -> None:
        self.heard: list[str] = []

    def receive(self, text: str) -> None:  # a plain method works as well as a coroutine
        self.heard.append(text)

    async def heard_so_far(self) -> list[str]:
        return list(self.heard)


async def test_an_observer_is_called_after_its_client_moved_to_another_gateway(
        silo_launcher: SiloLauncher) -> None:
    silos = await start_cluster(silo_launcher, n=2, app=APP)
    client = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, gateways=tuple(s.gateway for s in silos), response_timeout=30.0,
        reconnect_delay=0.2, reconnect_delay_max=1.0))
    await client.connect()
    try:
        # the gateway the client's observer calls come through, and a room on the other silo
        conn = await client._route(GrainId(OBSERVER_HUB_TYPE, client.client_id))
        through = next(s for s in silos if s.gateway == conn.address)
        survivor = next(s for s in silos if s is not through)
        name = survivor.silo_address.partition("@")[0]
        key = None
        for i in range(64):
            if await client.get_grain("Room", f"room-{i}").where() == name:
                key = f"room-{i}"
                break
        assert key is not None
        room: Any = client.get_grain("Room", key)
        listener = Listener()
        assert await room.join(client.create_observer(listener)) == 1
        assert await room.say("before") == 1
        await poll_until(listener.heard_so_far, lambda h: h == ["before"], timeout=10)

        assert await through.terminate() == 0
        assert await room.say("after") == 1
        heard = await poll_until(listener.heard_so_far, lambda h: len(h) >= 2, timeout=30,
                                 interval=0.1)
        assert heard == ["before", "after"]
        assert client.connected_gateways == [survivor.gateway]
    finally:
        await client.close()
