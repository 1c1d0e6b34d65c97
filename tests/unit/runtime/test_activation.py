"""Activations: exactly one per grain, activation hooks, results, errors, timeouts, eager turns."""

from __future__ import annotations

import asyncio
import contextvars
import time

import pytest

from orleanspy import (
    ActivationFailedError,
    Grain,
    GrainCallTimeoutError,
    MessageRejectedError,
)

WAIT = 5.0

user_var: contextvars.ContextVar[str] = contextvars.ContextVar("user_var", default="caller")


class AppError(Exception):
    """A custom exception type defined at module level (importable)."""


class GatedActivation(Grain):
    """on_activate waits on the probe gate "activate", so first calls pile up meanwhile."""

    def __init__(self) -> None:
        self.calls = 0

    async def on_activate(self) -> None:
        self.silo.probe.record(("activate", self.key, id(self)))
        await self.silo.probe.gate("activate").wait()

    async def increment(self) -> int:
        self.calls += 1
        return self.calls


class Lifecycle(Grain):
    def __init__(self) -> None:
        self.activated = False

    async def on_activate(self) -> None:
        self.silo.probe.record(("on_activate", self.key))
        await asyncio.sleep(0)  # a suspending on_activate: requests must still wait for it
        self.activated = True

    async def first(self) -> bool:
        self.silo.probe.record(("first", self.key))
        return self.activated


class FailingActivation(Grain):
    async def on_activate(self) -> None:
        attempt = self.silo.probe.count(("attempt", self.key))
        if self.silo.probe.gate("heal").is_set():
            return
        if self.key == "late":
            await self.silo.probe.gate("fail-now").wait()
        raise ValueError(f"activation attempt {attempt} refused")

    async def ping(self) -> str:
        return "pong"


class Worker(Grain):
    async def fail_builtin(self) -> None:
        raise ValueError("bad value 42")

    async def fail_custom(self) -> None:
        raise AppError("custom failure")

    async def fail_after_suspending(self) -> None:
        await asyncio.sleep(0)
        raise KeyError("missing-key")

    async def wait_gate(self, name: str) -> str:
        await self.silo.probe.gate(name).wait()
        return "done"

    async def ping(self) -> str:
        return "pong"

    async def sync_result(self, x: int) -> int:
        return x * 2

    async def set_user_var(self) -> str:
        user_var.set("grain")
        await asyncio.sleep(0)
        return user_var.get()

    async def timed_wait(self) -> str:
        try:
            async with asyncio.timeout(0.05):
                await self.silo.probe.gate("never-before-teardown").wait()
        except TimeoutError:
            return "inner timeout"
        return "gate opened"


class Hop(Grain):
    async def hop(self, remaining: int) -> int:
        if remaining == 0:
            return 0
        return 1 + await self.get_grain(Hop, self.key + 1).hop(remaining - 1)


ALL = (GatedActivation, Lifecycle, FailingActivation, Worker, Hop)


def activations_of(silo, cls: type) -> list:
    return [a for a in silo.catalog if a.info.cls is cls]


# -- exactly one activation ---------------------------------------------------------------
async def test_activation_single_under_1000_concurrent_first_calls(make_silo, probe):
    silo = await make_silo(*ALL)
    ref = silo.get_grain(GatedActivation, "one")

    calls = [asyncio.create_task(ref.increment()) for _ in range(1000)]
    await probe.until(
        lambda: (a := silo.catalog.get(ref.grain_id)) is not None
        and a.statistics().queued == 1000
    )
    act = silo.catalog.get(ref.grain_id)
    assert len(silo.catalog) == 1
    probe.open("activate")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*calls)

    assert sorted(results) == list(range(1, 1001))
    assert [e for e in probe.log if e[0] == "activate"] == [("activate", "one", id(act.grain))]
    assert activations_of(silo, GatedActivation) == [act]
    assert act.statistics().max_queued == 1000
    assert act.statistics().completed == 1000


