"""Fixtures of the integration tests: ``silo_launcher`` starts real silo processes and stops
every one still running at teardown (SIGTERM, then SIGKILL after a timeout); ``nats_server``
runs a ``nats-server`` with JetStream of the test's own (its port, its store in tmp_path)."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .backends import NatsServer
from .silo_process import SiloLauncher


@pytest.fixture
async def silo_launcher(tmp_path: Path) -> AsyncIterator[SiloLauncher]:
    data_dir = tmp_path / "data"
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    launcher = SiloLauncher(data_dir, log_dir)
    try:
        yield launcher
    finally:
        await launcher.close()


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    """A JetStream server the test may kill and restart; skipped (failed under CI) without
    the ``nats-server`` binary."""
    if shutil.which("nats-server") is None:
        why = "nats-server is not installed (the restart tests run one of their own)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    folder = tmp_path / "jetstream"
    folder.mkdir()
    server = NatsServer(folder)
    server.start()
    try:
        await server.wait_up()
        yield server
    finally:
        server.kill()
