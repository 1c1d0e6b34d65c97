"""SparkGrain on a real local SparkSession: results, errors, cancellation, timeouts,
deactivation, progress and a free event loop."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import pytest

from orleanspy.spark import (
    SparkJobCancelledError,
    SparkJobError,
    SparkJobTimeoutError,
    SparkSessionManager,
)
from orleanspy.testing import TestCluster

from .conftest import WAIT
from .grains import Analytics, PingCounter

pytestmark = pytest.mark.spark


def spark_job_states(manager: SparkSessionManager, group: str) -> list[str]:
    tracker = manager.session_nowait().sparkContext.statusTracker()
    return [tracker.getJobInfo(j).status for j in tracker.getJobIdsForGroup(group)]


def active_jobs_of(manager: SparkSessionManager, group: str) -> set[int]:
    tracker = manager.session_nowait().sparkContext.statusTracker()
    return set(tracker.getJobIdsForGroup(group)) & set(tracker.getActiveJobsIds())


async def test_spark_grain_returns_rows_as_dicts(spark_cluster: TestCluster) -> None:
    ref = spark_cluster.get_grain(Analytics, "a")

    result = await ref.word_counts(["b", "a", "b", "c", "b"])

    assert result == [{"word": "a", "count": 1}, {"word": "b", "count": 3},
                      {"word": "c", "count": 1}]


async def test_spark_grain_result_crosses_the_wire(spark_cluster: TestCluster) -> None:
    ref = spark_cluster.client.get_grain(Analytics, "wire")

    result = await ref.word_counts(["x", "y", "x"])

    assert result == [{"word": "x", "count": 2}, {"word": "y", "count": 1}]


async def test_spark_grain_converts_pandas_and_arrow_results(spark_cluster: TestCluster) -> None:
    ref = spark_cluster.client.get_grain(Analytics, "frames")

    pandas_rows = await ref.squares_pandas(4)
    arrow_rows = await ref.squares_arrow(3)

    assert pandas_rows == [{"id": i, "sq": i * i} for i in range(4)]
    assert arrow_rows == [{"id": i, "sq": i * i} for i in range(3)]


async def test_spark_grain_spark_error_is_plain_with_error_class(
    spark_cluster: TestCluster,
) -> None:
    ref = spark_cluster.client.get_grain(Analytics, "bad")

    with pytest.raises(SparkJobError) as info:
        await ref.bad_sql()

    assert info.value.error_class == "TABLE_OR_VIEW_NOT_FOUND"
    assert "nowhere" in str(info.value)


async def test_spark_grain_user_error_keeps_its_type(spark_cluster: TestCluster) -> None:
    with pytest.raises(ValueError, match="the job's own error"):
        await spark_cluster.get_grain(Analytics, "u").user_error()


async def test_spark_grain_job_group_and_tag_are_per_call_and_cleared(
    spark_cluster: TestCluster, spark_manager: SparkSessionManager,
) -> None:
    ref = spark_cluster.get_grain(Analytics, "props")

    first = await ref.job_properties()
    second = await ref.job_properties()
    # Both pool threads, outside any call: nothing left behind by the calls.
    sc = spark_manager.session_nowait().sparkContext
    loop = asyncio.get_running_loop()
    import threading

    barrier = threading.Barrier(2, timeout=WAIT)

    def leftovers() -> Any:
        barrier.wait()
        return sc.getLocalProperty("spark.jobGroup.id"), sorted(sc.getJobTags())

    pool = spark_manager._jobs.pool
    after = await asyncio.gather(*(loop.run_in_executor(pool, leftovers) for _ in range(2)))

    grain_tag, call_tag = first["tags"]
    assert grain_tag == "orleanspy/Analytics/props"
    assert call_tag.startswith("orleanspy/Analytics/props/job_properties#")
    assert second["tags"][1] != call_tag  # one tag per call (its request id)
    assert first["description"] == "Analytics/props.job_properties"
    assert first["group"].startswith("orleanspy/Analytics/props#")
    assert second["group"] != first["group"]
    assert after == [(None, []), (None, [])]


async def _start_long_job(
    cluster: TestCluster, key: str, timeout: float | None = None,
) -> tuple[asyncio.Task[Any], str]:
    ref = cluster.get_grain(Analytics, key)
    call = asyncio.ensure_future(ref.with_timeout(120).long_job(timeout))
    probe = cluster.silo.probe  # type: ignore[attr-defined]
    async with asyncio.timeout(WAIT):
        await probe.started.wait()
    return call, probe.groups[0]


async def test_spark_grain_cancel_stops_the_spark_job_within_5s(
    spark_cluster: TestCluster, spark_manager: SparkSessionManager,
) -> None:
    call, group = await _start_long_job(spark_cluster, "cancel")
    assert active_jobs_of(spark_manager, group)  # really running in Spark

    t0 = time.monotonic()
    cancelled = await spark_cluster.client.get_grain(Analytics, "cancel").cancel_spark()
    with pytest.raises(SparkJobCancelledError) as info:
        async with asyncio.timeout(WAIT):
            await call
    elapsed = time.monotonic() - t0

    assert cancelled == 1
    assert elapsed < 5.0
    assert "SPARK_JOB_CANCELLED" in str(info.value)
    assert spark_job_states(spark_manager, group) == ["FAILED"]  # what Spark calls cancelled
    assert not active_jobs_of(spark_manager, group)
    assert spark_manager.jobs() == []


async def test_spark_grain_timeout_cancels_the_spark_job(
    spark_cluster: TestCluster, spark_manager: SparkSessionManager,
) -> None:
    before = spark_manager.statistics().jobs_timed_out
    call, group = await _start_long_job(spark_cluster, "timeout", timeout=3.0)
    t0 = time.monotonic()

    with pytest.raises(SparkJobTimeoutError) as info:
        async with asyncio.timeout(WAIT):
            await call
    elapsed = time.monotonic() - t0

    assert isinstance(info.value, TimeoutError)
    assert elapsed < 3.0 + 5.0
    assert "SPARK_JOB_CANCELLED" in str(info.value)
    assert spark_job_states(spark_manager, group) == ["FAILED"]
    assert not active_jobs_of(spark_manager, group)
    assert spark_manager.statistics().jobs_timed_out == before + 1


async def test_spark_grain_deactivation_cancels_the_spark_job(
    spark_cluster: TestCluster, spark_manager: SparkSessionManager,
) -> None:
    call, group = await _start_long_job(spark_cluster, "deactivate")
    t0 = time.monotonic()

    await spark_cluster.get_grain(Analytics, "deactivate").stop_now()
    with pytest.raises(SparkJobCancelledError, match="deactivating"):
        async with asyncio.timeout(WAIT):
            await call

    assert time.monotonic() - t0 < 5.0
    assert not active_jobs_of(spark_manager, group)


async def test_spark_manager_caller_cancellation_cancels_the_spark_job(
    spark_manager: SparkSessionManager,
) -> None:
    started = asyncio.Event()
    job = spark_manager.submit(
        lambda spark: spark.range(0, 10**12, 1, 4).selectExpr("sum(id % 7)").collect(),
        tag="caller-cancel", on_progress=lambda p: p.tasks_total and started.set(),
    )
    waiter = asyncio.ensure_future(job.result())
    async with asyncio.timeout(WAIT):
        await started.wait()
    t0 = time.monotonic()

    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter

    assert time.monotonic() - t0 < 5.0
    assert job.progress.state == "cancelled"
    assert spark_job_states(spark_manager, job.job_group) == ["FAILED"]


async def test_spark_grain_progress_rises_monotonically_to_100_percent(
    spark_cluster: TestCluster,
) -> None:
    result = await spark_cluster.get_grain(Analytics, "p").sleepy(8, 0.4)
    progress = spark_cluster.silo.probe.progress  # type: ignore[attr-defined]

    fractions = [p.fraction for p in progress]
    assert result == 80
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0
    assert progress[-1].state == "succeeded"
    assert progress[-1].tasks_done == progress[-1].tasks_total == 8
    assert any(0.0 < f < 1.0 for f in fractions), fractions  # seen while running
    assert all(p.state in ("queued", "running") for p in progress[:-1])


async def test_spark_job_updates_iterate_to_the_final_state(
    spark_manager: SparkSessionManager,
) -> None:
    job = spark_manager.submit(lambda spark: spark.range(100).count(), tag="updates")

    states = [p.state async for p in job.updates()]

    assert await job == 100
    assert states[-1] == "succeeded"


@pytest.mark.timing
async def test_spark_grain_calls_stay_fast_while_a_spark_job_runs(
    spark_cluster: TestCluster,
) -> None:
    call, _ = await _start_long_job(spark_cluster, "busy")
    counters = [spark_cluster.get_grain(PingCounter, i) for i in range(10)]
    latencies: list[float] = []

    async def caller(ref: Any) -> None:
        for _ in range(50):
            t0 = time.perf_counter()
            await ref.add(1)
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.01)  # pacing: about 100 calls/s per caller

    await asyncio.gather(*(caller(ref) for ref in counters))
    running = not call.done()
    await spark_cluster.get_grain(Analytics, "busy").cancel_spark()
    with pytest.raises(SparkJobCancelledError):
        await call

    assert running  # the Spark job ran the whole time
    p99 = statistics.quantiles(latencies, n=100)[98]
    assert p99 < 0.050, f"p99 {p99 * 1000:.1f} ms"


async def test_spark_statistics_count_outcomes(spark_manager: SparkSessionManager) -> None:
    before = spark_manager.statistics()

    await spark_manager.run(lambda spark: spark.range(3).count(), tag="stats")

    after = spark_manager.statistics()
    assert after.state == "running"
    assert after.jobs_succeeded == before.jobs_succeeded + 1
    assert after.master == "local[2]"


async def test_running_job_appears_in_the_silo_statistics(spark_cluster: TestCluster) -> None:
    silo = spark_cluster.silo
    call = asyncio.ensure_future(spark_cluster.get_grain(Analytics, "stats").sleepy(8, 0.4))
    try:
        async with asyncio.timeout(WAIT):
            while not silo.statistics().extensions["spark"].jobs_running:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # the manager has no event for "a job started"
        spark = silo.statistics().extensions["spark"]
        assert spark.jobs_running == 1 and len(spark.running) == 1
        assert spark.running[0].state == "running"
    finally:
        assert await asyncio.wait_for(call, WAIT) == 80
    assert silo.statistics().extensions["spark"].jobs_running == 0
