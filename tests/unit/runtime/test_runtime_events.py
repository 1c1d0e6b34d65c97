"""Runtime events of the silo core: activations, failed calls, dropped requests, status."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.diagnostics import (
    ActivationCreated,
    ActivationDeactivated,
    CallFailed,
    RequestDropped,
    SiloStatusChanged,
)
from orleanspy.messaging.message import Direction, Message
from orleanspy.testing import EventRecorder

WAIT = 5.0


class Worker(Grain):
    async def ping(self) -> str:
        return "pong"

    async def boom(self) -> None:
        raise ValueError("boom")

    async def leave(self) -> None:
        self.deactivate_on_idle()


async def test_activation_created_and_deactivated(make_silo):
    silo = await make_silo(Worker)
    rec = EventRecorder(silo.diagnostics)
    ref = silo.get_grain(Worker, "a")
    await ref.ping()
    created = await rec.wait_event(ActivationCreated, timeout=WAIT)
    assert created.grain_id == ref.grain_id and created.silo == silo.name

    await ref.leave()
    gone = await rec.wait_event(ActivationDeactivated, timeout=WAIT)
    assert gone.grain_id == ref.grain_id and gone.reason == "requested"


async def test_call_failed_names_method_and_error(make_silo):
    silo = await make_silo(Worker)
    rec = EventRecorder(silo.diagnostics)
    with pytest.raises(ValueError):
        await silo.get_grain(Worker, "b").boom()
    failed = await rec.wait_event(CallFailed, timeout=WAIT)
    assert failed.method == "boom" and "boom" in failed.error


async def test_request_to_unknown_method_is_dropped(make_silo):
    silo = await make_silo(Worker)
    rec = EventRecorder(silo.diagnostics)
    ref = silo.get_grain(Worker, "c")
    replies: list[tuple[bool, object]] = []
    msg = Message(Direction.REQUEST, ref.grain_id, "missing", (), None)
    msg.reply = lambda ok, value: replies.append((ok, value))
    silo.dispatcher.deliver(msg)
    dropped = await rec.wait_event(RequestDropped, timeout=WAIT)
    assert dropped.method == "missing" and dropped.reason.startswith("rejected")
    assert replies and replies[0][0] is False


async def test_silo_reports_its_own_status():
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Worker])
    rec = EventRecorder(silo.diagnostics)
    async with silo:
        await rec.wait_event(SiloStatusChanged, lambda e: e.status == "active", timeout=WAIT)
    statuses = [e.status for e in rec.of(SiloStatusChanged) if e.subject == silo.name]
    assert statuses == ["joining", "active", "shutting_down", "stopped"]


async def test_requested_stop_does_not_wait_for_its_own_task():
    """A stop started from inside the silo (``request_stop``, e.g. when the cluster declares
    the silo dead) runs in a task the shutdown waits for: it must not wait for itself."""
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=30.0), grains=[Worker])
    await silo.start()
    await silo.get_grain(Worker, "d").ping()
    silo.request_stop()
    async with asyncio.timeout(WAIT):
        await silo.wait_stopped()
