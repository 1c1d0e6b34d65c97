"""Lifecycle: stages start in ascending order, stop in descending order, failures unwind."""

from __future__ import annotations

import pytest
import structlog

from orleanspy._util.lifecycle import Lifecycle, SiloStage


def _recording(lifecycle: Lifecycle, seen: list[str], name: str, stage: int) -> None:
    async def start() -> None:
        seen.append(f"start {name}")

    async def stop() -> None:
        seen.append(f"stop {name}")

    lifecycle.subscribe(name, stage, on_start=start, on_stop=stop)


async def test_lifecycle_starts_by_stage_and_stops_in_reverse():
    lc = Lifecycle(structlog.get_logger())
    seen: list[str] = []
    _recording(lc, seen, "streams", SiloStage.STREAMS)
    _recording(lc, seen, "storage", SiloStage.STORAGE)
    _recording(lc, seen, "gateway", SiloStage.GATEWAY)
    _recording(lc, seen, "reminders", SiloStage.SERVICES)
    await lc.start()
    await lc.stop()
    assert seen == [
        "start storage", "start gateway", "start reminders", "start streams",
        "stop streams", "stop reminders", "stop gateway", "stop storage",
    ]


async def test_lifecycle_failed_start_stops_what_started_and_raises():
    lc = Lifecycle(structlog.get_logger())
    seen: list[str] = []
    _recording(lc, seen, "storage", SiloStage.STORAGE)

    async def broken() -> None:
        raise OSError("port in use")

    lc.subscribe("gateway", SiloStage.GATEWAY, on_start=broken)
    _recording(lc, seen, "streams", SiloStage.STREAMS)
    with pytest.raises(OSError, match="port in use"):
        await lc.start()
    assert seen == ["start storage", "stop storage"]


async def test_lifecycle_failing_stop_is_logged_and_the_others_still_stop():
    lc = Lifecycle(structlog.get_logger())
    seen: list[str] = []
    _recording(lc, seen, "storage", SiloStage.STORAGE)

    async def broken() -> None:
        raise RuntimeError("boom")

    lc.subscribe("streams", SiloStage.STREAMS, on_stop=broken)
    await lc.start()
    with structlog.testing.capture_logs() as logs:
        await lc.stop()
    assert seen == ["start storage", "stop storage"]
    assert [e["event"] for e in logs] == ["lifecycle_stop_failed"]
    assert logs[0]["participant"] == "streams"


async def test_lifecycle_late_joiner_is_stopped_and_stop_is_idempotent():
    lc = Lifecycle(structlog.get_logger())
    seen: list[str] = []
    await lc.start()
    _recording(lc, seen, "spark", SiloStage.APPLICATION)
    await lc.stop()
    await lc.stop()
    assert seen == ["stop spark"]
    with pytest.raises(RuntimeError, match="while stopping"):
        lc.subscribe("late", SiloStage.ACTIVE)


async def test_lifecycle_statistics_come_from_participants_that_offer_them():
    lc = Lifecycle(structlog.get_logger())
    lc.subscribe("spark", SiloStage.APPLICATION, statistics=lambda: {"jobs": 2})
    lc.subscribe("plain", SiloStage.STORAGE)
    assert lc.statistics() == {"spark": {"jobs": 2}}