async def test_activation_single_per_grain_under_100_grains_x_10_concurrent_calls(
    make_silo, probe
):
    silo = await make_silo(*ALL)
    refs = [silo.get_grain(GatedActivation, f"g{i}") for i in range(100)]

    calls = [asyncio.create_task(ref.increment()) for _ in range(10) for ref in refs]
    await probe.until(
        lambda: sum(a.statistics().queued for a in activations_of(silo, GatedActivation)) == 1000
    )
    probe.open("activate")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*calls)

    assert len(silo.catalog) == 100
    activated = [e[1] for e in probe.log if e[0] == "activate"]
    assert sorted(activated) == sorted(f"g{i}" for i in range(100))
    per_grain: dict[str, list[int]] = {}
    for i, result in enumerate(results):
        per_grain.setdefault(refs[i % 100].key, []).append(result)
    assert all(sorted(v) == list(range(1, 11)) for v in per_grain.values())


async def test_activation_on_activate_completes_before_first_request(make_silo, probe):
    silo = await make_silo(*ALL)

    async with asyncio.timeout(WAIT):
        activated = await silo.get_grain(Lifecycle, "k").first()

    assert activated is True
    assert probe.log == [("on_activate", "k"), ("first", "k")]


async def test_activation_failed_raises_activation_failed_error_with_cause(make_silo, probe):
    silo = await make_silo(*ALL)

    with pytest.raises(ActivationFailedError, match="activation attempt 1 refused") as info:
        async with asyncio.timeout(WAIT):
            await silo.get_grain(FailingActivation, "k").ping()

    assert isinstance(info.value.__cause__, ValueError)
    assert len(silo.catalog) == 0


async def test_activation_failed_reaches_every_queued_caller(make_silo, probe):
    silo = await make_silo(*ALL)
    ref = silo.get_grain(FailingActivation, "late")

    calls = [asyncio.create_task(ref.ping()) for _ in range(5)]
    await probe.until(lambda: (a := silo.catalog.get(ref.grain_id)) is not None
                      and a.statistics().queued == 5)
    probe.open("fail-now")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*calls, return_exceptions=True)

    assert all(isinstance(r, ActivationFailedError) for r in results), results
    assert probe.counts[("attempt", "late")] == 1
    assert len(silo.catalog) == 0


async def test_activation_retried_on_next_call_after_failure(make_silo, probe):
    silo = await make_silo(*ALL)
    ref = silo.get_grain(FailingActivation, "k")
    with pytest.raises(ActivationFailedError):
        async with asyncio.timeout(WAIT):
            await ref.ping()

    probe.open("heal")
    async with asyncio.timeout(WAIT):
        assert await ref.ping() == "pong"

    assert probe.counts[("attempt", "k")] == 2
    assert len(silo.catalog) == 1


# -- results and exceptions ---------------------------------------------------------------
async def test_call_raises_builtin_exception_with_message(make_silo):
    silo = await make_silo(*ALL)

    with pytest.raises(ValueError) as info:
        await silo.get_grain(Worker, 1).fail_builtin()

    assert type(info.value) is ValueError
    assert str(info.value) == "bad value 42"


async def test_call_raises_custom_exception_type(make_silo):
    silo = await make_silo(*ALL)

    with pytest.raises(AppError) as info:
        await silo.get_grain(Worker, 1).fail_custom()

    assert str(info.value) == "custom failure"


async def test_call_raises_exception_thrown_after_suspension(make_silo):
    silo = await make_silo(*ALL)

    with pytest.raises(KeyError, match="missing-key"):
        async with asyncio.timeout(WAIT):
            await silo.get_grain(Worker, 1).fail_after_suspending()


async def test_call_failure_leaves_activation_usable(make_silo):
    silo = await make_silo(*ALL)
    ref = silo.get_grain(Worker, 1)
    with pytest.raises(ValueError):
        await ref.fail_builtin()

    assert await ref.ping() == "pong"
    act = silo.catalog.get(ref.grain_id)
    assert (act.statistics().failed, act.statistics().completed) == (1, 1)


