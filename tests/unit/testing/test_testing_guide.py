"""The examples of docs/testing.md work as written."""

from __future__ import annotations

from orleanspy import Grain
from orleanspy.diagnostics import ActivationDeactivated
from orleanspy.testing import EventRecorder, FakeClock, TestCluster


class Ticker(Grain):
    def __init__(self) -> None:
        self.count = 0

    async def start(self, period: float) -> None:
        self.register_timer(self._tick, due=period, period=period)

    async def _tick(self) -> None:
        self.count += 1

    async def ticks(self) -> int:
        return self.count

    async def leave(self) -> None:
        self.deactivate_on_idle()


async def test_guide_fake_clock_steps_a_grain_timer_period_by_period():
    clock = FakeClock()
    async with TestCluster(grains=[Ticker], clock=clock) as cluster:
        await cluster.get_grain(Ticker, "t").start(period=60)
        await clock.run_for(180)
        assert await cluster.get_grain(Ticker, "t").ticks() == 3
        await clock.run_for(59)
        assert await cluster.get_grain(Ticker, "t").ticks() == 3


async def test_guide_event_recorder_awaits_a_deactivation():
    async with TestCluster(grains=[Ticker]) as cluster:
        with EventRecorder(cluster.silo.diagnostics) as events:
            ref = cluster.get_grain(Ticker, "t")
            await ref.leave()
            gone = await events.wait_event(
                ActivationDeactivated, lambda e: e.reason == "requested", timeout=5
            )
        assert gone.grain_id.key == "t"
