"""A Spark job belongs to the grain call that started it: it carries the call's description
and tags, and it is cancelled when that call times out, even if ``run_job`` was given a
longer timeout."""

from __future__ import annotations

import asyncio
import time

import pytest

from orleanspy import GrainCallTimeoutError
from orleanspy.spark import SparkJobTimeoutError, SparkSessionManager
from orleanspy.testing import TestCluster

from .conftest import WAIT
from .grains import Analytics

pytestmark = pytest.mark.spark


def spark_job_states(manager: SparkSessionManager, group: str) -> list[str]:
    tracker = manager.session_nowait().sparkContext.statusTracker()
    return [tracker.getJobInfo(j).status for j in tracker.getJobIdsForGroup(group)]


async def test_job_is_cancelled_when_the_call_that_started_it_times_out(
    spark_cluster: TestCluster, spark_manager: SparkSessionManager,
) -> None:
    probe = spark_cluster.silo.probe  # type: ignore[attr-defined]
    before = spark_manager.statistics().jobs_timed_out
    ref = spark_cluster.client.get_grain(Analytics, "deadline")
    t0 = time.monotonic()
    # run_job gets 120 s; the call that starts it, 4 s
    call = asyncio.ensure_future(ref.with_timeout(4.0).long_job(120.0))
    async with asyncio.timeout(WAIT):
        await probe.started.wait()
    group = probe.groups[0]
    running = spark_manager.jobs("orleanspy/Analytics/deadline")
    assert [p.description for p in running] == ["Analytics/deadline.long_job: long"]

    # The caller's own timeout, or the job's cancellation at the same deadline if its reply
    # arrives first: both are TimeoutErrors.
    with pytest.raises((GrainCallTimeoutError, SparkJobTimeoutError)):
        async with asyncio.timeout(WAIT):
            await call
    timed_out_at = time.monotonic()
    async with asyncio.timeout(WAIT):
        await probe.ended.wait()
    ended_at = time.monotonic()

    assert 3.5 < timed_out_at - t0 < 4.0 + 2.0
    assert ended_at - timed_out_at < 2.0  # the job ended with its call, not after 120 s
    assert probe.progress[-1].state == "cancelled"
    async with asyncio.timeout(WAIT):  # the grain's run_job raised by now, or does soon
        await probe.failed.wait()
    [error] = probe.errors
    assert isinstance(error, SparkJobTimeoutError)
    assert "the grain call that started it timed out" in str(error)
    assert "SPARK_JOB_CANCELLED" in str(error)
    assert spark_job_states(spark_manager, group) == ["FAILED"]  # what Spark calls cancelled
    assert spark_manager.statistics().jobs_timed_out == before + 1
    recent = spark_manager.statistics().recent[0]  # the dashboard's Spark panel reads this
    assert (recent.job_group, recent.description) == (group, "Analytics/deadline.long_job: long")


async def test_job_description_reaches_the_progress_the_cli_reads(
    spark_cluster: TestCluster,
) -> None:
    probe = spark_cluster.silo.probe  # type: ignore[attr-defined]
    ref = spark_cluster.client.get_grain(Analytics, "cli")
    call = asyncio.ensure_future(ref.with_timeout(WAIT).long_job(None))
    try:
        async with asyncio.timeout(WAIT):
            await probe.started.wait()
        progress = await ref.spark_progress()  # what `orleanspy spark run` polls
        assert [p["description"] for p in progress] == ["Analytics/cli.long_job: long"]
    finally:
        await ref.cancel_spark()
        async with asyncio.timeout(WAIT):
            await asyncio.gather(call, return_exceptions=True)
