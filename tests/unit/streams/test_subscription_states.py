"""A subscription's states and transitions (``orleanspy.streams.subscription``): served from
a cache cursor, spilled to the queue and back, detached; a delivery in flight keeps its
containers (not the cache's items) when it is spilled."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import orleanspy.streams
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.cache import QueueCache
from orleanspy.streams.ids import StreamId
from orleanspy.streams.pubsub import SubscriptionRecord
from orleanspy.streams.subscription import Subscription
from orleanspy.streams.tokens import SequenceToken

SID = StreamId("ns", "k")


def cached(n: int) -> QueueCache:
    cache = QueueCache(100)
    cache.add([BatchContainer(SID, SequenceToken(seq), (seq,), 1) for seq in range(1, n + 1)])
    return cache


def subscription() -> Subscription:
    record = SubscriptionRecord(sub_id="s1", namespace="ns", key="k", consumer_type="C",
                                consumer_key="c")
    return Subscription(record, SID, consumer=None, member=True, now=5.0)


def test_a_cached_subscription_spills_from_its_next_item_and_rejoins() -> None:
    cache = cached(4)
    sub = subscription()
    cursor = cache.cursor(SID, SequenceToken(1))
    assert sub.state == "new"
    sub.serve_from(cursor)
    assert sub.state == "cached"
    cursor.advance(cursor.peek(1))  # delivered 1: its next item is 2
    assert (sub.cursor, sub.spilled_from, sub.member, sub.progress_at) == (cursor, None, True, 5.0)

    left = sub.spill()
    assert left is cursor and sub.cursor is None and sub.spilled_from is cursor
    assert sub.after == 1  # the queue serves it from sequence 2
    assert sub.state == "spilled"

    sub.fill([BatchContainer(SID, SequenceToken(seq), (seq,), 1) for seq in (1, 2, 3)])
    taken = sub.take(1)
    assert [c.token.sequence for c in taken] == [2]  # past ``after`` only, in order
    sub.moved_past(taken)
    assert sub.after == 2 and [c.token.sequence for c in sub.buffer] == [3]

    back = cache.cursor(SID, SequenceToken(3))
    sub.rejoin(back)
    assert sub.cursor is back and sub.spilled_from is None
    assert sub.state == "cached"
    with pytest.raises(AssertionError):
        sub.rejoin(back)  # only a spilled subscription rejoins


def test_a_spill_during_a_delivery_keeps_its_containers_not_the_cache_items() -> None:
    cache = cached(3)
    sub = subscription()
    cursor = cache.cursor(SID, SequenceToken(1))
    sub.serve_from(cursor)
    items = cursor.peek(2)
    sub.hold(items)
    sub.spill()
    assert sub.inflight is None  # the cache's items are no longer held
    assert sub.release() is None
    handed = sub.take_handed()
    assert [c.token.sequence for c in handed or []] == [1, 2]
    assert sub.take_handed() is None


def test_detach_is_final_and_leaves_the_cursor_to_remove() -> None:
    cache = cached(1)
    sub = subscription()
    cursor = cache.cursor(SID, SequenceToken(1))
    sub.serve_from(cursor)
    assert sub.detach() is cursor
    assert sub.detached and sub.cursor is None and sub.state == "detached"
    assert sub.detach() is None


def test_a_failing_delivery_counts_its_attempts_and_back_offs() -> None:
    sub = subscription()
    sub.attempt_failed()
    sub.attempt_failed()
    sub.retry_at(7)
    sub.backing_off(True)
    assert (sub.failing, sub.next_seq, sub.retrying) == (2, 7, True)
    sub.backing_off(False)
    sub.attempt_succeeded()
    assert (sub.failing, sub.retrying) == (0, False)


def test_only_the_subscription_module_writes_a_subscriptions_fields() -> None:
    """The agent, the spiller and the delivery loop call the transitions; none of them
    assigns a field of a subscription (``sub.cursor = ...``; the streams package names a
    subscription ``sub``, ``old`` or ``other``)."""
    fields = set(Subscription.__slots__)
    names = {"sub", "old", "other", "subscription"}
    root = Path(orleanspy.streams.__file__).parent
    writes: list[str] = []
    for path in root.rglob("*.py"):
        if path.name == "subscription.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[ast.expr] = (
                node.targets if isinstance(node, ast.Assign)
                else [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign)
                else [])
            flat = [t for target in targets
                    for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
            writes.extend(
                f"{path.relative_to(root)}:{t.lineno} {t.value.id}.{t.attr}" for t in flat
                if isinstance(t, ast.Attribute) and t.attr in fields
                and isinstance(t.value, ast.Name) and t.value.id in names
            )
    assert not writes, writes
