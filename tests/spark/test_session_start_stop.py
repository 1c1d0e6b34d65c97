"""Starting and stopping a session manager: a stop during the lazy start stops the session
once it exists; a manager that joins the process's running session leaves it running."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import replace
from typing import Any

import pytest

from orleanspy.spark import SparkOptions, SparkSessionManager
from orleanspy.spark import session as session_module

from .conftest import WAIT
from .fakes import FakeBackend, FakeSession


async def test_stop_while_the_session_is_starting_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # stop() during the lazy start (about 6 s of JVM start) must not return before the
    # session exists and then leave it running, unowned, for the rest of the process.
    fake = FakeSession()
    creating = threading.Event()
    release = threading.Event()

    def slow_create(options: SparkOptions) -> tuple[Any, bool]:
        creating.set()
        release.wait(WAIT)
        return fake, True

    monkeypatch.setattr(session_module, "create_session", slow_create)
    monkeypatch.setattr(session_module, "ClassicBackend", FakeBackend)
    manager = SparkSessionManager(SparkOptions(master="local[1]"))
    start = asyncio.ensure_future(manager.start())
    await asyncio.to_thread(creating.wait, WAIT)

    stop = asyncio.ensure_future(manager.stop())
    await asyncio.sleep(0.2)
    release.set()
    async with asyncio.timeout(WAIT):
        await stop
        with contextlib.suppress(Exception):
            await start

    assert fake.stopped.is_set()
    assert not manager.started
    assert manager.statistics().state == "stopped"


@pytest.mark.spark
async def test_a_manager_joining_the_process_session_does_not_stop_it(
    spark_manager: SparkSessionManager,
) -> None:
    # The process already runs a SparkSession (here: the tests' shared one, created on
    # another thread). A second manager joins it; stopping that manager must leave the
    # session running for its creator. (The session is created on a worker thread, where
    # SparkSession.getActiveSession() is None even though a session exists.)
    joining = SparkSessionManager(replace(spark_manager.options, stop_timeout=1.0))
    await joining.start()
    try:
        assert joining.session_nowait() is spark_manager.session_nowait()
        assert joining._owns_session is False
    finally:
        if not joining._owns_session:  # never stop the tests' shared session here
            await joining.stop()
    assert await spark_manager.run(lambda spark: spark.range(5).count(), tag="alive") == 5


async def test_stopping_a_manager_that_never_started_a_session_logs_no_session_stop() -> None:
    from structlog.testing import capture_logs

    manager = SparkSessionManager(SparkOptions(master="local[1]"))
    with capture_logs() as logs:
        async with asyncio.timeout(WAIT):
            await manager.stop()
    assert "spark_session_stopped" not in [e["event"] for e in logs]
    assert manager.statistics().state == "stopped"
