"""Runtime events: listeners get every event; emitters see whether anyone listens."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy.diagnostics import ActivationCreated, Diagnostics, QueueAcquired
from orleanspy.ids import GrainId
from orleanspy.testing import EventRecorder


def test_diagnostics_listening_follows_subscriptions():
    hub = Diagnostics()
    assert not hub.listening
    seen: list[object] = []
    unsubscribe = hub.subscribe(seen.append)
    assert hub.listening
    event = QueueAcquired(silo="s", provider="p", queue="q-0")
    hub.emit(event)
    unsubscribe()
    hub.emit(event)
    assert seen == [event] and not hub.listening


def test_diagnostics_listener_that_raises_breaks_nothing():
    hub = Diagnostics()
    seen: list[object] = []

    def broken(event: object) -> None:
        raise RuntimeError("listener bug")

    hub.subscribe(broken)
    hub.subscribe(seen.append)
    hub.emit(QueueAcquired(silo="s", provider="p", queue="q-0"))
    assert len(seen) == 1 and hub.listener_errors == 1


async def test_event_recorder_wait_event_returns_the_matching_event_once_emitted():
    hub = Diagnostics()
    gid = GrainId("Counter", "a")
    with EventRecorder(hub) as rec:
        waiter = asyncio.create_task(
            rec.wait_event(ActivationCreated, lambda e: e.grain_id == gid, timeout=5)
        )
        await asyncio.sleep(0)
        hub.emit(ActivationCreated(silo="s", grain_id=GrainId("Counter", "b")))
        hub.emit(ActivationCreated(silo="s", grain_id=gid))
        assert (await waiter).grain_id == gid
    assert not hub.listening


async def test_event_recorder_timeout_says_what_was_recorded():
    hub = Diagnostics()
    with EventRecorder(hub) as rec:
        hub.emit(QueueAcquired(silo="s", provider="p", queue="q-0"))
        with pytest.raises(TimeoutError, match="QueueAcquired"):
            await rec.wait_event(ActivationCreated, timeout=0.05)
