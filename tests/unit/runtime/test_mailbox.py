"""Bounded mailboxes: each overflow policy, suspended requests, and self-calls."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, MailboxFullError, mailbox, one_way
from orleanspy.messaging.message import FLAG_FROM_CLIENT, Direction, Message
from orleanspy.runtime.mailbox import MAX_FORWARDED_BLOCKED

WAIT = 5.0
POLICIES = ["suspend", "reject", "drop_newest", "drop_oldest"]


class Box(Grain):
    """Base of the mailbox grains: a blocker, one-way posts and requests, self-calls."""

    async def block(self, tag: str) -> str:
        probe = self.silo.probe
        probe.record(("start", tag))
        await probe.gate(tag).wait()
        probe.record(("end", tag))
        return tag

    async def block_then_tick(self) -> str:
        probe = self.silo.probe
        probe.record(("start", "blocker"))
        await probe.gate("full").wait()
        self.register_timer(self._tick, 0.0)
        await probe.gate("blocker").wait()
        probe.record(("end", "blocker"))
        return "blocker"

    async def _tick(self) -> None:
        self.silo.probe.record("tick")

    @one_way
    async def post(self, tag: str) -> None:
        self.silo.probe.record(("post", tag))

    async def request(self, tag: str) -> str:
        self.silo.probe.record(("request", tag))
        return tag

    async def block_then_flood_self(self, n: int) -> int:
        probe = self.silo.probe
        probe.record(("start", "blocker"))
        await probe.gate("full").wait()
        me = self.get_grain(type(self), self.key)
        for i in range(n):
            await me.post(f"self{i}")
        probe.record("flooded")
        await probe.gate("blocker").wait()
        probe.record(("end", "blocker"))
        return n


@mailbox(capacity=2, overflow="suspend")
class SuspendBox(Box):
    pass


@mailbox(capacity=2, overflow="reject")
class RejectBox(Box):
    pass


@mailbox(capacity=2, overflow="drop_newest")
class DropNewestBox(Box):
    pass


@mailbox(capacity=2, overflow="drop_oldest")
class DropOldestBox(Box):
    pass


@mailbox(capacity=1, overflow="reject")
class TinyRejectBox(Box):
    pass


BOXES = {
    "suspend": SuspendBox,
    "reject": RejectBox,
    "drop_newest": DropNewestBox,
    "drop_oldest": DropOldestBox,
}
GRAINS = (*BOXES.values(), TinyRejectBox)


def processed(log: list) -> list[str]:
    return [e[1] for e in log if e[0] in ("post", "request")]


async def blocked_box(make_silo, probe, cls: type):
    """A started silo and a reference whose activation is busy with request "blocker"."""
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(cls, "box")
    blocker = asyncio.create_task(ref.block("blocker"))
    await probe.wait_logged("start", "blocker")
    act = silo.catalog.get(ref.grain_id)
    return silo, ref, act, blocker


async def test_mailbox_suspend_holds_one_way_sender_until_blocker_completes(make_silo, probe):
    _silo, ref, act, blocker = await blocked_box(make_silo, probe, SuspendBox)
    async with asyncio.timeout(WAIT):
        await ref.post("p1")
        await ref.post("p2")
    assert act.statistics().queued == 2

    sender = asyncio.create_task(ref.post("p3"))
    sender.add_done_callback(lambda _: probe.record("sender resumed"))
    await probe.until_queued(act.silo, lambda: act.statistics().blocked_senders == 1)
    assert not sender.done()
    assert act.statistics().suspended == 1

    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(blocker, sender)
    await probe.wait_logged("post", "p3")

    assert probe.log.index(("end", "blocker")) < probe.log.index("sender resumed")
    assert processed(probe.log) == ["p1", "p2", "p3"]
    assert act.statistics().blocked_senders == 0


async def test_mailbox_reject_raises_mailbox_full_to_one_way_sender(make_silo, probe):
    _silo, ref, act, blocker = await blocked_box(make_silo, probe, RejectBox)
    async with asyncio.timeout(WAIT):
        await ref.post("p1")
        await ref.post("p2")

        with pytest.raises(MailboxFullError, match="full") as info:
            await ref.post("p3")

    assert info.value.kind == "mailbox_full"
    assert act.statistics().rejected == 1
    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await blocker
    await probe.wait_logged("post", "p2")
    assert processed(probe.log) == ["p1", "p2"]


async def test_mailbox_drop_newest_drops_new_one_way_and_counts_it(make_silo, probe):
    _silo, ref, act, blocker = await blocked_box(make_silo, probe, DropNewestBox)
    async with asyncio.timeout(WAIT):
        await ref.post("p1")
        await ref.post("p2")
        await ref.post("p3")  # returns normally: the message is dropped

    assert act.statistics().dropped_newest == 1
    assert act.statistics().queued == 2
    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await blocker
    await probe.wait_logged("post", "p2")
    assert processed(probe.log) == ["p1", "p2"]


async def test_mailbox_drop_oldest_drops_oldest_one_way_and_counts_it(make_silo, probe):
    _silo, ref, act, blocker = await blocked_box(make_silo, probe, DropOldestBox)
    async with asyncio.timeout(WAIT):
        for tag in ("p1", "p2", "p3"):
            await ref.post(tag)

    assert act.statistics().dropped_oldest == 1
    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await blocker
    await probe.wait_logged("post", "p3")
    assert processed(probe.log) == ["p2", "p3"]


async def test_mailbox_drop_oldest_fails_dropped_request_with_mailbox_full(make_silo, probe):
    _silo, ref, act, blocker = await blocked_box(make_silo, probe, DropOldestBox)
    dropped = asyncio.create_task(ref.request("r1"))
    await probe.until_queued(act.silo, lambda: act.statistics().queued == 1)
    async with asyncio.timeout(WAIT):
        await ref.post("p1")
        await ref.post("p2")

        with pytest.raises(MailboxFullError, match="oldest message was dropped"):
            await dropped

    assert act.statistics().dropped_oldest == 1
    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await blocker
    await probe.wait_logged("post", "p2")
    assert processed(probe.log) == ["p1", "p2"]


@pytest.mark.parametrize("policy", POLICIES)
async def test_mailbox_requests_into_full_mailbox_suspend_and_complete(make_silo, probe, policy):
    _silo, ref, act, blocker = await blocked_box(make_silo, probe, BOXES[policy])
    async with asyncio.timeout(WAIT):
        await ref.post("p1")
        await ref.post("p2")
    requests = [asyncio.create_task(ref.request(f"r{i}")) for i in range(5)]
    await probe.until_queued(act.silo, lambda: act.statistics().blocked_senders == 5)
    assert not any(r.done() for r in requests)
    assert act.statistics().queued == 2

    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        results = await asyncio.gather(*requests)
        assert await blocker == "blocker"

    assert results == [f"r{i}" for i in range(5)]
    assert processed(probe.log) == ["p1", "p2", "r0", "r1", "r2", "r3", "r4"]
    stats = act.statistics()
    assert (stats.suspended, stats.rejected, stats.dropped_newest, stats.dropped_oldest) == (
        5, 0, 0, 0,
    )
    assert stats.max_queued == 2


@pytest.mark.parametrize("policy", POLICIES)
async def test_mailbox_self_calls_are_never_held_back(make_silo, probe, policy):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(BOXES[policy], "self")
    blocker = asyncio.create_task(ref.block_then_flood_self(5))
    await probe.wait_logged("start", "blocker")
    async with asyncio.timeout(WAIT):
        await ref.post("p1")
        await ref.post("p2")
    act = silo.catalog.get(ref.grain_id)

    probe.open("full")
    await probe.wait_logged("flooded")  # the grain was not suspended by its own mailbox
    stats = act.statistics()
    assert stats.queued == 7
    assert (stats.rejected, stats.dropped_newest, stats.dropped_oldest, stats.suspended) == (
        0, 0, 0, 0,
    )

    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        assert await blocker == 5
    await probe.wait_for(lambda log: len(processed(log)) == 7)
    assert processed(probe.log) == ["p1", "p2", "self0", "self1", "self2", "self3", "self4"]


async def test_mailbox_timer_ticks_are_never_held_back(make_silo, probe):
    silo = await make_silo(*GRAINS)
    ref = silo.get_grain(TinyRejectBox, "timer")
    blocker = asyncio.create_task(ref.block_then_tick())
    await probe.wait_logged("start", "blocker")
    async with asyncio.timeout(WAIT):
        await ref.post("p1")
    act = silo.catalog.get(ref.grain_id)
    assert act.statistics().queued == 1  # full (capacity 1)

    probe.open("full")
    await probe.until_queued(silo, lambda: act.statistics().queued == 2)
    assert "tick" not in probe.log  # a tick is a turn: it waits for the blocker
    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await blocker
    await probe.wait_logged("tick")

    assert act.statistics().rejected == 0
    assert probe.log.index(("end", "blocker")) < probe.log.index("tick")


# A gateway client's one-way request carries a reply that is told once this silo is done
# with it (the gateway counts it in flight until then): whatever the overflow policy does
# with it, the reply is told exactly once.
@pytest.mark.parametrize("policy", POLICIES)
async def test_a_one_way_requests_reply_is_told_once_whatever_the_policy_does(
    make_silo, probe, policy: str,
) -> None:
    silo, ref, _act, blocker = await blocked_box(make_silo, probe, BOXES[policy])
    told: dict[int, list[bool]] = {}
    for i in range(5):  # capacity 2: three overflow
        msg = Message(Direction.ONE_WAY, ref.grain_id, "post", (f"p{i}",), None)
        msg.flags |= FLAG_FROM_CLIENT
        msg.reply = lambda ok, value, i=i: told.setdefault(i, []).append(ok)
        try:
            silo.dispatcher.deliver_here(msg)
        except MailboxFullError:
            raise AssertionError("a refusal goes to the reply") from None
    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await blocker
        await probe.until(lambda: len(told) == 5)
    assert sorted(told) == list(range(5)) and all(len(v) == 1 for v in told.values()), told
    ran = {int(tag[1:]) for tag in processed(probe.log) if tag.startswith("p")}
    assert all(told[i] == [True] for i in ran), (told, ran)


async def test_a_clients_requests_forwarded_by_another_silo_wait_up_to_a_bound(
    make_silo, probe,
) -> None:
    # A forwarded request has no connection here to stop reading: past the bound it is
    # refused, and a two-way caller receives the refusal.
    silo, ref, act, blocker = await blocked_box(make_silo, probe, SuspendBox)
    replies: list[tuple[bool, object]] = []
    for i in range(2 + MAX_FORWARDED_BLOCKED + 3):  # capacity 2, then the bound, then 3 more
        msg = Message(Direction.ONE_WAY, ref.grain_id, "post", (f"p{i}",), None)
        msg.flags |= FLAG_FROM_CLIENT
        silo.dispatcher.deliver_here(msg)
    two_way = Message(Direction.REQUEST, ref.grain_id, "post", ("late",), None)
    two_way.flags |= FLAG_FROM_CLIENT
    two_way.reply = lambda ok, value: replies.append((ok, value))
    silo.dispatcher.deliver_here(two_way)
    assert act.statistics().blocked_senders == MAX_FORWARDED_BLOCKED
    assert act.statistics().rejected == 4
    assert len(replies) == 1 and replies[0][0] is False
    assert isinstance(replies[0][1], MailboxFullError)
    assert "forwarded by another silo is refused" in str(replies[0][1])
    probe.open("blocker")
    async with asyncio.timeout(WAIT):
        await blocker
        await probe.wait_logged("post", f"p{1 + MAX_FORWARDED_BLOCKED}")
