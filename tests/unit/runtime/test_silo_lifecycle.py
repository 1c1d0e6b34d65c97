"""The composed silo's lifecycle: components start upwards and stop downwards, in stages."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy._util.lifecycle import SiloStage
from orleanspy.cluster.membership import MemoryMembershipTable


class Counter(Grain):
    def __init__(self) -> None:
        self.n = 0

    async def add(self) -> int:
        self.n += 1
        return self.n


def _names(silo: Silo) -> list[str]:
    return [o.name for o in silo.lifecycle.observers]


async def test_components_join_in_start_order():
    silo = Silo(SiloOptions(gateway_port=0, port=0, shutdown_timeout=5.0),
                grains=[Counter], membership_table=MemoryMembershipTable())
    names = _names(silo)
    # Ports first; ACTIVE in membership after every component; clients last.
    order = ["gateway", "storage", "cluster", "gateway.connections", "grains", "reminders",
             "collector", "cluster.active", "gateway.accepting"]
    assert [n for n in names if n in order] == order


async def test_stop_deactivates_grains_after_services_and_before_storage_closes():
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Counter])
    seen: list[tuple[str, int]] = []

    async def at_services() -> None:
        seen.append(("services", len(silo.catalog)))

    async def at_storage() -> None:
        seen.append(("storage", len(silo.catalog)))

    silo.lifecycle.subscribe("probe.services", SiloStage.SERVICES, on_stop=at_services)
    silo.lifecycle.subscribe("probe.storage", SiloStage.STORAGE, on_stop=at_storage)
    async with silo:
        assert await silo.get_grain(Counter, "a").add() == 1
    assert seen == [("services", 1), ("storage", 0)]


async def test_failed_start_stops_what_had_started():
    table = MemoryMembershipTable()
    await table.close()  # joining fails on a closed table
    silo = Silo(SiloOptions(gateway_port=0, port=0, membership="memory",
                            shutdown_timeout=5.0), grains=[Counter], membership_table=table)
    try:
        await silo.start()
    except Exception:
        pass
    else:  # pragma: no cover - the start must fail
        raise AssertionError("the silo started on a closed membership table")
    assert silo.gateway is not None and not silo.gateway.accepting
    await silo.wait_stopped()


async def test_a_start_failing_after_the_gateway_opened_rolls_back_and_frees_its_port():
    silo = Silo(SiloOptions(gateway_port=0, shutdown_timeout=5.0), grains=[Counter])

    async def fail() -> None:
        raise OSError("the operations port is taken")

    silo.lifecycle.subscribe("later", SiloStage.APPLICATION, on_start=fail)
    async with asyncio.timeout(10):
        try:
            await silo.start()
        except OSError as error:
            assert "operations port" in str(error)
        else:  # pragma: no cover - the start must fail
            raise AssertionError("the silo started though a stage failed")
        assert silo.gateway is not None and not silo.gateway.accepting
        port = silo.gateway.port
        with pytest.raises(OSError):  # nothing listens on the gateway's port any more
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await writer.wait_closed()


async def test_a_missing_stream_provider_names_both_ways_to_add_it():
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Counter])
    with pytest.raises(KeyError) as caught:
        silo.get_stream_provider("events")
    assert "[streams.events]" in str(caught.value)
    assert "stream_providers=" in str(caught.value)


class NeedsStreams(Grain):
    async def publish(self) -> None:
        await self.get_stream_provider("s").get_stream("ns", 1).on_next(1)


async def test_a_missing_stream_provider_says_how_to_configure_it():
    """The grain's caller learns both ways to add the provider: a [streams.s] table in the
    TOML (CLI silos) and Silo(stream_providers=...) (embedded silos)."""
    async with Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
                    grains=[NeedsStreams]) as silo:
        with pytest.raises(KeyError) as raised:
            await silo.get_grain(NeedsStreams, "a").publish()
        message = str(raised.value)
        assert "[streams.s]" in message and "orleanspy.toml" in message
        assert "Silo(stream_providers=...)" in message
        with pytest.raises(KeyError, match=r"\[streams\.s\]"):
            silo.get_stream_provider("s")
