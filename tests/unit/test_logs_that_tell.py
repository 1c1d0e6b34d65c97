"""Logs that tell: a grain's exception is logged (at the configured level) with the grain
and method; activations and deactivations at debug; a failing stream delivery at warning
at once, then at most once per interval per subscription with the count in between, and
its recovery at info."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import CapturingLoggerFactory

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory

WAIT = 10.0
FAILS: dict[str, int] = {}
GOT: list[Any] = []
ARRIVED = asyncio.Event()


class Fragile(Grain):
    async def boom(self) -> None:
        raise ValueError("boom on purpose")

    async def join(self) -> None:
        async def on_next(item: Any, token: Any) -> None:
            if FAILS["left"] > 0:
                FAILS["left"] -= 1
                raise RuntimeError("handler not ready")
            GOT.append(item)
            ARRIVED.set()

        await self.get_stream_provider("s").get_stream("ns", "k").subscribe(on_next)


@pytest.fixture
def captured() -> Iterator[CapturingLoggerFactory]:
    """structlog capturing every event at debug and above, with its level."""
    previous = structlog.get_config()
    factory = CapturingLoggerFactory()
    structlog.configure(
        processors=[lambda _l, method, event: {**event, "level": method}],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=factory, cache_logger_on_first_use=False,
    )
    try:
        yield factory
    finally:
        structlog.configure(**previous)


def events(calls: Any, name: str) -> list[dict[str, Any]]:
    return [c.args[0] if c.args else c.kwargs for c in calls
            if (c.args[0] if c.args else c.kwargs).get("event") == name]


async def test_grain_errors_and_activations_are_logged_at_their_levels(
    captured: CapturingLoggerFactory,
) -> None:
    silo = Silo(SiloOptions(gateway_port=None, grain_error_log_level="warning"),
                grains=[Fragile])
    await silo.start()
    try:
        with pytest.raises(ValueError):
            await silo.get_grain(Fragile, "f").boom()
    finally:
        await silo.stop()
    calls = captured.logger.calls

    (failed,) = events(calls, "grain_call_failed")
    assert failed["level"] == "warning" and failed["method"] == "boom"
    assert "Fragile" in failed["grain"] and "boom on purpose" in failed["error"]
    (activated,) = events(calls, "grain_activated")
    (deactivated,) = events(calls, "grain_deactivated")
    assert activated["level"] == deactivated["level"] == "debug"
    assert deactivated["reason"] is not None


async def test_a_failing_delivery_warns_at_once_then_by_interval_and_recovers(
    monkeypatch: pytest.MonkeyPatch, captured: CapturingLoggerFactory,
) -> None:
    from orleanspy.streams import delivery

    monkeypatch.setattr(delivery, "FAILURE_WARNING_INTERVAL", 3600.0)
    FAILS["left"] = 4
    GOT.clear()
    ARRIVED.clear()
    provider = PersistentStreamProvider(MemoryAdapterFactory(), StreamProviderOptions(
        total_queues=1, pull_period=0.01, delivery_backoff=0.01, max_delivery_backoff=0.02))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Fragile],
                stream_providers={"s": provider})
    await silo.start()
    try:
        await silo.get_grain(Fragile, "c").join()
        await provider.get_stream("ns", "k").on_next("e1")
        async with asyncio.timeout(WAIT):
            await ARRIVED.wait()
    finally:
        await silo.stop()
    calls = captured.logger.calls

    assert GOT == ["e1"]
    (warning,) = events(calls, "stream_delivery_failing")  # once: the rest within the interval
    assert warning["level"] == "warning" and warning["stream"] == "ns/k"
    assert "handler not ready" in warning["error"] and warning["consumer"].endswith("/c")
    (recovered,) = events(calls, "stream_delivery_recovered")
    assert recovered["level"] == "info" and recovered["failures_since_last_warning"] == 3
