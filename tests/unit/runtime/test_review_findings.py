"""Review findings: each test pins a runtime bug found in review (all fixed).

Every test is bounded by ``asyncio.timeout`` (or a grain-call timeout where the bug *is* a
hang) and synchronises on probe events / runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest

from orleanspy import (
    ActivationFailedError,
    Grain,
    SerializationError,
    SiloUnavailableError,
    call_chain_reentrant,
    mailbox,
    one_way,
    persistent_state,
    read_only,
    reentrant,
)
from orleanspy.runtime.activation import ActivationState

WAIT = 5.0


class LogRecorder:
    """Wraps a silo's structlog logger and remembers the event names it was given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.events: list[str] = []

    def __getattr__(self, level: str) -> Any:
        fn = getattr(self.inner, level)

        def log(event: str, *args: Any, **kw: Any) -> Any:
            self.events.append(event)
            return fn(event, *args, **kw)

        return log


# -- grains ------------------------------------------------------------------------------


class EagerCancel(Grain):
    async def self_cancel(self) -> str:
        asyncio.current_task().cancel()  # type: ignore[union-attr]
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            return "handled"
        return "not cancelled"

    async def timeout_zero(self) -> str:
        try:
            async with asyncio.timeout(0):
                await asyncio.Event().wait()
        except TimeoutError:
            return "timed out"
        return "no timeout"


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


class ReminderHolder(Grain):
    async def hold_after_register(self) -> str:
        await self.register_reminder("r", 0.2, 1000)
        self.silo.probe.record("registered")
        await self.silo.probe.gate("reminder").wait()
        return "done"

    async def register_due_now(self) -> None:
        await self.register_reminder("now", 0, 1000)

    async def receive_reminder(self, name: str, status: Any) -> None:
        self.silo.probe.record(("reminder", name))


class OneWayA(Grain):
    async def post_then_wait(self) -> str:
        await self.get_grain(OneWayB, "b").notify(self.key)
        await self.silo.probe.gate("one_way").wait()
        return "a-done"

    async def ping(self) -> str:
        return "pong"


class OneWayB(Grain):
    @one_way
    async def notify(self, key: str) -> None:
        try:
            r = await self.get_grain(OneWayA, key).ping()
            self.silo.probe.record(("b", r))
        except Exception as exc:
            self.silo.probe.record(("b-error", type(exc).__name__))


@call_chain_reentrant
class ReadWrite(Grain):
    @read_only
    async def read_via_helper(self) -> str:
        return await self.get_grain(RWHelper, "h").call_back(self.key)

    async def write(self) -> str:
        probe = self.silo.probe
        probe.record("write_start")
        await probe.gate("write").wait()
        probe.record("write_end")
        return "written"

    @read_only
    async def peek(self) -> str:
        self.silo.probe.record("peek")
        return "peeked"


class RWHelper(Grain):
    async def call_back(self, key: str) -> str:
        return await self.get_grain(ReadWrite, key).write()


@reentrant
class ReentrantLeave(Grain):
    async def outer(self) -> str:
        self.deactivate_on_idle()
        return await self.get_grain(ReentrantLeave, self.key).inner()

    async def inner(self) -> str:
        return "inner"


class Echo(Grain):
    async def echo(self, x: Any) -> Any:
        return x

    async def ping(self) -> str:
        return "pong"

    async def hold(self) -> str:
        self.silo.probe.record("holding")
        await self.silo.probe.gate("hold").wait()
        return "held"

    async def recursive_late(self) -> Any:
        await asyncio.sleep(0)
        a: list[Any] = []
        a.append((a,))
        return a


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


async def read_frame(reader: asyncio.StreamReader) -> Any:
    head = await reader.readexactly(4)
    return msgpack.unpackb(await reader.readexactly(int.from_bytes(head, "big")), raw=False)


# -- 1. eager start (3.11): a cancel requested before the continuation task's first step ---


async def test_sync_self_cancel_reaches_the_grain_coroutine(make_silo):
    silo = await make_silo(EagerCancel)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(EagerCancel, "a").self_cancel() == "handled"


async def test_timeout_zero_before_first_await_raises_timeout_in_the_grain(make_silo):
    silo = await make_silo(EagerCancel)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(EagerCancel, "a").timeout_zero() == "timed out"


# -- 2. CancelledError out of on_activate leaves the activation ACTIVATING forever -----------


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


# -- 3. failed activation never releases one-way senders suspended on a full mailbox --------


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


# -- 4. a timer registered while deactivating outlives the activation ----------------------


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


# -- 5. silo.stop() after the shutdown timeout returns before the teardown ran --------------


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


# -- 6. reminder ticks inherit the registering turn's call chain ------------------------------


async def test_reminder_tick_is_not_a_deadlock_with_the_registering_turn(make_silo, probe):
    silo = await make_silo(ReminderHolder, minimum_reminder_period=1.0)
    rec = LogRecorder(silo.log)
    silo.log = rec
    ref = silo.get_grain(ReminderHolder, "a")
    call = asyncio.create_task(ref.hold_after_register())
    async with asyncio.timeout(WAIT):
        await probe.wait_logged("registered")
        act = silo.catalog.get(ref.grain_id)
        await probe.until(
            lambda: "reminder_delivery_failed" in rec.events or len(act.waiting) == 1
        )
        assert "reminder_delivery_failed" not in rec.events
        probe.open("reminder")
        assert await call == "done"
        await probe.wait_logged(("reminder", "r"))


