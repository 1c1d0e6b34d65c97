"""Call chains and admission: one-way calls, read-only requests, reentrant self-calls.

Bounded by ``asyncio.timeout`` (or a call timeout where the failure would be a hang);
waits on probe events and runtime state, never on sleeps.
"""

from __future__ import annotations

import asyncio

from orleanspy import (
    Grain,
    call_chain_reentrant,
    one_way,
    read_only,
    reentrant,
)

WAIT = 5.0


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


# A one-way call does not carry the sender's call chain
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


# A chain-reentrant write does not replace a blocking read-only request
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


# A reentrant grain's own interleaved call after deactivate_on_idle completes
async def test_reentrant_self_call_after_deactivate_on_idle_completes(make_silo):
    silo = await make_silo(ReentrantLeave, response_timeout=1.0)
    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(ReentrantLeave, "a").outer() == "inner"
