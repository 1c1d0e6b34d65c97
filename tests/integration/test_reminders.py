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


async def test_reminders_list_reads_the_table_the_silo_wrote(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    import json

    from .silo_process import run_cli_to_end

    config = tmp_path / "orleanspy.toml"
    config.write_text("[silo]\nminimum_reminder_period = 60\n", encoding="utf-8")
    silo = await silo_launcher.start("--config", str(config))
    async with silo.client() as client:
        await client.get_grain("Ticker", "t1").start(600.0)
        await client.get_grain("Ticker", "t2").start(3600.0)
    common = ("--data-dir", str(silo_launcher.data_dir))
    code, out, err = await run_cli_to_end("reminders", "list", *common, "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["grain"], r["name"], r["period"]) for r in rows] == [
        ("Ticker/t1", "tick", 600.0), ("Ticker/t2", "tick", 3600.0)]
    assert all(r["owner"] is None and r["next"] > 0 for r in rows)
    code, out, err = await run_cli_to_end("reminders", "list", *common, "--grain", "Ticker/t2")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["GRAIN", "NAME", "PERIOD", "NEXT", "OWNER"]
    assert len(out.splitlines()) == 2 and "Ticker/t2" in out and "3600s" in out
    code, _, err = await run_cli_to_end("reminders", "list", "--reminders", "sqlite:typo.db",
                                        *common)
    assert code == 2 and "no reminders table at" in err
    assert not (silo_launcher.data_dir / "typo.db").exists()
    assert await silo.terminate() == 0
