"""Turn-based scheduling: no interleaving unless marked, and call-chain reentrancy."""

from __future__ import annotations

import asyncio
import time

import pytest

from orleanspy import (
    DeadlockError,
    Grain,
    allow_call_chain_reentrancy,
    always_interleave,
    call_chain_reentrant,
    one_way,
    read_only,
    reentrant,
)

WAIT = 5.0


async def _step(grain: Grain, tag: str) -> str:
    probe = grain.silo.probe
    probe.record(("start", tag))
    await probe.gate(tag).wait()
    probe.record(("end", tag))
    return tag


class Turns(Grain):
    async def work(self, tag: str) -> str:
        return await _step(self, tag)

    @read_only
    async def read(self, tag: str) -> str:
        return await _step(self, tag)

    @always_interleave
    async def peek(self, tag: str) -> str:
        return await _step(self, tag)


@reentrant
class ReentrantTurns(Turns):
    pass


class SlowlyActivatedTurns(Turns):
    async def on_activate(self) -> None:
        await self.silo.probe.gate("activated").wait()


@reentrant
class SlowlyActivatedReentrantTurns(SlowlyActivatedTurns):
    pass


# -- call chains --------------------------------------------------------------------------
class ChainA(Grain):
    async def call_b(self, b_key: str, suspend: bool = False) -> str:
        return await self.get_grain(ChainB, b_key).call_back(
            self.grain_id.type_name, self.key, suspend
        )

    async def call_b_in_scope(self, b_key: str, suspend: bool = False) -> str:
        with allow_call_chain_reentrancy():
            return await self.call_b(b_key, suspend)

    async def call_b_in_grain_scope(self, b_key: str) -> str:
        with self.allow_call_chain_reentrancy():
            return await self.call_b(b_key)

    async def call_b_after_scope(self, b_key: str) -> str:
        with allow_call_chain_reentrancy():
            first = await self.call_b(b_key)
        assert first == "A re-entered"
        return await self.call_b(b_key)

    async def call_self(self) -> str:
        return await self.get_grain(type(self), self.key).echo()

    async def call_self_in_scope(self) -> str:
        with allow_call_chain_reentrancy():
            return await self.get_grain(type(self), self.key).echo()

    async def call_b_then_c(self, b_key: str, c_key: str) -> str:
        return await self.get_grain(ChainB, b_key).call_c(c_key)

    async def call_b_then_c_in_scope(self, b_key: str, c_key: str) -> str:
        with allow_call_chain_reentrancy():
            return await self.get_grain(ChainB, b_key).call_c(c_key)

    async def echo(self) -> str:
        return "A re-entered"

    @one_way
    async def note(self, tag: str) -> None:
        self.silo.probe.record(("note", tag))

    async def note_self(self) -> str:
        await self.get_grain(type(self), self.key).note("from-self")
        self.silo.probe.record("sent")
        return "sent"

    async def hold(self, tag: str) -> str:
        return await _step(self, tag)


@call_chain_reentrant
class CcrA(ChainA):
    pass


@reentrant
class ReentrantA(ChainA):
    pass


class InterleavingEchoA(ChainA):
    @always_interleave
    async def echo(self) -> str:
        return "A re-entered"


class ChainB(Grain):
    async def call_back(self, a_type: str, a_key: str, suspend: bool) -> str:
        if suspend:
            await asyncio.sleep(0)  # continue in a task: the callback is not inline any more
        return await self.get_grain(a_type, a_key).echo()

    async def call_c(self, c_key: str) -> str:
        return await self.get_grain(ChainC, c_key).call_b_back(self.key)

    async def back(self) -> str:
        return "B re-entered"


class ChainC(Grain):
    async def call_b_back(self, b_key: str) -> str:
        return await self.get_grain(ChainB, b_key).back()


GRAINS = (Turns, ReentrantTurns, SlowlyActivatedTurns, SlowlyActivatedReentrantTurns,
          ChainA, CcrA, ReentrantA,
          InterleavingEchoA, ChainB, ChainC)


def starts(log: list) -> list[str]:
    return [e[1] for e in log if e[0] == "start"]


async def queued(probe, silo, ref, n: int) -> None:
    """Wait until ``n`` messages wait in the mailbox of ``ref``'s activation."""
    await probe.until(
        lambda: (a := silo.catalog.get(ref.grain_id)) is not None
        and a.statistics().queued == n
    )