async def test_reminder_with_due_zero_fires_now(make_silo, probe):
    silo = await make_silo(ReminderHolder, minimum_reminder_period=1.0)
    ref = silo.get_grain(ReminderHolder, "a")
    async with asyncio.timeout(WAIT):
        await ref.register_due_now()
    loop = asyncio.get_running_loop()
    (handle,) = silo.reminders._handles.values()
    assert handle.when() - loop.time() < 1.0  # not 1000 s from now


# -- 7. one-way calls carry the sender's call chain ------------------------------------------


async def test_call_back_from_a_one_way_receiver_is_not_a_deadlock(make_silo, probe):
    silo = await make_silo(OneWayA, OneWayB)
    a = silo.get_grain(OneWayA, "a")
    call = asyncio.create_task(a.post_then_wait())
    async with asyncio.timeout(WAIT):
        act_b = None

        def settled() -> bool:
            nonlocal act_b
            if any(isinstance(e, tuple) and e[0] == "b-error" for e in probe.log):
                return True
            act_a = silo.catalog.get(a.grain_id)
            return act_a is not None and len(act_a.waiting) == 1

        await probe.until(settled)
        assert not any(isinstance(e, tuple) and e[0] == "b-error" for e in probe.log)
        probe.open("one_way")
        assert await call == "a-done"
        await probe.wait_logged(("b", "pong"))


# -- 8. read-only blocking request is not replaced by a chain-reentrant write ----------------


async def test_read_only_does_not_interleave_with_a_reentrant_write(make_silo, probe):
    silo = await make_silo(ReadWrite, RWHelper)
    ref = silo.get_grain(ReadWrite, "a")
    reader = asyncio.create_task(ref.read_via_helper())
    async with asyncio.timeout(WAIT):
        await probe.wait_logged("write_start")
        act = silo.catalog.get(ref.grain_id)
        peek = asyncio.create_task(ref.peek())
        await probe.until(lambda: "peek" in probe.log or len(act.waiting) == 1)
        assert "peek" not in probe.log, "a read-only request ran during a write"
        probe.open("write")
        assert await reader == "written"
        assert await peek == "peeked"


# -- 9. a reentrant grain's own interleaved call after deactivate_on_idle hangs --------------


async def test_reentrant_self_call_after_deactivate_on_idle_completes(make_silo):
    silo = await make_silo(ReentrantLeave, response_timeout=1.0)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(ReentrantLeave, "a").outer() == "inner"


# -- 10. gateway: one undecodable request closes the whole connection ------------------------


async def test_gateway_undecodable_argument_fails_only_that_call(make_cluster, probe):
    cluster = await make_cluster(Echo)

    @dataclass
    class NotImportable:
        x: int

    ref = cluster.client.get_grain(Echo, "k")
    hold = asyncio.create_task(ref.hold())
    async with asyncio.timeout(WAIT):
        await probe.wait_logged("holding")
        with pytest.raises(SerializationError):
            await ref.echo(NotImportable(1))
        probe.open("hold")
        assert await hold == "held"


# -- 11. gateway: a bad chain entry escapes data_received -----------------------------------


async def test_gateway_bad_chain_entry_is_answered_not_fatal(make_cluster):
    # {"a": 1} as the entry (KeyError) escapes the same way
    entry = ["x", float("inf"), False]
    cluster = await make_cluster(Echo)
    silo = cluster.silo
    reader, writer = await asyncio.open_connection("127.0.0.1", silo.gateway.port)
    try:
        async with asyncio.timeout(WAIT):
            writer.write(frame(msgpack.packb(
                {"v": 1, "cluster": silo.options.cluster_id, "secret": None, "client": "raw"}
            )))
            assert (await read_frame(reader))["ok"] is True
            writer.write(
                frame(msgpack.packb([0, 1, "Echo", "k", "ping", [], None, None, [entry]]))
                + frame(msgpack.packb([0, 2, "Echo", "k", "ping", [], None, None, []]))
            )
            answered = set()
            while answered != {1, 2}:
                try:
                    reply = await read_frame(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                answered.add(reply[1])
            if answered != {1, 2}:
                # pytrace=False: formatting this traceback trips a CPython 3.11.7 ast bug
                # (SystemError: AST constructor recursion depth mismatch) inside pytest
                pytest.fail(f"answered only {sorted(answered)} of [1, 2]", pytrace=False)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


# -- 12. codec RecursionError is not a SerializationError: a remote reply is lost ------------


async def test_unserialisable_recursive_result_is_answered_remotely(make_cluster):
    cluster = await make_cluster(Echo)
    ref = cluster.client.get_grain(Echo, "k").with_timeout(2.0)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SerializationError):
            await ref.recursive_late()


# -- 13. client: a call resumed after wait_writable on a dead connection times out -----------


async def test_client_call_on_connection_lost_while_paused_fails_fast(make_cluster, probe):
    cluster = await make_cluster(Echo)
    client = cluster.client
    conn = client._conn
    conn.pause_writing()  # as if the silo stopped reading
    call = asyncio.create_task(client.get_grain(Echo, "k").with_timeout(2.0).ping())
    await probe.until(lambda: conn._write_resumed is not None)
    conn.close()
    async with asyncio.timeout(WAIT):
        try:
            result = await call
        except SiloUnavailableError:
            result = "unavailable"
    assert result in ("pong", "unavailable")


# -- 14. in-process calls accept ints the wire cannot carry ----------------------------------


async def test_local_call_rejects_int_wider_than_64_bits(make_silo):
    silo = await make_silo(Echo)
    async with asyncio.timeout(WAIT):
        with pytest.raises(SerializationError):
            await silo.get_grain(Echo, "k").echo(2**70)