async def test_call_unknown_method_raises_message_rejected(make_silo):
    silo = await make_silo(*ALL)

    with pytest.raises(MessageRejectedError, match="no method 'nope'") as info:
        await silo.get_grain(Worker, 1).invoke("nope")

    assert info.value.kind == "unknown_method"


async def test_call_unknown_grain_type_raises_message_rejected(make_silo):
    silo = await make_silo(*ALL)

    with pytest.raises(MessageRejectedError, match="unknown grain type 'NoSuchGrain'") as info:
        await silo.get_grain("NoSuchGrain", 1).anything()

    assert info.value.kind == "unknown_grain_type"


# -- timeouts -----------------------------------------------------------------------------
async def test_call_times_out_after_silo_response_timeout(make_silo):
    silo = await make_silo(*ALL, response_timeout=0.1)

    start = time.monotonic()
    with pytest.raises(GrainCallTimeoutError, match=r"timed out after 0\.1 s") as info:
        async with asyncio.timeout(WAIT):
            await silo.get_grain(Worker, 1).wait_gate("held")

    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - start < 2.0


async def test_call_times_out_after_per_call_with_timeout(make_silo):
    silo = await make_silo(*ALL, response_timeout=30.0)

    start = time.monotonic()
    with pytest.raises(GrainCallTimeoutError, match=r"timed out after 0\.1 s") as info:
        async with asyncio.timeout(WAIT):
            await silo.get_grain(Worker, 1).with_timeout(0.1).wait_gate("held")

    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - start < 2.0


async def test_call_with_timeout_does_not_expire_fast_calls(make_silo, probe):
    silo = await make_silo(*ALL, response_timeout=30.0)
    ref = silo.get_grain(Worker, 1).with_timeout(5.0)

    call = asyncio.create_task(ref.wait_gate("g"))
    await probe.until(lambda: silo.catalog.get(ref.grain_id) is not None)
    probe.open("g")

    async with asyncio.timeout(WAIT):
        assert await call == "done"


async def test_call_timed_out_request_still_completes_in_grain(make_silo, probe):
    silo = await make_silo(*ALL)
    ref = silo.get_grain(Worker, 1)
    with pytest.raises(GrainCallTimeoutError):
        async with asyncio.timeout(WAIT):
            await ref.with_timeout(0.05).wait_gate("late")
    act = silo.catalog.get(ref.grain_id)
    assert act.statistics().running == 1

    probe.open("late")
    async with asyncio.timeout(WAIT):
        assert await ref.ping() == "pong"
    assert act.statistics().completed == 2


# -- eager turns --------------------------------------------------------------------------
async def test_turn_completes_inline_when_method_never_suspends(make_silo):
    silo = await make_silo(*ALL)
    ref = silo.get_grain(Worker, 1)
    await ref.ping()  # activate first
    loop_ran: list[bool] = []
    asyncio.get_running_loop().call_soon(loop_ran.append, True)

    result = await ref.sync_result(21)

    assert result == 42
    assert loop_ran == []  # the call never yielded to the event loop


async def test_turn_context_changes_do_not_leak_to_caller(make_silo):
    silo = await make_silo(*ALL)

    assert await silo.get_grain(Worker, 1).set_user_var() == "grain"

    assert user_var.get() == "caller"


async def test_turn_grain_may_use_asyncio_timeout_when_called_in_process(make_silo):
    silo = await make_silo(*ALL)
    caller = asyncio.create_task(silo.get_grain(Worker, 1).timed_wait())

    done, _ = await asyncio.wait({caller}, timeout=WAIT)

    assert caller in done
    assert not caller.cancelled()
    assert caller.result() == "inner timeout"


async def test_turn_call_chain_of_300_grains_completes(make_silo):
    silo = await make_silo(*ALL)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(Hop, 0).hop(300) == 300
