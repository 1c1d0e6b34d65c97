"""Durable reminders: registered in one silo process, they fire in the next one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orleanspy import ConfigurationError

from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration


async def test_reminder_fires_after_silo_restart(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    config = tmp_path / "orleanspy.toml"
    config.write_text("[silo]\nminimum_reminder_period = 0.2\n", encoding="utf-8")
    first = await silo_launcher.start("--config", str(config))
    async with first.client() as client:
        await client.get_grain("Ticker", "t1").start(0.3)
    assert await first.terminate() == 0

    second = await silo_launcher.start("--config", str(config))
    async with second.client() as client:
        ticker: Any = client.get_grain("Ticker", "t1")
        report = await poll_until(
            ticker.report, lambda r: second.pid in r["pids"], timeout=10.0
        )
        await ticker.stop_ticking()
    assert report["ticks"] >= 1
    assert '"event": "reminders_loaded"' in second.log_text()


async def test_reminder_period_below_the_configured_minimum_is_refused(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--min-reminder-period", "5")
    async with silo.client() as client:
        with pytest.raises(ConfigurationError, match="minimum_reminder_period"):
            await client.get_grain("Ticker", "t2").start(0.3)
