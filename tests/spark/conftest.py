"""Fixtures of the Spark tests: one real local SparkSession for the whole test run.

``spark_manager`` (session scope) starts it once (about 6 s, plus a warm-up query) with test
settings: ``local[2]``, UI off, 2 shuffle partitions, the worker Python = this interpreter.
Each test's silo gets it through ``install_spark(silo, manager)`` (shared: the silo does not
stop it). ``spark_connect_server`` (session scope) is one Spark Connect server for every test
of the test process that reads or runs jobs over Connect: each such JVM costs seconds of both
cores to start. Tests skip when Java or pyspark is missing.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from orleanspy.spark import SparkOptions, SparkSessionManager, install_spark
from orleanspy.testing import TestCluster
from tests.integration.conftest import silo_launcher  # noqa: F401  (the sink kill -9 test)
from tests.spark.clusters import ConnectServer

# Upper bound for anything a test awaits.
WAIT = 30.0

TEST_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.sql.session.timeZone": "UTC",
}


def have_java() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home and (Path(home) / "bin" / "java").exists()) or shutil.which("java") is not None


@pytest.fixture(scope="session")
def spark_manager() -> Iterator[SparkSessionManager]:
    pytest.importorskip("pyspark")
    if not have_java():
        pytest.skip("no Java: install a JDK 17 to run the Spark tests")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    manager = SparkSessionManager(SparkOptions(
        master="local[2]", app_name="orleanspy-tests", conf=TEST_CONF,
        progress_interval=0.2, cancel_interval=0.25,
    ))
    manager._ensure_session()
    manager.session_nowait().range(4).count()  # warm-up: the first query is ~10x slower
    yield manager
    asyncio.run(manager.stop())


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    pytest.importorskip("pyspark")
    if not have_java():
        pytest.skip("no Java: install a JDK 17 to run the Spark tests")
    pytest.importorskip("grpc", reason="Spark Connect needs pyspark[connect]'s grpcio")
    server = ConnectServer(tmp_path_factory.mktemp("spark-connect"))
    try:
        yield server.start()
    finally:
        server.stop()


class Probe:
    """What grains report to the test: events it awaits instead of sleeping."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.progress: list[Any] = []
        self.groups: list[str] = []
        self.ended = asyncio.Event()  # a job reached a final state
        self.errors: list[BaseException] = []  # what run_job raised in the grain
        self.failed = asyncio.Event()  # ... once it did


@pytest.fixture
async def spark_cluster(spark_manager: SparkSessionManager) -> AsyncIterator[TestCluster]:
    from tests.spark import grains

    cluster = TestCluster(modules=[grains])
    install_spark(cluster.silo, spark_manager)
    cluster.silo.probe = Probe()  # type: ignore[attr-defined]
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()
