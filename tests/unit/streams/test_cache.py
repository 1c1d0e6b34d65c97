"""QueueCache: bounded, bucketed purge gated by cursors; flow-control strategies; misses."""

from __future__ import annotations

import pytest

from orleanspy.errors import QueueCacheMissError
from orleanspy.streams.adapters.base import BatchContainer
from orleanspy.streams.cache import QueueCache
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken

A = StreamId("ns", "a")
B = StreamId("ns", "b")


def containers(stream: StreamId, first: int, count: int, size: int = 10) -> list[BatchContainer]:
    return [
        BatchContainer(stream, SequenceToken(n), (n,), size) for n in range(first, first + count)
    ]


def deliver(cursor, n: int = 1) -> list[int]:
    """Deliver up to n items through a cursor; return their sequence numbers."""
    out: list[int] = []
    for _ in range(n):
        items = cursor.peek(1)
        if not items:
            break
        cursor.advance(items)
        out.append(items[0].token.sequence)
    return out


def test_cache_purge_waits_for_the_slowest_cursor_under_min() -> None:
    cache = QueueCache(100)  # buckets of 10
    fast, slow = cache.cursor(A), cache.cursor(A)
    cache.add(containers(A, 0, 30))
    assert deliver(fast, 30) == list(range(30))
    assert cache.purge() == []  # slow still on item 0
    assert deliver(slow, 15) == list(range(15))
    acked = cache.purge()
    assert [c.token.sequence for c in acked] == list(range(10))  # bucket 0 only
    assert deliver(slow, 15) == list(range(15, 30))
    assert [c.token.sequence for c in cache.purge()] == list(range(10, 30))
    assert len(cache) == 0


def test_cache_caught_up_cursor_pins_nothing_and_other_streams_purge() -> None:
    cache = QueueCache(100)
    a = cache.cursor(A)
    cache.add(containers(A, 0, 1))
    assert deliver(a) == [0]
    assert not a.is_set
    cache.add(containers(B, 1, 50))  # no cursor on B: nothing gates it
    assert len(cache.purge()) == 51
    cache.add(containers(A, 51, 1))
    assert a.is_set and deliver(a) == [51]


def test_cache_pressure_stops_reading_and_releases_when_drained() -> None:
    cache = QueueCache(100, pressure_ratio=0.9)
    slow = cache.cursor(A)
    while cache.max_add_count():
        n = cache.max_add_count()
        cache.add(containers(A, cache.added, n))
    assert cache.under_pressure() and len(cache) <= 100
    assert cache.max_add_count() == 0
    deliver(slow, 60)
    cache.purge()
    assert not cache.under_pressure() and cache.max_add_count() > 0


def test_cache_max_strategy_lets_the_fastest_gate_and_reports_the_exact_gap() -> None:
    cache = QueueCache(100, strategy="max")
    fast, slow = cache.cursor(A), cache.cursor(A)
    cache.add(containers(A, 0, 20))
    assert deliver(slow, 2) == [0, 1]
    assert deliver(fast, 15) == list(range(15))
    purged = cache.purge()
    assert [c.token.sequence for c in purged] == list(range(15))  # below fast's next (15)
    gap = slow.take_gap()
    assert gap == (SequenceToken(2), SequenceToken(14))
    assert deliver(slow, 10) == list(range(15, 20))
    assert slow.take_gap() is None


def test_cache_max_gap_excludes_the_item_being_delivered() -> None:
    cache = QueueCache(100, strategy="max")
    fast, slow = cache.cursor(A), cache.cursor(A)
    cache.add(containers(A, 0, 10))
    inflight = slow.peek(1)  # slow is delivering item 0
    deliver(fast, 10)
    cache.purge()
    slow.advance(inflight)
    assert slow.take_gap() == (SequenceToken(1), SequenceToken(9))


def test_cache_tagged_strategy_only_tagged_cursors_gate() -> None:
    cache = QueueCache(100, strategy="tagged")
    archive = cache.cursor(A, gating=True, tag="archive")
    viewer = cache.cursor(A, gating=False)
    cache.add(containers(A, 0, 30))
    assert deliver(archive, 25) == list(range(25))
    assert [c.token.sequence for c in cache.purge()] == list(range(20))
    assert viewer.take_gap() == (SequenceToken(0), SequenceToken(19))
    assert deliver(viewer, 3) == [20, 21, 22]


def test_cache_cursor_from_a_cached_token_is_inclusive() -> None:
    cache = QueueCache(100)
    cache.add(containers(A, 0, 10))
    c = cache.cursor(A, SequenceToken(4))
    assert deliver(c, 10) == list(range(4, 10))


def test_cache_cursor_from_a_future_token_waits_for_it() -> None:
    cache = QueueCache(100)
    c = cache.cursor(A, SequenceToken(5))
    cache.add(containers(A, 0, 8))
    assert deliver(c, 10) == [5, 6, 7]


def test_cache_cursor_from_a_purged_token_is_a_miss_naming_what_is_left() -> None:
    cache = QueueCache(100)
    cache.add(containers(A, 0, 30))
    assert len(cache.purge()) == 30  # no cursor: everything goes
    cache.add(containers(A, 30, 5))
    with pytest.raises(QueueCacheMissError) as err:
        cache.cursor(A, SequenceToken(3))
    assert err.value.requested == SequenceToken(3)
    assert (err.value.low, err.value.high) == (SequenceToken(30), SequenceToken(34))


def test_cache_outstanding_limit_puts_the_cache_under_pressure() -> None:
    cache = QueueCache(1000, max_outstanding_events=5)
    c = cache.cursor(A)
    cache.add(containers(A, 0, 6))
    assert cache.under_pressure()
    deliver(c, 1)
    assert not cache.under_pressure()


def test_cache_removed_cursor_releases_its_pin() -> None:
    cache = QueueCache(100)
    c = cache.cursor(A)
    cache.add(containers(A, 0, 20))
    assert cache.purge() == []
    cache.remove_cursor(c)
    assert len(cache.purge()) == 20


def test_cache_never_exceeds_its_bound_when_reads_follow_max_add_count() -> None:
    cache = QueueCache(64)
    c = cache.cursor(A)
    seq = 0
    got: list[int] = []
    for _ in range(200):
        n = cache.max_add_count()
        cache.add(containers(A, seq, n))
        seq += n
        assert len(cache) <= 64
        got += deliver(c, 3)
        cache.purge()
    got += deliver(c, 10_000)
    assert seq > 64 and got == list(range(seq))  # slow reader: nothing lost, in order
