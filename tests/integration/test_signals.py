"""Signals: SIGINT/SIGTERM stop a silo gracefully (exit 0); a second signal forces exit 1."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration


async def test_sigint_stops_gracefully_with_exit_code_0(silo_launcher: SiloLauncher) -> None:
    silo = await silo_launcher.start()
    async with silo.client() as client:
        assert await client.get_grain("Counter", "x").set_unsaved(4) == 4
    silo.proc.send_signal(signal.SIGINT)
    assert await silo.wait_exit() == 0
    log = silo.log_text()
    assert '"signal": "SIGINT"' in log
    assert '"event": "silo_exited"' in log


async def test_second_signal_forces_exit_code_1_while_shutdown_hangs(
    silo_launcher: SiloLauncher,
) -> None:
    # --shutdown-timeout 5: left alone, the hanging stop would end after ~7.5 s with code 0.
    silo = await silo_launcher.start()
    async with silo.client() as client:
        assert await client.get_grain("Stubborn", 1).arm() == silo.pid
    silo.proc.send_signal(signal.SIGTERM)
    async def read_log() -> str:
        return silo.log_text()

    await poll_until(read_log, lambda log: '"event": "silo_stopping"' in log, timeout=5.0)
    assert silo.alive
    started = time.monotonic()
    silo.proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(4):
        assert await silo.proc.wait() == 1
    assert time.monotonic() - started < 3.0
    assert '"event": "silo_forced_exit"' in silo.log_text()
