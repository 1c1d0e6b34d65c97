"""Subscription filters: data (an expression with a grammar and a size limit), evaluated by
the pulling agent before delivery. A filtered-out event costs its consumer no grain turn (no
message is sent); the agent counts it as ``filtered``."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.streams import FilterError, PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.filters import MAX_LENGTH, compile_filter
from orleanspy.streams.provider import implicit_subscription

WAIT = 30.0
GOT: dict[str, list[Any]] = defaultdict(list)
TURNS: dict[str, int] = defaultdict(int)  # deliveries that reached the grain (grain turns)
CHANGED: list[asyncio.Event] = []  # set when a consumer got an event (one per test)


@dataclass
class Reading:
    kind: str
    value: int


class Picky(Grain):
    async def join(self, key: str, expression: str | None) -> None:
        stream = self.get_stream_provider("s").get_stream("f", key)
        await stream.subscribe(self.on_next, filter=expression)

    async def on_next(self, item: Any, token: Any) -> None:
        GOT[self.key].append(item)
        CHANGED[0].set()

    async def __orleanspy_stream_deliver__(self, *args: Any) -> Any:
        TURNS[self.key] += 1
        return await super().__orleanspy_stream_deliver__(*args)


# -- the grammar ------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "event", "key", "expected"), [
    ('event.kind == "rare"', {"kind": "rare"}, "k", True),
    ('event.kind == "rare"', {"kind": "common"}, "k", False),
    ('event.kind == "rare"', Reading("rare", 1), "k", True),  # a dataclass field
    ('event.kind == "rare"', "not a dict", "k", False),  # no field: null
    ("event.value >= 10 and event.value < 20", {"value": 15}, "k", True),
    ("event.value >= 10 and event.value < 20", {"value": 20}, "k", False),
    ("not (event.value > 1 or event.value < -1)", {"value": 0}, "k", True),
    ('key in ["eu-1", "eu-2"]', {}, "eu-2", True),
    ('"x" in event.tags', {"tags": ["x", "y"]}, "k", True),
    ("event.tags[1] == 2.5", {"tags": [1, 2.5]}, "k", True),
    ('event["a b"].c == null', {"a b": {}}, "k", True),
    ("event.value < 1", {"value": "text"}, "k", False),  # not ordered: false, no error
    ("event.missing", {}, "k", False),
    ("event.flag", {"flag": True}, "k", True),
    ("key.region == true", {}, {"region": True}, True),
])
def test_a_filter_evaluates_its_expression(text: str, event: Any, key: Any,
                                           expected: bool) -> None:
    assert compile_filter(text)(event, key) is expected


@pytest.mark.parametrize(("text", "problem"), [
    ("event.kind = 1", "at 11: unexpected text"),
    ("event.__class__ == 1", "field name not starting with '_'"),
    ('__import__("os")', "unexpected '__import__'"),
    ("len(event) > 1", "unexpected 'len'"),
    ("(event.a", "expected ')'"),
    ("event.a ==", "ends where a value is expected"),
    ("1 or " * 70 + "1", "more than 64 values"),
    ("event." + "a" * MAX_LENGTH, f"more than {MAX_LENGTH}"),
])
def test_a_filter_that_is_not_in_the_grammar_is_refused_naming_the_problem(
    text: str, problem: str
) -> None:
    with pytest.raises(FilterError, match="filter") as caught:
        compile_filter(text)
    assert problem in str(caught.value)


class Shape:  # not a dataclass: its attributes are not fields a filter may read
    kind = "rare"


def test_a_filter_reads_fields_of_dicts_and_dataclasses_only() -> None:
    assert compile_filter('event.kind == "rare"')(Shape(), "k") is False


# -- the agent --------------------------------------------------------------------------------
@pytest.fixture
async def silo_for(tmp_path: Path) -> Any:
    GOT.clear()
    TURNS.clear()
    CHANGED[:] = [asyncio.Event()]
    silos: list[Silo] = []

    async def start(adapter: str, grains: list[type] | None = None) -> Silo:
        factory: QueueAdapterFactory = (
            MemoryAdapterFactory() if adapter == "memory"
            else SqliteAdapterFactory(str(tmp_path / "q.db")))
        options = StreamProviderOptions(total_queues=1, pull_period=0.01, batch_size=1)
        silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0),
                    grains=[Picky, *(grains or [])],
                    stream_providers={"s": PersistentStreamProvider(factory, options)})
        await silo.start()
        silos.append(silo)
        return silo

    yield start
    for silo in silos:
        await silo.stop()


@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
async def test_a_filtered_out_event_costs_no_grain_turn_and_is_counted(
    adapter: str, silo_for: Any
) -> None:
    silo = await silo_for(adapter)
    await silo.get_grain(Picky, "picky").join("k", 'event.kind == "rare"')
    await silo.get_grain(Picky, "all").join("k", None)
    stream = silo.stream_providers["s"].get_stream("f", "k")
    rare = {37, 99}
    for i in range(100):
        await stream.on_next({"kind": "rare" if i in rare else "common", "i": i})
    async with asyncio.timeout(WAIT):
        while len(GOT["all"]) < 100 or len(GOT["picky"]) < 2:
            CHANGED[0].clear()
            await CHANGED[0].wait()
    assert [e["i"] for e in GOT["picky"]] == [37, 99]
    assert [e["i"] for e in GOT["all"]] == list(range(100))
    # batch_size=1: one delivery per event. The unfiltered consumer took 100 turns, the
    # filtered one 2: the 98 others were never sent to it.
    assert TURNS["all"] == 100 and TURNS["picky"] == 2
    (agent,) = silo.stream_providers["s"].agents.values()
    stats = agent.snapshot()
    assert stats.filtered == 98 and stats.delivered == 102


async def test_subscribe_with_an_invalid_filter_is_refused_and_stores_nothing(
    silo_for: Any
) -> None:
    silo = await silo_for("memory")
    picky = silo.get_grain(Picky, "bad")
    with pytest.raises(FilterError, match="unexpected text"):
        await picky.join("k2", "event.kind = 'rare'")
    await silo.get_grain(Picky, "all").join("k2", None)
    await silo.stream_providers["s"].get_stream("f", "k2").on_next({"kind": "rare"})
    async with asyncio.timeout(WAIT):
        while not GOT["all"]:
            CHANGED[0].clear()
            await CHANGED[0].wait()
    assert TURNS["bad"] == 0 and GOT["bad"] == []


@implicit_subscription("f", filter="event.kind == \"rare\" and key == \"k3\"")
class PickyImplicit(Grain):
    async def on_next(self, item: Any, token: Any) -> None:
        GOT[f"implicit-{self.key}"].append(item)
        CHANGED[0].set()

    async def __orleanspy_stream_deliver__(self, *args: Any) -> Any:
        TURNS[f"implicit-{self.key}"] += 1
        return await super().__orleanspy_stream_deliver__(*args)


async def test_an_implicit_subscription_takes_its_class_s_filter(silo_for: Any) -> None:
    silo = await silo_for("memory", [PickyImplicit])
    await silo.get_grain(Picky, "all").join("k3", None)
    stream = silo.stream_providers["s"].get_stream("f", "k3")
    for i in range(20):
        await stream.on_next({"kind": "rare" if i == 7 else "common", "i": i})
    async with asyncio.timeout(WAIT):
        while len(GOT["all"]) < 20 or not GOT["implicit-k3"]:
            CHANGED[0].clear()
            await CHANGED[0].wait()
    assert [e["i"] for e in GOT["implicit-k3"]] == [7] and TURNS["implicit-k3"] == 1


def test_an_implicit_subscription_with_an_invalid_filter_is_refused_at_the_class() -> None:
    with pytest.raises(FilterError, match="unexpected 'kind'"):
        implicit_subscription("f", filter="kind == 1")
