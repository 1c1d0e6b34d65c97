"""System targets: explicitly created, addressable, turn-based, never collected."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import MessageRejectedError, Silo, SiloOptions
from orleanspy.runtime.system_target import SystemTarget


class Agent(SystemTarget):
    def __init__(self, queue: int) -> None:
        self.queue = queue
        self.calls: list[int] = []
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

    async def read(self, n: int) -> tuple[int, int]:
        self.calls.append(n)
        return self.queue, n

    async def slow(self) -> None:
        self.started.set()
        await self.gate.wait()


async def test_system_target_is_addressable_by_key_and_keeps_its_object() -> None:
    async with Silo(SiloOptions(gateway_port=None)) as silo:
        agent = Agent(queue=3)
        ref = silo.add_system_target(agent, 3)
        assert await ref.read(7) == (3, 7)
        assert await silo.get_system_target(Agent, 3).read(8) == (3, 8)
        assert agent.calls == [7, 8]


async def test_system_target_runs_one_request_at_a_time() -> None:
    async with Silo(SiloOptions(gateway_port=None)) as silo:
        agent = Agent(queue=0)
        ref = silo.add_system_target(agent, 0)
        slow = asyncio.create_task(ref.slow())
        await asyncio.wait_for(agent.started.wait(), 5)
        second = asyncio.create_task(ref.read(1))
        await asyncio.sleep(0)  # let the second call reach the mailbox
        assert agent.calls == []
        agent.gate.set()
        async with asyncio.timeout(5):
            await slow
            assert await second == (0, 1)


async def test_system_target_is_not_created_virtually() -> None:
    async with Silo(SiloOptions(gateway_port=None)) as silo:
        silo.register_grain_class(Agent)
        with pytest.raises(MessageRejectedError) as err:
            await silo.get_system_target(Agent, 99).read(1)
        assert err.value.kind == "unknown_system_target"


async def test_system_target_is_never_collected() -> None:
    async with Silo(SiloOptions(gateway_port=None)) as silo:
        silo.add_system_target(Agent(queue=1), 1)
        assert silo.collector.collect_once(age=0.0) == 0
        assert await silo.get_system_target(Agent, 1).read(2) == (1, 2)
