"""Grain state in SQLite across deactivation, graceful restart, SIGTERM and kill -9."""

from __future__ import annotations

from typing import Any

import pytest

from .silo_process import SiloLauncher

pytestmark = pytest.mark.integration


async def test_state_is_restored_after_deactivation_and_graceful_restart(
    silo_launcher: SiloLauncher,
) -> None:
    first = await silo_launcher.start()
    async with first.client() as client:
        counter: Any = client.get_grain("Counter", "alice")
        assert await counter.add(5) == 5
        before = await counter.info()
        await counter.request_deactivation()
        again = await counter.info()  # a new activation reads the stored state
        assert again["activation"] != before["activation"]
        assert again["value"] == 5
        assert await counter.add(2) == 7
    assert await first.terminate() == 0

    second = await silo_launcher.start()
    async with second.client() as client:
        info = await client.get_grain("Counter", "alice").info()
    assert info["pid"] == second.pid != first.pid
    assert info["value"] == 7


async def test_written_state_survives_kill_9(silo_launcher: SiloLauncher) -> None:
    first = await silo_launcher.start()
    async with first.client() as client:
        assert await client.get_grain("Counter", "bob").add(3) == 3  # returns after write()
    assert await first.kill() == -9

    second = await silo_launcher.start()
    async with second.client() as client:
        assert await client.get_grain("Counter", "bob").get() == 3


async def test_sigterm_writes_changed_state_without_explicit_write(
    silo_launcher: SiloLauncher,
) -> None:
    first = await silo_launcher.start()
    async with first.client() as client:
        counter: Any = client.get_grain("Counter", 42)
        assert await counter.add(1) == 1
        assert await counter.set_unsaved(99, "not written by the grain") == 99
    assert await first.terminate() == 0
    assert '"event": "silo_exited"' in first.log_text()

    second = await silo_launcher.start()
    async with second.client() as client:
        info = await client.get_grain("Counter", 42).info()
    assert (info["value"], info["note"]) == (99, "not written by the grain")


async def test_kill_9_loses_changes_that_were_never_written(silo_launcher: SiloLauncher) -> None:
    """The contrast to the SIGTERM test: without a graceful stop nothing flushes the change."""
    first = await silo_launcher.start()
    async with first.client() as client:
        counter: Any = client.get_grain("Counter", "carol")
        assert await counter.add(1) == 1
        assert await counter.set_unsaved(50) == 50
    await first.kill()

    second = await silo_launcher.start()
    async with second.client() as client:
        assert await client.get_grain("Counter", "carol").get() == 1


async def test_state_and_reminders_on_redis_survive_kill_9(
    redis_url: str, silo_launcher: SiloLauncher
) -> None:
    """The same with ``--storage`` and ``--reminders`` on Redis (its own key prefix)."""
    backends = ("--storage", redis_url, "--reminders", redis_url)
    first = await silo_launcher.start(*backends)
    async with first.client() as client:
        assert await client.get_grain("Counter", "redis-bob").add(4) == 4
    assert await first.kill() == -9

    second = await silo_launcher.start(*backends)
    async with second.client() as client:
        assert await client.get_grain("Counter", "redis-bob").get() == 4
