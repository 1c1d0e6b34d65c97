"""A silo's Spark session manager joins the silo's lifecycle: an owned one stops with the
silo, a shared one is left running, its figures are ``statistics().extensions["spark"]``.
No Spark job runs here, so neither pyspark nor Java is needed."""

from __future__ import annotations

import pytest

from orleanspy import Silo, SiloOptions
from orleanspy.spark import (
    SparkOptions,
    SparkSessionManager,
    install_spark,
    installed_spark,
    spark_for,
)
from tests.spark.grains import Analytics

pytestmark = pytest.mark.timeout(30)


def _silo() -> Silo:
    return Silo(SiloOptions(gateway_port=None), grains=[Analytics])


async def test_an_owned_manager_stops_with_the_silo() -> None:
    silo = _silo()
    manager = install_spark(silo, SparkOptions(master="local[1]"))
    async with silo:
        assert spark_for(silo) is manager
        assert silo.statistics().extensions["spark"].state == "not_started"
    assert manager.statistics().state == "stopped"


async def test_a_manager_created_on_first_use_joins_the_started_silo() -> None:
    silo = _silo()
    async with silo:
        assert installed_spark(silo) is None
        manager = spark_for(silo)
        assert spark_for(silo) is manager
        assert "spark" in silo.statistics().extensions
    assert manager.statistics().state == "stopped"


async def test_a_shared_manager_is_left_to_its_creator() -> None:
    shared = SparkSessionManager(SparkOptions(master="local[1]"))
    silo = _silo()
    install_spark(silo, shared)
    async with silo:
        assert spark_for(silo) is shared
    assert shared.statistics().state == "not_started"
    await shared.stop()


async def test_reinstalling_before_first_use_replaces_the_manager_once() -> None:
    silo = _silo()
    install_spark(silo, SparkOptions(master="local[1]"))
    second = install_spark(silo, SparkOptions(master="local[2]"))
    async with silo:
        assert spark_for(silo) is second
        names = [o.name for o in silo.lifecycle.observers]
        assert names.count("spark") == 1
    assert second.statistics().state == "stopped"


async def test_a_spark_grain_deactivates_without_creating_a_manager() -> None:
    silo = _silo()
    async with silo:
        assert await silo.get_grain(Analytics, "a").spark_progress() == []
    assert installed_spark(silo) is None
