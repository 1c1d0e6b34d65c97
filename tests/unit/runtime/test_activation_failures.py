"""A failed or ending activation: callers and suspended senders get an answer, its timers die.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import (
    ActivationFailedError,
    Grain,
    mailbox,
    one_way,
)

WAIT = 5.0


class CancelOnActivateSync(Grain):
    async def on_activate(self) -> None:
        if self.silo.probe.count("cancel_activate_sync") == 1:
            raise asyncio.CancelledError()

    async def ping(self) -> str:
        return "pong"


class CancelOnActivateAsync(Grain):
    async def on_activate(self) -> None:
        if self.silo.probe.count("cancel_activate_async") == 1:
            await asyncio.sleep(0)
            raise asyncio.CancelledError()

    async def ping(self) -> str:
        return "pong"


@mailbox(capacity=1, overflow="suspend")
class FailSlowActivation(Grain):
    async def on_activate(self) -> None:
        await self.silo.probe.gate("fail_activation").wait()
        raise RuntimeError("boom")

    @one_way
    async def post(self, x: int) -> None:
        pass


class TimerLeave(Grain):
    async def leave(self) -> str:
        self.deactivate_on_idle()
        self.timer = self.register_timer(self._tick, 0.0)
        return "bye"

    async def _tick(self) -> None:
        self.silo.probe.record("zombie_tick")


# CancelledError out of on_activate fails the activation (it must not stay ACTIVATING)
@pytest.mark.parametrize("cls", [CancelOnActivateSync, CancelOnActivateAsync])
async def test_cancelled_on_activate_fails_the_activation(make_silo, cls):
    silo = await make_silo(cls, response_timeout=1.0)
    ref = silo.get_grain(cls, "a")
    async with asyncio.timeout(WAIT):
        first: BaseException | None = None
        try:
            await ref.ping()
        except BaseException as exc:
            first = exc
        # A later call must get a fresh activation instead of queueing on the stuck one.
        assert await ref.ping() == "pong"
        assert isinstance(first, ActivationFailedError)


# A failed activation releases one-way senders suspended on its full mailbox
async def test_failed_activation_releases_suspended_one_way_senders(make_silo, probe):
    silo = await make_silo(FailSlowActivation)
    ref = silo.get_grain(FailSlowActivation, "a")
    await ref.post(1)  # fills the mailbox (capacity 1) while activating
    second = asyncio.create_task(ref.post(2))
    act = silo.catalog.get(ref.grain_id)
    try:
        await probe.until(lambda: bool(act.blocked))
        probe.open("fail_activation")
        async with asyncio.timeout(1.0):
            await second
        assert second.done() and not second.cancelled()
        assert not act.blocked
    finally:
        second.cancel()


# A timer registered while deactivating dies with the activation
async def test_timer_registered_while_deactivating_dies_with_the_activation(make_silo, probe):
    silo = await make_silo(TimerLeave)
    ref = silo.get_grain(TimerLeave, "a")
    async with asyncio.timeout(WAIT):
        assert await ref.leave() == "bye"
        act = silo.catalog.get(ref.grain_id)
        timer = act.grain.timer
        await act.wait_deactivated()
        await probe.until(lambda: timer.disposed)
    assert "zombie_tick" not in probe.log
    assert silo.catalog.get(ref.grain_id) is None
