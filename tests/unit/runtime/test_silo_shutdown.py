"""The graceful stop: after the shutdown timeout it still waits for the teardowns.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from orleanspy import (
    Grain,
    persistent_state,
)
from orleanspy.runtime.activation import ActivationState

WAIT = 5.0


@dataclass
class StuckState:
    n: int = 0


class StuckAtShutdown(Grain):
    state = persistent_state(StuckState)

    async def stuck(self) -> None:
        self.state.value.n = 42
        self.silo.probe.record("stuck")
        await asyncio.Event().wait()  # never set: only the shutdown timeout ends it

    async def on_deactivate(self, reason: Any) -> None:
        self.silo.probe.record("on_deactivate")


# After the shutdown timeout, Silo.stop() still returns only once the teardowns ran
async def test_stop_after_shutdown_timeout_waits_for_teardown(make_silo, probe):
    silo = await make_silo(StuckAtShutdown, shutdown_timeout=0.2)
    ref = silo.get_grain(StuckAtShutdown, "a")
    call = asyncio.create_task(ref.stuck())
    try:
        await probe.wait_logged("stuck")
        act = silo.catalog.get(ref.grain_id)
        async with asyncio.timeout(WAIT):
            await silo.stop()
        assert act.state is ActivationState.INVALID
        assert "on_deactivate" in probe.log
        stored = await silo.storage["default"].read(ref.grain_id, "state")
        assert stored is not None
    finally:
        call.cancel()
        with contextlib.suppress(BaseException):
            await call
