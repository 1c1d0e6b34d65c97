"""Call filters and request context in one process (docs/grains.md, "Call filters" and
"Request context": the examples there are the first tests here, as written)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest

from orleanspy import Grain, GrainCall, RequestContext, system_filter
from orleanspy.messaging.codec import Codec
from orleanspy.messaging.frames import Request
from orleanspy.runtime.system_target import SystemTarget
from orleanspy.testing import FakeClock, TestCluster

WAIT = 5.0


# -- the examples of docs/grains.md ----------------------------------------------------------
async def tenant_check(call: GrainCall) -> Any:
    """A silo filter: only calls made for a tenant get in."""
    if RequestContext.get("tenant") is None:
        raise PermissionError(f"{call.method} needs a tenant")
    return await call.proceed()


class Accounts(Grain):
    async def owner(self) -> str:
        return f"{RequestContext.get('tenant')}:{self.key}"

    async def on_incoming_call(self, call: GrainCall) -> Any:
        if call.method == "owner" and RequestContext.get("tenant") == "blocked":
            raise PermissionError("tenant blocked")
        return await call.proceed()


async def test_docs_example_filters_by_the_callers_tenant():
    async with TestCluster(grains=[Accounts], call_filters=[tenant_check]) as cluster:
        accounts = cluster.get_grain(Accounts, "acc-1")
        with RequestContext.set(tenant="acme"):
            assert await accounts.owner() == "acme:acc-1"
        with pytest.raises(PermissionError, match="needs a tenant"):
            await accounts.owner()
        with RequestContext.set(tenant="blocked"), pytest.raises(PermissionError):
            await accounts.owner()


# -- ordering, wrapping, rejection -----------------------------------------------------------
ORDER: list[str] = []


def _recording(tag: str) -> Any:
    async def f(call: GrainCall) -> Any:
        ORDER.append(f"{tag}>")
        result = await call.proceed()
        ORDER.append(f"<{tag}")
        return result
    return f


class Echo(Grain):
    async def echo(self, value: Any) -> Any:
        ORDER.append(f"echo {value}")
        return value

    async def on_incoming_call(self, call: GrainCall) -> Any:
        ORDER.append("grain>")
        if call.method == "echo" and call.args == ("twice",):
            call.args = ("changed",)  # a filter may replace the arguments
        result = await call.proceed()
        ORDER.append("<grain")
        return result


async def test_filters_run_in_order_silo_then_grain_and_wrap_the_call():
    ORDER.clear()

    async def wrap(call: GrainCall) -> Any:
        assert (call.grain_id.key, call.method) == ("e", "echo")
        return ["wrapped", await call.proceed()]

    async with TestCluster(grains=[Echo],
                           call_filters=[_recording("a"), wrap, _recording("b")]) as cluster:
        echo = cluster.get_grain(Echo, "e")
        assert await echo.echo(1) == ["wrapped", 1]
        assert ORDER == ["a>", "b>", "grain>", "echo 1", "<grain", "<b", "<a"]
        assert await echo.echo("twice") == ["wrapped", "changed"]


async def test_a_rejecting_filter_stops_the_call_and_the_caller_gets_its_error():
    ORDER.clear()

    async def reject(call: GrainCall) -> Any:
        raise PermissionError(f"no {call.method}")

    async with TestCluster(grains=[Echo], call_filters=[reject]) as cluster:
        with pytest.raises(PermissionError, match="no echo"):
            await cluster.get_grain(Echo, "e").echo(1)
        assert ORDER == []  # neither the grain's filter nor the method ran


class Caller(Grain):
    async def call_echo(self, value: Any) -> Any:
        return await self.get_grain(Echo, "e").echo(value)

    async def on_outgoing_call(self, call: GrainCall) -> Any:
        ORDER.append(f"out {call.method} from {call.grain.key}")
        return await call.proceed()


async def test_outgoing_filters_run_around_calls_a_grain_makes():
    ORDER.clear()

    async def silo_out(call: GrainCall) -> Any:
        ORDER.append(f"silo out {call.method}")
        return await call.proceed()

    async with TestCluster(grains=[Echo, Caller], outgoing_call_filters=[silo_out]) as cluster:
        assert await cluster.get_grain(Caller, "c").call_echo(3) == 3
    assert ORDER[:3] == ["silo out call_echo", "silo out echo", "out echo from c"]


class Target(SystemTarget):
    async def ping(self) -> str:
        return "pong"


async def test_system_targets_pass_only_filters_marked_for_them():
    seen: list[str] = []

    async def plain(call: GrainCall) -> Any:
        seen.append("plain")
        return await call.proceed()

    @system_filter
    async def marked(call: GrainCall) -> Any:
        seen.append("marked")
        return await call.proceed()

    async with TestCluster(call_filters=[plain, marked]) as cluster:
        ref = cluster.silo.add_system_target(Target(), "t")
        assert await ref.ping() == "pong"
    assert seen == ["marked"]


# -- request context -------------------------------------------------------------------------
class Hop(Grain):
    async def tenant(self) -> Any:
        return RequestContext.get("tenant")

    async def via(self, key: str) -> Any:
        return [RequestContext.get("tenant"), await self.get_grain(Hop, key).tenant()]

    async def override(self, key: str) -> Any:
        with RequestContext.set(tenant="inner"):
            inner = await self.get_grain(Hop, key).tenant()
        return [inner, RequestContext.get("tenant")]


async def test_context_is_carried_across_local_calls_and_scoped_by_the_block():
    async with TestCluster(grains=[Hop]) as cluster:
        a = cluster.get_grain(Hop, "a")
        assert await a.tenant() is None
        with RequestContext.set(tenant="t1", user="u"):
            assert await a.via("b") == ["t1", "t1"]
            assert await a.override("b") == ["inner", "t1"]
            assert RequestContext.snapshot() == {"tenant": "t1", "user": "u"}
        assert await a.via("b") == [None, None]
        assert RequestContext.snapshot() == {}


GATE: dict[str, asyncio.Event] = {}


class Busy(Grain):
    async def hold(self) -> Any:
        GATE["entered"].set()
        await GATE["release"].wait()
        return RequestContext.get("tenant")

    async def tenant(self) -> Any:
        return RequestContext.get("tenant")


async def test_a_queued_turn_sees_its_own_requests_context_not_the_previous_turns():
    GATE.update(entered=asyncio.Event(), release=asyncio.Event())
    async with TestCluster(grains=[Busy]) as cluster, asyncio.timeout(WAIT):
        busy = cluster.get_grain(Busy, "b")
        with RequestContext.set(tenant="first"):
            first = asyncio.ensure_future(busy.hold())
        await GATE["entered"].wait()
        second = asyncio.ensure_future(busy.tenant())  # queued behind "first", no context
        with RequestContext.set(tenant="third"):
            third = asyncio.ensure_future(busy.tenant())
        GATE["release"].set()  # both start their calls (FIFO) before "first" resumes
        assert await asyncio.gather(first, second, third) == ["first", None, "third"]


class Ticking(Grain):
    async def start(self) -> None:
        self.register_timer(self._tick, due=1.0)
        GATE["entered"].set()
        await GATE["release"].wait()  # the tick waits behind this turn, then starts after it

    async def _tick(self) -> None:
        GATE["ticked_with"] = RequestContext.get("tenant")  # type: ignore[assignment]
        GATE["ticked"].set()


async def test_a_timer_runs_with_the_context_of_its_registration():
    GATE.update(entered=asyncio.Event(), release=asyncio.Event(), ticked=asyncio.Event())
    clock = FakeClock()
    async with TestCluster(grains=[Ticking], clock=clock) as cluster, asyncio.timeout(WAIT):
        with RequestContext.set(tenant="at-registration"):
            started = asyncio.ensure_future(cluster.get_grain(Ticking, "t").start())
        await GATE["entered"].wait()
        await clock.run_for(1.0)
        GATE["release"].set()
        await started
        await GATE["ticked"].wait()
    assert GATE["ticked_with"] == "at-registration"


def test_context_values_are_checked_and_size_capped():
    with pytest.raises(ValueError, match="over the 4096-byte limit"), \
            RequestContext.set(blob="x" * 5000):
        pass
    with pytest.raises(ValueError, match="must be str, int, float, bool, None or bytes"), \
            RequestContext.set(items=[1, 2]):
        pass
    assert RequestContext.snapshot() == {}


def test_an_empty_context_adds_nothing_to_the_request_frame():
    codec = Codec()
    fields = (False, 7, "T", "k", "m", 1.0, [], 0, False, b"\x92\x90\xc0")
    plain = Request.pack(codec, *fields)
    assert Request.pack(codec, *fields, None) == plain
    assert Request.pack(codec, *fields, {}) == plain
    carried = Request.pack(codec, *fields, {"tenant": "a"})
    frame = msgpack.unpackb(carried)
    Request.check(frame)
    assert Request.to_message(frame).rc == {"tenant": "a"}
    assert Request.to_message(msgpack.unpackb(plain)).rc is None


class Reminded(Grain):
    async def receive_reminder(self, name: str, status: Any) -> None:
        ORDER.append(f"reminder {name}")

    async def on_incoming_call(self, call: GrainCall) -> Any:
        ORDER.append("grain filter")
        return await call.proceed()


async def test_runtime_hooks_pass_only_filters_marked_for_them():
    ORDER.clear()

    async def plain(call: GrainCall) -> Any:
        ORDER.append("plain")
        return await call.proceed()

    @system_filter
    async def marked(call: GrainCall) -> Any:
        ORDER.append(f"marked {call.method}")
        return await call.proceed()

    async with TestCluster(grains=[Reminded], call_filters=[plain, marked]) as cluster:
        grain_id = cluster.get_grain(Reminded, "r").grain_id
        await cluster.silo.dispatcher.call(grain_id, "receive_reminder", ("daily", None),
                                           None, None)
    assert ORDER == ["marked receive_reminder", "reminder daily"]
