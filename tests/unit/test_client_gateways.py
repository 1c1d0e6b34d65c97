"""ClusterClient with several gateways: spreading calls, failover, reconnection.

Three lone silos in this process, each with its own gateway on a fixed free port (so a
stopped gateway can come back on the same address). A lone silo hosts every grain called
through its gateway, so ``Where.where()`` tells which gateway carried a call.
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from typing import Any

import pytest

from orleanspy import ClusterClient, Grain, Silo, SiloUnavailableError, one_way
from orleanspy.errors import ConfigurationError
from orleanspy.options import ClientOptions
from orleanspy.testing import FakeClock

WAIT = 5.0
KEYS = [f"k{i}" for i in range(60)]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Where(Grain):
    def __init__(self) -> None:
        self.notes: list[int] = []

    async def where(self) -> str:
        return str(self.silo.options.gateway_port)

    async def slow(self) -> str:
        self.silo.probe.record(("slow", self.key))
        await self.silo.probe.gate("slow").wait()
        return "done"

    @one_way
    async def note(self, n: int) -> None:
        self.notes.append(n)

    async def read_notes(self) -> list[int]:
        return list(self.notes)


async def silos_with_gateways(make_silo: Any, n: int = 3) -> list[Silo]:
    return [
        await make_silo(Where, gateway_port=free_port(), cluster_id="gw", port=0)
        for _ in range(n)
    ]


def name(silo: Silo) -> str:
    """What ``Where.where()`` answers for a grain on this silo (lone silos share a name)."""
    return str(silo.options.gateway_port)


def address(silo: Silo) -> str:
    return f"127.0.0.1:{silo.gateway.port}"


def client_of(silos: list[Silo], clock: FakeClock | None = None,
              **options: Any) -> ClusterClient:
    options.setdefault("reconnect_delay", 0.05)
    options.setdefault("reconnect_delay_max", 0.2)
    options.setdefault("response_timeout", WAIT)
    return ClusterClient(ClientOptions(
        cluster_id="gw", gateways=tuple(address(s) for s in silos), **options
    ), clock=clock)


async def kill_gateway(silo: Silo) -> None:
    """The gateway goes away as if its process died: connections drop, new ones refused."""
    await silo.gateway.stop_accepting()
    await silo.gateway.close()


async def where_all(client: ClusterClient) -> dict[str, str]:
    return {k: await client.get_grain(Where, k).where() for k in KEYS}


def test_client_options_accept_one_or_several_gateways():
    assert ClientOptions(gateways="h:1").gateways == ("h:1",)  # type: ignore[arg-type]
    assert ClientOptions(gateways=["h:1", "h:2"]).gateways == ("h:1", "h:2")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="gateway_count"):
        ClientOptions(gateway_count=0)
    with pytest.raises(ConfigurationError, match="reconnect_delay_max"):
        ClientOptions(reconnect_delay=2.0, reconnect_delay_max=1.0)
    with pytest.raises(ConfigurationError, match="host:port"):
        ClientOptions(gateways=("h:1", "nope"))
    with pytest.raises(ConfigurationError, match="sqlite:PATH"):
        ClientOptions(membership="etcd://x")
    assert ClientOptions(membership="redis://x:6379/0").membership == "redis://x:6379/0"
    assert ClientOptions(membership="postgres://x/db").membership == "postgres://x/db"


async def test_missing_membership_file_leaves_the_listed_gateways(make_silo, tmp_path):
    silos = await silos_with_gateways(make_silo, 1)
    async with client_of(silos, membership=f"sqlite:{tmp_path / 'none.db'}") as client:
        assert client.connected_gateways == [address(silos[0])]
    assert not (tmp_path / "none.db").exists()


async def test_client_connects_to_every_gateway_and_spreads_grains_over_them(make_silo):
    silos = await silos_with_gateways(make_silo)
    async with client_of(silos) as client:
        assert sorted(client.connected_gateways) == sorted(address(s) for s in silos)
        assert [s.statistics().gateway_connections for s in silos] == [1, 1, 1]

        first = await where_all(client)
        spread = Counter(first.values())
        assert set(spread) == {name(s) for s in silos}, spread
        assert min(spread.values()) >= 5, spread
        assert await where_all(client) == first  # a grain keeps its gateway


async def test_one_way_calls_of_one_grain_keep_their_order(make_silo):
    silos = await silos_with_gateways(make_silo)
    async with client_of(silos) as client:
        ref = client.get_grain(Where, "ordered")
        for i in range(200):
            await ref.note(i)
        # one gateway, one connection: the call after the notes finds all of them, in order
        assert await ref.read_notes() == list(range(200))


async def test_lost_gateway_fails_its_pending_calls_and_new_calls_use_the_others(
    make_silo, probe
):
    silos = await silos_with_gateways(make_silo)
    async with client_of(silos) as client:
        first = await where_all(client)
        victim = silos[1]
        key = next(k for k, silo in first.items() if silo == name(victim))
        stuck = asyncio.create_task(client.get_grain(Where, key).slow())
        await probe.wait_logged("slow", key)  # the request is running

        await kill_gateway(victim)
        with pytest.raises(SiloUnavailableError, match="was lost"):
            async with asyncio.timeout(1.0):  # at once, not after the response timeout
                await stuck

        after = await where_all(client)
        assert name(victim) not in after.values()
        moved = [k for k in KEYS if first[k] != after[k]]
        assert moved and all(first[k] == name(victim) for k in moved)  # only its grains
        assert address(victim) not in client.connected_gateways
        assert len(client.connected_gateways) == 2


async def test_gateway_that_comes_back_is_reconnected(make_silo, probe):
    silos = await silos_with_gateways(make_silo)
    clock = FakeClock()
    async with client_of(silos, clock) as client:
        first = await where_all(client)
        victim = silos[0]
        await kill_gateway(victim)
        await client.wait_gateways(lambda live: len(live) == 2, WAIT)
        await clock.run_for(1.0)  # several refused reconnects, backing off
        assert len(client.connected_gateways) == 2

        await victim.gateway.start()  # listens; clients are taken once open
        await victim.gateway.open()
        async with asyncio.timeout(WAIT):
            while len(client.connected_gateways) < 3:
                await clock.run_for(0.2)  # the longest back-off: an attempt is under way
        assert await where_all(client) == first  # its grains route to it again


async def test_lost_gateway_is_retried_only_after_its_back_off(make_silo, probe):
    silos = await silos_with_gateways(make_silo, 2)
    clock = FakeClock()
    async with client_of(silos, clock, reconnect_delay=1.0, reconnect_delay_max=4.0) as client:
        victim = silos[0]
        await kill_gateway(victim)
        await client.wait_gateways(lambda live: len(live) == 1, WAIT)
        await victim.gateway.start()  # listens; clients are taken once open
        await victim.gateway.open()

        await clock.run_for(0.7)  # the first back-off is 1.0 s +-25 %: no attempt yet
        assert len(client.connected_gateways) == 1
        await clock.run_for(0.6)
        await client.wait_gateways(lambda live: len(live) == 2, WAIT)


async def test_client_call_times_out_on_the_client_clock(make_silo, probe):
    silos = await silos_with_gateways(make_silo, 1)
    clock = FakeClock()
    async with client_of(silos, clock, response_timeout=30.0) as client:
        call = asyncio.create_task(client.get_grain(Where, "t").slow())
        await probe.wait_logged("slow", "t")  # the request is running
        await clock.run_for(29.0)
        assert not call.done()
        await clock.run_for(1.0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(WAIT):
                await call
        probe.open("slow")


async def test_connect_skips_a_dead_gateway_and_fails_when_none_answers(make_silo):
    silos = await silos_with_gateways(make_silo, 2)
    dead = f"127.0.0.1:{free_port()}"
    options = ClientOptions(cluster_id="gw", gateways=(dead, *map(address, silos)))
    async with ClusterClient(options) as client:
        assert sorted(client.connected_gateways) == sorted(map(address, silos))
        assert len(set((await where_all(client)).values())) == 2

    nobody = ClusterClient(ClientOptions(cluster_id="gw", gateways=(dead,)))
    with pytest.raises(SiloUnavailableError, match="cannot connect to any gateway"):
        async with asyncio.timeout(WAIT):
            await nobody.connect()
    await nobody.close()


async def test_first_call_connects_lazily_and_fails_when_every_gateway_is_gone(make_silo, probe):
    silos = await silos_with_gateways(make_silo, 2)
    client = client_of(silos)
    try:
        assert await client.get_grain(Where, "lazy").where() in {name(s) for s in silos}
        for silo in silos:
            await kill_gateway(silo)
        await client.wait_gateways(lambda live: not live, WAIT)
        with pytest.raises(SiloUnavailableError, match="cannot connect to any gateway"):
            async with asyncio.timeout(WAIT):
                await client.get_grain(Where, "lazy").where()
        await silos[1].gateway.start()
        await silos[1].gateway.open()
        async with asyncio.timeout(WAIT):
            assert await client.get_grain(Where, "lazy").where() == name(silos[1])
    finally:
        await client.close()


async def test_gateway_count_limits_connections_and_replaces_a_lost_one(make_silo, probe):
    silos = await silos_with_gateways(make_silo)
    async with client_of(silos, gateway_count=1) as client:
        assert len(client.connected_gateways) == 1
        assert sum(s.statistics().gateway_connections for s in silos) == 1
        used = next(s for s in silos if address(s) == client.gateway)
        assert set((await where_all(client)).values()) == {name(used)}

        await kill_gateway(used)
        await client.wait_gateways(lambda live: bool(live) and live[0] != address(used), WAIT)
        assert len(client.connected_gateways) == 1
        assert name(used) not in set((await where_all(client)).values())


async def test_stopping_silo_answers_its_calls_in_flight_then_its_gateway_hands_over(
    make_silo, probe
):
    silos = await silos_with_gateways(make_silo)
    async with client_of(silos) as client:
        first = await where_all(client)
        leaving = silos[2]
        key = next(k for k, silo in first.items() if silo == name(leaving))
        running = asyncio.create_task(client.get_grain(Where, key).slow())
        await probe.wait_logged("slow", key)

        stopping = asyncio.create_task(leaving.stop())
        await probe.until(lambda: not leaving.gateway.accepting)  # server state: no event
        # new calls go to the other gateways without a single refusal...
        others = [k for k in KEYS if first[k] != name(leaving)]
        assert {k: await client.get_grain(Where, k).where() for k in others} == {
            k: first[k] for k in others}
        assert not running.done()
        # ...while the call in flight is answered before its connection closes
        probe.open("slow")
        async with asyncio.timeout(WAIT):
            assert await running == "done"
            await stopping
        await client.wait_gateways(lambda live: address(leaving) not in live, WAIT)
        after = await where_all(client)
        assert name(leaving) not in after.values()
