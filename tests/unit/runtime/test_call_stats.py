"""Per-method call statistics: every call and error counted, latency in the right bucket,
quantiles read back, names that are not methods kept to one entry, and off when disabled."""

from __future__ import annotations

import asyncio

import pytest

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.runtime.call_stats import (
    BOUNDS,
    LAST,
    SAMPLE_MASK,
    TIME_ALL,
    UNKNOWN,
    WINDOW,
    MethodStats,
    figures,
    is_snapshot,
    merge,
    quantile,
)


class Worker(Grain):
    async def quick(self) -> int:
        return 1

    async def slow(self) -> None:
        await asyncio.sleep(0.03)

    async def fail(self) -> None:
        raise ValueError("on purpose")


async def _silo(**options: object) -> Silo:
    silo = Silo(SiloOptions(gateway_port=None, **options), grains=[Worker])  # type: ignore[arg-type]
    await silo.start()
    return silo


@pytest.mark.timing
async def test_calls_errors_and_latency_per_method() -> None:
    silo = await _silo()
    try:
        for i in range(50):
            assert await silo.get_grain(Worker, i % 5).quick() == 1
        for _ in range(3):
            await silo.get_grain(Worker, "s").slow()
        for _ in range(4):
            with pytest.raises(ValueError):
                await silo.get_grain(Worker, "f").fail()
        snap = silo.call_statistics.snapshot()
    finally:
        await silo.stop()
    assert is_snapshot(snap)
    methods = snap["Worker"]
    assert methods["quick"]["calls"] == 50 and methods["quick"]["errors"] == 0
    assert methods["slow"]["calls"] == 3 and methods["fail"]["errors"] == 4
    by_method = {f.method: f for f in figures(snap)}
    slow = by_method["slow"]
    assert slow.p50 is not None and 0.015 <= slow.p50 <= 0.2  # a 30 ms sleep, in its bucket
    assert slow.mean is not None and slow.mean >= 0.03
    quick = by_method["quick"]
    assert quick.p99 is not None and quick.p99 < 0.03


async def test_busy_methods_are_sampled_per_window_and_all_calls_are_counted() -> None:
    silo = await _silo()
    try:
        ref = silo.get_grain(Worker, "q")
        for _ in range(TIME_ALL + 800):
            await ref.quick()
        stats = silo.call_statistics.types["Worker"]["quick"]
        # Within one window: the first TIME_ALL timed, then one in SAMPLE_MASK + 1.
        assert stats.calls == TIME_ALL + 800
        assert stats.count == TIME_ALL + 800 // (SAMPLE_MASK + 1)
        stats.window -= WINDOW  # the window is over: the next check starts a new one
        for _ in range(TIME_ALL + 1200):
            await ref.quick()
    finally:
        await silo.stop()
    assert stats.calls == 2 * TIME_ALL + 2000
    # Calls 1824..2048 of the old window: every 32nd timed (8); the check at call 2048 starts
    # a new window, whose 1,999 calls are timed as the first window's were (1,024 + 31).
    assert stats.count == (TIME_ALL + 25) + 8 + (TIME_ALL + 31)


async def test_a_name_that_is_no_method_shares_one_entry() -> None:
    silo = await _silo()
    try:
        ref = silo.get_grain(Worker, "x")
        await ref.quick()
        for name in ("nope", "nada", "zilch"):
            with pytest.raises(Exception):  # noqa: B017 - the call's own error
                await ref.invoke(name)
        table = silo.call_statistics.types["Worker"]
    finally:
        await silo.stop()
    assert set(table) <= {UNKNOWN, "quick", "slow", "fail"}
    if UNKNOWN in table:  # a local reference reaches the activation with the bad name
        assert table[UNKNOWN].errors == table[UNKNOWN].calls


async def test_statistics_off_counts_nothing() -> None:
    silo = await _silo(call_statistics=False)
    try:
        await silo.get_grain(Worker, 1).quick()
        assert silo.call_statistics.snapshot() == {}
    finally:
        await silo.stop()


def call(stats: MethodStats, duration: float, failed: bool) -> None:
    """One timed call, as the activation records it."""
    stats.seen += 1
    stats.record(duration)
    if failed:
        stats.errors += 1


def test_quantiles_and_differences() -> None:
    a = MethodStats()
    for _ in range(98):
        call(a, 5e-6, False)  # bucket 0
    call(a, 0.5, True)
    call(a, 0.5, False)
    assert a.calls == 100 and a.errors == 1 and a.buckets[0] == 98
    assert quantile(a.buckets, 0.5) is not None and quantile(a.buckets, 0.5) <= BOUNDS[0]
    p99 = quantile(a.buckets, 0.99)
    assert p99 is not None and 0.25 < p99 <= 1.0
    assert quantile([0] * (LAST + 1), 0.5) is None
    earlier = {"T": {"m": a.to_dict()}}
    call(a, 2.0, False)
    (f,) = figures({"T": {"m": a.to_dict()}}, earlier)
    assert f.calls == 1 and f.errors == 0 and f.p50 is not None and 1.0 < f.p50 <= 2.7
    both = merge([earlier, earlier])
    assert both["T"]["m"]["calls"] == 200
    assert not is_snapshot({"T": {"m": {"calls": "many"}}})


def test_quantiles_stay_within_what_was_observed():
    """One 24 s call lands in the 21-42 s bucket: its p50 and p99 read 24 s (the bucket
    and the sum of seconds allow nothing else), not the bucket's middle or top."""
    stats = MethodStats()
    stats.due()
    stats.record(24.002)
    (row,) = figures({"T": {"m": stats.to_dict()}})
    assert row.p50 == pytest.approx(24.002) and row.p99 == pytest.approx(24.002)
    assert row.mean == pytest.approx(24.002)
    # Two calls, 1 ms and 24 s: p99 cannot pass their sum, p50 stays in the smaller bucket.
    stats.due()
    stats.record(0.001)
    (row,) = figures({"T": {"m": stats.to_dict()}})
    assert row.p99 is not None and 24.0 <= row.p99 <= 24.003  # the sum bounds it
    assert row.p50 is not None and row.p50 <= 0.00128
    assert quantile([0] * (LAST + 1), 0.5, 0.0) is None