async def b_ends_inside_a(probe, first: asyncio.Task, second: asyncio.Task) -> None:
    """Both turns started ("a" first): "b" ends while "a" still waits, then "a" ends."""
    probe.open("b")
    async with asyncio.timeout(WAIT):
        assert await second == "b"
    assert not first.done()

    probe.open("a")
    async with asyncio.timeout(WAIT):
        assert await first == "a"
    assert probe.log == [("start", "a"), ("start", "b"), ("end", "b"), ("end", "a")]


# -- one turn at a time -------------------------------------------------------------------
async def test_turn_second_call_waits_until_first_finishes(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    first = asyncio.create_task(ref.work("a"))
    await probe.wait_logged("start", "a")

    second = asyncio.create_task(ref.work("b"))
    await queued(probe, silo, ref, 1)
    probe.open("b")
    assert ("start", "b") not in probe.log

    probe.open("a")
    async with asyncio.timeout(WAIT):
        assert await asyncio.gather(first, second) == ["a", "b"]
    assert probe.log == [("start", "a"), ("end", "a"), ("start", "b"), ("end", "b")]


async def test_turn_queued_calls_run_in_arrival_order(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    blocker = asyncio.create_task(ref.work("blocker"))
    await probe.wait_logged("start", "blocker")
    tags = [f"c{i}" for i in range(20)]
    calls = []
    for tag in tags:
        probe.open(tag)
        calls.append(asyncio.create_task(ref.work(tag)))
    await queued(probe, silo, ref, 20)

    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(blocker, *calls)

    assert starts(probe.log) == ["blocker", *tags]
    # no turn started before the previous one ended
    for i in range(0, len(probe.log), 2):
        assert probe.log[i][0] == "start"
        assert probe.log[i + 1] == ("end", probe.log[i][1])


async def test_turn_reentrant_class_interleaves_requests(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(ReentrantTurns, 1)
    first = asyncio.create_task(ref.work("a"))
    await probe.wait_logged("start", "a")

    second = asyncio.create_task(ref.work("b"))
    await probe.wait_logged("start", "b")
    await b_ends_inside_a(probe, first, second)


async def test_turn_reentrant_class_interleaves_requests_queued_while_it_activated(
        make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(SlowlyActivatedReentrantTurns, 1)
    first = asyncio.create_task(ref.work("a"))
    second = asyncio.create_task(ref.work("b"))
    await queued(probe, silo, ref, 2)

    probe.open("activated")
    await probe.wait_logged("start", "b")
    await b_ends_inside_a(probe, first, second)


async def test_turn_requests_queued_while_it_activated_start_by_the_same_rules(
        make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(SlowlyActivatedTurns, 1)
    first = asyncio.create_task(ref.work("a"))
    second = asyncio.create_task(ref.work("b"))
    peek = asyncio.create_task(ref.peek("p"))
    await queued(probe, silo, ref, 3)

    probe.open("activated")
    await probe.wait_logged("start", "p")  # always-interleave passes the queued "b"
    probe.open("p")
    probe.open("b")
    async with asyncio.timeout(WAIT):
        assert await peek == "p"
    assert ("start", "b") not in probe.log

    probe.open("a")
    async with asyncio.timeout(WAIT):
        assert await asyncio.gather(first, second) == ["a", "b"]
    assert starts(probe.log) == ["a", "p", "b"]


async def test_turn_always_interleave_method_runs_during_blocked_request(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    first = asyncio.create_task(ref.work("a"))
    await probe.wait_logged("start", "a")

    probe.open("peek")
    async with asyncio.timeout(WAIT):
        assert await ref.peek("peek") == "peek"

    assert not first.done()
    probe.open("a")
    async with asyncio.timeout(WAIT):
        await first
    assert probe.log == [("start", "a"), ("start", "peek"), ("end", "peek"), ("end", "a")]


async def test_turn_normal_request_does_not_interleave_with_always_interleave_one(
    make_silo, probe
):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    blocker = asyncio.create_task(ref.work("a"))
    await probe.wait_logged("start", "a")
    peek = asyncio.create_task(ref.peek("peek"))
    await probe.wait_logged("start", "peek")

    normal = asyncio.create_task(ref.work("b"))
    await queued(probe, silo, ref, 1)
    probe.open("peek")
    probe.open("b")
    async with asyncio.timeout(WAIT):
        await peek
    assert ("start", "b") not in probe.log

    probe.open("a")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(blocker, normal)
    assert starts(probe.log) == ["a", "peek", "b"]


async def test_turn_always_interleave_runs_during_blocked_request_with_queued_requests(
    make_silo, probe
):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    blocker = asyncio.create_task(ref.work("a"))
    await probe.wait_logged("start", "a")
    probe.open("b")
    waiting = asyncio.create_task(ref.work("b"))
    await queued(probe, silo, ref, 1)

    probe.open("peek")
    try:
        async with asyncio.timeout(1.0):
            assert await ref.peek("peek") == "peek"
    finally:
        probe.open("a")
        async with asyncio.timeout(WAIT):
            await asyncio.gather(blocker, waiting)


async def test_turn_read_only_calls_overlap(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    r1 = asyncio.create_task(ref.read("r1"))
    await probe.wait_logged("start", "r1")

    r2 = asyncio.create_task(ref.read("r2"))
    await probe.wait_logged("start", "r2")  # times out if r2 waits for r1

    probe.open("r2")
    probe.open("r1")
    async with asyncio.timeout(WAIT):
        assert await asyncio.gather(r1, r2) == ["r1", "r2"]
    assert starts(probe.log) == ["r1", "r2"]


async def test_turn_normal_request_waits_for_running_read_only(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    reader = asyncio.create_task(ref.read("r"))
    await probe.wait_logged("start", "r")

    writer = asyncio.create_task(ref.work("w"))
    await queued(probe, silo, ref, 1)
    probe.open("w")
    assert ("start", "w") not in probe.log

    probe.open("r")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(reader, writer)
    assert probe.log == [("start", "r"), ("end", "r"), ("start", "w"), ("end", "w")]


async def test_turn_read_only_waits_for_running_normal_request(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    writer = asyncio.create_task(ref.work("w"))
    await probe.wait_logged("start", "w")

    reader = asyncio.create_task(ref.read("r"))
    await queued(probe, silo, ref, 1)
    probe.open("r")
    assert ("start", "r") not in probe.log

    probe.open("w")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(reader, writer)
    assert probe.log == [("start", "w"), ("end", "w"), ("start", "r"), ("end", "r")]


async def test_turn_queued_read_only_calls_run_together_after_normal_request(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(Turns, 1)
    writer = asyncio.create_task(ref.work("w"))
    await probe.wait_logged("start", "w")
    readers = [asyncio.create_task(ref.read(f"r{i}")) for i in range(3)]
    await queued(probe, silo, ref, 3)

    probe.open("w")
    await probe.wait_for(lambda log: starts(log) == ["w", "r0", "r1", "r2"])
    assert not any(r.done() for r in readers)  # all three run at once

    for i in range(3):
        probe.open(f"r{i}")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(writer, *readers)


# -- call-chain reentrancy and deadlocks --------------------------------------------------
@pytest.mark.timing
@pytest.mark.parametrize("suspend", [False, True], ids=["inline", "after-suspension"])
async def test_call_chain_a_b_a_raises_deadlock_error_fast(make_silo, suspend):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    start = time.monotonic()
    with pytest.raises(DeadlockError) as info:
        async with asyncio.timeout(WAIT):
            await silo.get_grain(ChainA, "a").call_b("b", suspend)
    elapsed = time.monotonic() - start

    assert elapsed < 1.0
    assert info.value.chain == ("ChainA/a", "ChainB/b", "ChainA/a")
    assert "ChainA/a -> ChainB/b -> ChainA/a" in str(info.value)


@pytest.mark.timing
async def test_call_chain_self_call_raises_deadlock_error_fast(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    start = time.monotonic()
    with pytest.raises(DeadlockError) as info:
        async with asyncio.timeout(WAIT):
            await silo.get_grain(ChainA, "a").call_self()

    assert time.monotonic() - start < 1.0
    assert info.value.chain == ("ChainA/a", "ChainA/a")


async def test_call_chain_cycle_not_through_the_origin_raises_deadlock_error(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    start = time.monotonic()
    with pytest.raises(DeadlockError) as info:
        async with asyncio.timeout(WAIT):
            await silo.get_grain(ChainA, "a").call_b_then_c("b", "c")

    assert time.monotonic() - start < 1.0
    assert info.value.chain == ("ChainA/a", "ChainB/b", "ChainC/c", "ChainB/b")


async def test_call_chain_deadlock_leaves_grains_usable(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)
    ref = silo.get_grain(ChainA, "a")
    with pytest.raises(DeadlockError):
        await ref.call_b("b", True)

    assert await ref.echo() == "A re-entered"
    assert await ref.call_b_in_scope("b") == "A re-entered"


@pytest.mark.parametrize("suspend", [False, True], ids=["inline", "after-suspension"])
async def test_call_chain_reentrant_class_lets_a_b_a_proceed(make_silo, suspend):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(CcrA, "a").call_b("b", suspend) == "A re-entered"


@pytest.mark.parametrize("suspend", [False, True], ids=["inline", "after-suspension"])
async def test_call_chain_scope_lets_a_b_a_proceed(make_silo, suspend):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(ChainA, "a").call_b_in_scope("b", suspend) == "A re-entered"


async def test_call_chain_grain_scope_method_lets_a_b_a_proceed(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(ChainA, "a").call_b_in_grain_scope("b") == "A re-entered"


async def test_call_chain_scope_ends_with_its_block(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    with pytest.raises(DeadlockError):
        async with asyncio.timeout(WAIT):
            await silo.get_grain(ChainA, "a").call_b_after_scope("b")


async def test_call_chain_self_call_proceeds_in_scope_and_on_reentrant_classes(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(ChainA, "a").call_self_in_scope() == "A re-entered"
        assert await silo.get_grain(CcrA, "a").call_self() == "A re-entered"
        assert await silo.get_grain(ReentrantA, "a").call_self() == "A re-entered"


async def test_call_chain_a_b_a_proceeds_when_target_method_always_interleaves(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(InterleavingEchoA, "a").call_b("b", True) == "A re-entered"


async def test_call_chain_reentrant_class_lets_a_b_a_proceed_via_client(make_cluster):
    cluster = await make_cluster(*GRAINS)

    async with asyncio.timeout(WAIT):
        assert await cluster.client.get_grain(CcrA, "a").call_b("b", True) == "A re-entered"


async def test_call_chain_a_b_a_raises_deadlock_error_via_client(make_cluster):
    cluster = await make_cluster(*GRAINS, response_timeout=30.0)

    start = time.monotonic()
    with pytest.raises(DeadlockError) as info:
        async with asyncio.timeout(WAIT):
            await cluster.client.get_grain(ChainA, "a").call_b("b", True)

    assert time.monotonic() - start < 1.0
    assert info.value.chain == ("ChainA/a", "ChainB/b", "ChainA/a")


async def test_call_chain_deadlock_detected_fast_when_requests_are_queued(make_silo, probe):
    # a short call timeout only bounds how long the failing variant takes to clean up
    silo = await make_silo(*GRAINS, response_timeout=1.5)
    ref = silo.get_grain(ChainA, "a")
    holder = asyncio.create_task(ref.hold("h"))
    await probe.wait_logged("start", "h")
    cycle = asyncio.create_task(ref.call_b("b", True))
    probe.open("later")
    later = asyncio.create_task(ref.hold("later"))
    await queued(probe, silo, ref, 2)

    probe.open("h")
    try:
        with pytest.raises(DeadlockError):
            async with asyncio.timeout(1.0):
                await cycle
    finally:
        async with asyncio.timeout(WAIT):
            await asyncio.gather(holder, later, cycle, return_exceptions=True)


async def test_call_chain_reentrant_class_proceeds_when_requests_are_queued(make_silo, probe):
    silo = await make_silo(*GRAINS, response_timeout=1.5)
    ref = silo.get_grain(CcrA, "a")
    holder = asyncio.create_task(ref.hold("h"))
    await probe.wait_logged("start", "h")
    cycle = asyncio.create_task(ref.call_b("b", True))
    probe.open("later")
    later = asyncio.create_task(ref.hold("later"))
    await queued(probe, silo, ref, 2)

    probe.open("h")
    try:
        async with asyncio.timeout(1.0):
            assert await cycle == "A re-entered"
    finally:
        async with asyncio.timeout(WAIT):
            await asyncio.gather(holder, later, cycle, return_exceptions=True)


async def test_call_chain_scope_does_not_extend_to_callee_grains(make_silo):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    with pytest.raises(DeadlockError) as info:
        async with asyncio.timeout(WAIT):
            await silo.get_grain(ChainA, "a").call_b_then_c_in_scope("b", "c")

    assert info.value.chain == ("ChainA/a", "ChainB/b", "ChainC/c", "ChainB/b")


async def test_call_chain_one_way_self_call_is_queued_not_a_deadlock(make_silo, probe):
    silo = await make_silo(*GRAINS, response_timeout=30.0)

    async with asyncio.timeout(WAIT):
        assert await silo.get_grain(ChainA, "a").note_self() == "sent"
        await probe.wait_logged("note", "from-self")

    assert probe.log == ["sent", ("note", "from-self")]
