"""Effectively-once consumers: the grain's state write stores the last handled token per
subscription, and a redelivery at or before it is dropped before the handler runs.

In-process, without an agent: a "crash" is a new instance of the grain reading the stored
record (what a reactivation on another silo does), and a redelivery is the same events
delivered again (what the queue's next owner does with unacknowledged events)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import structlog

from orleanspy import Grain, Silo, SiloOptions, persistent_state, stream_handler
from orleanspy.errors import ConfigurationError, StreamDeliveryInterrupted
from orleanspy.grains.state import PersistentState
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import Codec
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.streams import (
    PersistentStreamProvider,
    SequenceToken,
    StreamProviderOptions,
    effectively_once,
)
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.effectively_once import handled_prefix
from orleanspy.streams.provider import implicit_subscription

SUB = "implicit:Tally"


@dataclass
class Seen:
    items: list[int] = field(default_factory=list)


@effectively_once
@implicit_subscription("n")
class Tally(Grain):
    """Applies each event to its state; writes every ``write_every`` events (1: each)."""

    state = persistent_state(Seen)
    write_every = 1
    fail_on: int | None = None  # raise on this item (after writing, with ``fail_after_write``)
    fail_after_write = False
    calls: list[int]

    async def on_next(self, item: int, token: SequenceToken) -> None:
        self.calls.append(item)
        if item == self.fail_on and not self.fail_after_write:
            raise RuntimeError(f"boom on {item}")
        self.state.value.items.append(item)
        if len(self.state.value.items) % self.write_every == 0:
            await self.state.write()
        if item == self.fail_on:
            raise RuntimeError(f"boom on {item} after the write")


@effectively_once
@implicit_subscription("n")
class BatchTally(Grain):
    state = persistent_state(Seen)
    batches: list[list[int]]

    async def on_next_batch(self, events: list[tuple[int, SequenceToken]]) -> None:
        self.batches.append([item for item, _ in events])
        self.state.value.items.extend(item for item, _ in events)
        await self.state.write()


@implicit_subscription("n")
class Plain(Grain):
    state = persistent_state(Seen)

    async def on_next(self, item: int, token: SequenceToken) -> None: ...


async def activate(cls: type[Any], storage: MemoryGrainStorage, **attrs: Any) -> Any:
    """A fresh activation of ``cls`` "k" on ``storage``: its state read as the runtime does."""
    grain_id = GrainId(cls.__name__, "k")
    grain = cls.__new__(cls)
    grain._orleanspy_activation = SimpleNamespace(
        grain_id=grain_id, silo=SimpleNamespace(log=structlog.get_logger()))
    spec = cls.state
    ps = PersistentState(spec.factory, spec.name, storage, grain_id, Codec(),
                         stream_tokens=spec.stream_tokens)
    await ps.read()
    grain.__dict__["_orleanspy_states"] = {"state": ps}
    grain.calls, grain.batches = [], []
    for name, value in attrs.items():
        setattr(grain, name, value)
    return grain


def events(numbers: range, per_container: int = 1) -> list[tuple[int, SequenceToken]]:
    """Event n at token (n // per_container, n % per_container)."""
    return [(n, SequenceToken(n // per_container, n % per_container)) for n in numbers]


async def deliver(grain: Any, evs: list[Any], sub: str = SUB, namespace: str = "n") -> Any:
    return await grain.__orleanspy_stream_deliver__(sub, namespace, "k", evs)


async def stored(cls: type[Any], storage: MemoryGrainStorage) -> list[int]:
    return list((await activate(cls, storage)).state.value.items)


def test_handled_prefix_counts_the_events_at_or_before_the_token() -> None:
    evs = events(range(10), per_container=3)  # tokens 0.0 0.1 0.2 1.0 ... 3.0
    assert handled_prefix(evs, (1, 1)) == 5
    assert handled_prefix(evs, (-1, 0)) == 0
    assert handled_prefix(evs, (3, 0)) == 10
    assert handled_prefix(evs, (0, 5)) == 3  # past the container's last index: all of it


async def test_a_redelivery_after_a_crash_is_dropped_before_the_handler_runs() -> None:
    storage = MemoryGrainStorage()
    grain = await activate(Tally, storage)
    assert await deliver(grain, events(range(5))) is None
    # crash before the acknowledgement: the next owner delivers 0..4 again, then 5..7
    again = await activate(Tally, storage)
    assert await deliver(again, events(range(8))) is None
    assert again.calls == [5, 6, 7]
    assert await stored(Tally, storage) == list(range(8))


async def test_a_batch_loses_its_handled_prefix_and_the_rest_is_delivered() -> None:
    storage = MemoryGrainStorage()
    grain = await activate(BatchTally, storage)
    await deliver(grain, events(range(4), per_container=2))
    again = await activate(BatchTally, storage)
    await deliver(again, events(range(2, 7), per_container=2))  # 2, 3 handled already
    await deliver(again, events(range(2, 7), per_container=2))  # all handled: no turn
    assert again.batches == [[4, 5, 6]]
    assert await stored(BatchTally, storage) == list(range(7))


async def test_tokens_not_yet_written_come_with_the_next_write_and_state_stays_exact() -> None:
    """The handler writes every third event: a crash loses the tokens of the events after
    the last write together with their effect on the state, so they are handled again."""
    storage = MemoryGrainStorage()
    grain = await activate(Tally, storage, write_every=3)
    await deliver(grain, events(range(5)))  # written after 0, 1, 2; 3 and 4 in memory only
    assert await stored(Tally, storage) == [0, 1, 2]
    again = await activate(Tally, storage, write_every=3)
    await deliver(again, events(range(6)))
    assert again.calls == [3, 4, 5]
    assert await stored(Tally, storage) == list(range(6))


async def test_a_failed_handler_that_did_not_write_is_retried() -> None:
    storage = MemoryGrainStorage()
    grain = await activate(Tally, storage, fail_on=2)
    with pytest.raises(StreamDeliveryInterrupted) as caught:
        await deliver(grain, events(range(4)))
    assert caught.value.args[0] == 2  # 0 and 1 handled
    grain.fail_on = None
    await deliver(grain, events(range(2, 4)))  # the agent retries from the failed event
    assert grain.calls == [0, 1, 2, 2, 3]
    assert await stored(Tally, storage) == [0, 1, 2, 3]


async def test_a_failure_after_a_dropped_prefix_counts_the_prefix_as_handled() -> None:
    storage = MemoryGrainStorage()
    grain = await activate(Tally, storage)
    await deliver(grain, events(range(2)))
    grain.fail_on = 2
    with pytest.raises(StreamDeliveryInterrupted) as caught:
        await deliver(grain, events(range(4)))  # 0, 1 dropped; 2 fails
    assert caught.value.args[0] == 2  # the agent retries from 2, not from 0


async def test_a_failed_handler_that_wrote_first_counts_as_handled() -> None:
    storage = MemoryGrainStorage()
    grain = await activate(Tally, storage, fail_on=0, fail_after_write=True)
    with pytest.raises(RuntimeError, match="after the write"):
        await deliver(grain, events(range(2)))
    grain.fail_on = None
    await deliver(grain, events(range(2)))  # the retry: 0 is in the stored record
    assert grain.calls == [0, 1]
    assert await stored(Tally, storage) == [0, 1]


def subscribed(grain: Any, *subs: str) -> Any:
    """``grain`` with explicit subscriptions ``subs`` handled by its ``on_next``."""
    grain._orleanspy_stream_handlers = {
        s: SimpleNamespace(on_next=grain.on_next, on_next_batch=None) for s in subs}
    return grain


async def test_each_subscription_has_its_own_token() -> None:
    storage = MemoryGrainStorage()
    grain = subscribed(await activate(Tally, storage), "a", "b")
    await deliver(grain, events(range(3)), sub="a")
    await deliver(grain, events(range(10, 12)), sub="b")
    again = subscribed(await activate(Tally, storage), "a", "b")
    assert again.state.stream_tokens == {"n/a": (2, 0), "n/b": (11, 0)}
    await deliver(again, events(range(4)), sub="b")  # b is past these: all dropped
    await deliver(again, events(range(4)), sub="a")
    await deliver(again, events(range(11, 13)), sub="b")
    assert again.calls == [3, 12]


async def test_the_streams_of_an_implicit_subscription_to_two_namespaces_are_apart() -> None:
    storage = MemoryGrainStorage()
    grain = await activate(Tally, storage)
    await deliver(grain, events(range(5, 8)), namespace="n")
    await deliver(grain, events(range(3)), namespace="m")  # same subscription id, another stream
    assert grain.calls == [5, 6, 7, 0, 1, 2]
    assert grain.state.stream_tokens == {"n/implicit:Tally": (7, 0), "m/implicit:Tally": (2, 0)}


async def test_clearing_the_state_forgets_the_tokens() -> None:
    storage = MemoryGrainStorage()
    grain = await activate(Tally, storage)
    await deliver(grain, events(range(3)))
    await grain.state.clear()
    await deliver(grain, events(range(3)))
    assert grain.calls == [0, 1, 2, 0, 1, 2]


async def test_a_record_written_before_opting_in_is_read_with_no_tokens() -> None:
    storage = MemoryGrainStorage()
    await storage.write(GrainId("Tally", "k"), "state", Codec().packb(Seen([7])), None)
    grain = await activate(Tally, storage)
    assert grain.state.value == Seen([7]) and grain.state.stream_tokens == {}
    assert not grain.state.is_dirty()
    await deliver(grain, events(range(1)))
    assert await stored(Tally, storage) == [7, 0]


def test_grains_that_do_not_opt_in_keep_the_plain_delivery() -> None:
    assert Plain.__orleanspy_stream_deliver__ is Grain.__orleanspy_stream_deliver__
    assert Plain.state.stream_tokens is False
    assert Tally.__orleanspy_stream_deliver__ is not Grain.__orleanspy_stream_deliver__


def test_a_subclass_marks_its_own_copy_of_an_inherited_state() -> None:
    @effectively_once
    class Child(Plain):
        pass

    assert Child.state.stream_tokens is True
    assert Plain.state.stream_tokens is False


def test_effectively_once_needs_one_named_persistent_state() -> None:
    with pytest.raises(ConfigurationError, match="0 persistent states"):
        effectively_once(type("NoState", (Grain,), {}))
    two = type("Two", (Grain,), {"a": persistent_state(Seen), "b": persistent_state(Seen)})
    with pytest.raises(ConfigurationError, match="state='attr'"):
        effectively_once(two)
    with pytest.raises(ConfigurationError, match="no persistent state of that name"):
        effectively_once(state="c")(two)
    assert effectively_once(state="b")(two).b.stream_tokens is True
    with pytest.raises(ConfigurationError, match="Grain subclass"):
        effectively_once(type("NotAGrain", (), {}))


# -- through a silo's pulling agent ----------------------------------------------------------
HANDLED: list[int] = []
TOKENS: dict[int, SequenceToken] = {}
ARRIVED: dict[int, asyncio.Event] = {}
RELEASE: list[asyncio.Event] = []


def arrived(item: int) -> asyncio.Event:
    return ARRIVED.setdefault(item, asyncio.Event())


@effectively_once
@implicit_subscription("eo")
class Ledger(Grain):
    state = persistent_state(Seen)

    def stream(self) -> Any:
        return self.get_stream_provider("s").get_stream("eo", self.key)

    async def on_next(self, item: int, token: SequenceToken) -> None:
        await self.again(item, token)

    @stream_handler
    async def again(self, item: int, token: SequenceToken) -> None:
        HANDLED.append(item)
        TOKENS[item] = token
        self.state.value.items.append(item)
        await self.state.write()
        arrived(item).set()

    async def rewind(self, token: SequenceToken) -> None:
        (handle,) = await self.stream().get_subscriptions()
        await handle.resume(self.again, token)

    async def items(self) -> list[int]:
        return list(self.state.value.items)


class Holder(Grain):
    """An explicit subscriber that keeps the stream's events cached until ``RELEASE``."""

    async def join(self, key: str) -> None:
        await self.get_stream_provider("s").get_stream("eo", key).subscribe(self.hold)

    @stream_handler
    async def hold(self, item: int, token: SequenceToken) -> None:
        await RELEASE[0].wait()


async def test_a_rewind_through_the_agent_redelivers_nothing_the_state_has() -> None:
    HANDLED.clear()
    ARRIVED.clear()
    RELEASE[:] = [asyncio.Event()]
    provider = PersistentStreamProvider(
        MemoryAdapterFactory(), StreamProviderOptions(total_queues=1, pull_period=0.01))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=2.0),
                grains=[Ledger, Holder], stream_providers={"s": provider})
    await silo.start()
    try:
        await silo.get_grain(Holder, "h").join("k")
        stream = provider.get_stream("eo", "k")
        for i in range(6):
            await stream.on_next(i)
        async with asyncio.timeout(10):
            await arrived(5).wait()
        ledger = silo.get_grain(Ledger, "k")
        await ledger.rewind(TOKENS[0])  # the agent delivers 0..5 again: all dropped
        await stream.on_next(6)
        async with asyncio.timeout(10):
            await arrived(6).wait()
        assert HANDLED[:] == list(range(7))
        assert await ledger.items() == list(range(7))
    finally:
        RELEASE[0].set()
        await silo.stop()
