"""A grain class's interleave predicate (``@may_interleave``): asked about a request that
finds the activation busy; True lets it run alongside, False queues it; an error it raises
is the caller's.

Interleaving is observed with probe gates; every wait is bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from orleanspy import ConfigurationError, Grain, may_interleave
from orleanspy.grains.interface import class_info
from orleanspy.testing import TestCluster

WAIT = 5.0
#: what the predicates were asked: (method, args, kwargs)
ASKED: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []


async def _step(grain: Grain, tag: str) -> str:
    probe = grain.silo.probe
    probe.record(("start", tag))
    await probe.gate(tag).wait()
    probe.record(("end", tag))
    return tag


class Lookups(Grain):
    """``work`` requests whose tag starts with "fast" interleave; nothing else does."""

    @may_interleave
    @staticmethod
    def fast_work(method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        ASKED.append((method, args, dict(kwargs)))
        if method == "boom":
            raise LookupError("the predicate cannot decide on boom")
        tag = args[0] if args else kwargs["tag"]
        return method == "work" and str(tag).startswith("fast")

    async def work(self, tag: str) -> str:
        return await _step(self, tag)

    async def boom(self) -> str:
        return "boomed"


class ClassLookups(Lookups):
    """The same rule as a classmethod, decorated in the other order, and inherited base
    predicate overridden."""

    prefix = "fast"

    @classmethod
    @may_interleave
    def fast_work(cls, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        ASKED.append((method, args, dict(kwargs)))
        tag = args[0] if args else kwargs["tag"]
        return method == "work" and str(tag).startswith(cls.prefix)


@pytest.fixture(autouse=True)
def _fresh_asked():
    ASKED.clear()


async def _call(ref: Any, tag: str, by_keyword: bool = False) -> asyncio.Task[Any]:
    return asyncio.create_task(ref.work(tag=tag) if by_keyword else ref.work(tag))


@pytest.mark.parametrize("cls", [Lookups, ClassLookups])
async def test_predicate_interleaves_only_the_requests_it_admits(make_silo, probe, cls):
    silo = await make_silo(cls)
    ref = silo.get_grain(cls, "g")
    slow = await _call(ref, "slow-1")
    await probe.wait_logged(("start", "slow-1"))
    assert ASKED == []  # an idle activation starts a request without asking

    queued = await _call(ref, "slow-2")
    fast = await _call(ref, "fast-1", by_keyword=True)  # admitted past the queued slow-2
    await probe.wait_logged(("start", "fast-1"))
    probe.open("fast-1")
    async with asyncio.timeout(WAIT):
        assert await fast == "fast-1"

    assert not slow.done()
    assert ("start", "slow-2") not in probe.log
    assert silo.catalog.get(ref.grain_id).statistics().queued == 1
    assert ASKED == [("work", ("slow-2",), {}), ("work", (), {"tag": "fast-1"})]

    probe.open("slow-1")
    probe.open("slow-2")
    async with asyncio.timeout(WAIT):
        assert await slow == "slow-1"
        assert await queued == "slow-2"
    order = [e for e in probe.log if e[0] in ("start", "end")]
    assert order.index(("end", "slow-1")) < order.index(("start", "slow-2"))
    assert len(ASKED) == 2  # asked once per request, not again when the queue moves


async def test_predicate_error_fails_that_request_only(make_silo, probe):
    silo = await make_silo(Lookups)
    ref = silo.get_grain(Lookups, "g")
    assert await ref.boom() == "boomed"  # idle: not asked, so no error
    slow = await _call(ref, "slow-1")
    await probe.wait_logged(("start", "slow-1"))

    with pytest.raises(LookupError, match="cannot decide on boom"):
        async with asyncio.timeout(WAIT):
            await ref.boom()

    assert silo.catalog.get(ref.grain_id).statistics().queued == 0  # never queued
    probe.open("slow-1")
    async with asyncio.timeout(WAIT):
        assert await slow == "slow-1"
    assert await ref.boom() == "boomed"


async def test_class_without_predicate_has_none():
    class Plain(Grain):
        async def work(self) -> None:
            pass

    assert class_info(Plain).may_interleave is None
    assert class_info(Lookups).may_interleave is not None


def test_predicate_must_be_static_or_class_method():
    class Instance(Grain):
        @may_interleave
        def decide(self, method: str, args: tuple[Any, ...], kwargs: Any) -> bool:
            return True

    with pytest.raises(ConfigurationError, match=r"Instance\.decide .*@staticmethod"):
        class_info(Instance)


def test_one_predicate_per_class():
    class Two(Grain):
        @may_interleave
        @staticmethod
        def a(method: str, args: tuple[Any, ...], kwargs: Any) -> bool:
            return True

        @may_interleave
        @staticmethod
        def b(method: str, args: tuple[Any, ...], kwargs: Any) -> bool:
            return True

    with pytest.raises(ConfigurationError, match=r"several @may_interleave predicates \(a, b\)"):
        class_info(Two)


def test_predicate_cannot_be_async():
    with pytest.raises(TypeError, match="not async"):

        @may_interleave
        async def decide(method: str, args: tuple[Any, ...], kwargs: Any) -> bool:
            return True



async def test_predicate_decides_for_gateway_requests_too(probe):
    async with TestCluster(grains=[Lookups]) as cluster:
        cluster.silo.probe = probe  # type: ignore[attr-defined]
        ref = cluster.get_grain(Lookups, "g")  # through the gateway
        probe.open("fast-1")
        slow = asyncio.create_task(ref.work("slow-1"))
        try:
            async with asyncio.timeout(WAIT):
                await probe.wait_logged(("start", "slow-1"))
                assert await ref.work(tag="fast-1") == "fast-1"
                with pytest.raises(LookupError, match="cannot decide on boom"):
                    await ref.boom()
                assert not slow.done()
        finally:
            probe.open_all()
            await asyncio.gather(slow, return_exceptions=True)
        assert ("work", (), {"tag": "fast-1"}) in ASKED
