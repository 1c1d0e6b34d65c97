"""Fixtures of the integration tests: ``silo_launcher`` starts real silo processes and stops
every one still running at teardown (SIGTERM, then SIGKILL after a timeout)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
