"""A Spark job's timeout and cancel: a queued job times out without running, a thread that
ignores the cancel still ends in the timeout, and a cancel that comes before the timeout is
reported as a cancel."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from orleanspy.spark import (
    JobProgress,
    SparkJobCancelledError,
    SparkJobTimeoutError,
    SparkSessionManager,
)

from .conftest import WAIT
from .grains import _long


async def _occupy_every_worker(
    manager: SparkSessionManager, tag: str,
) -> list[Any]:
    """Start one never-ending Spark job per worker thread; returns their SparkJobs once all
    of them have Spark tasks running."""
    started = [asyncio.Event() for _ in range(manager.options.max_concurrent_jobs)]
    jobs = []
    for event in started:
        def seen(p: JobProgress, event: asyncio.Event = event) -> None:
            if p.tasks_total > 0:
                event.set()

        jobs.append(manager.submit(_long, 2, tag=tag, on_progress=seen))
    async with asyncio.timeout(WAIT):
        for event in started:
            await event.wait()
    return jobs


async def _cancel_and_wait(manager: SparkSessionManager, tag: str, jobs: list[Any]) -> None:
    manager.cancel_tag(tag, "test cleanup")
    async with asyncio.timeout(WAIT):
        await asyncio.gather(*(job.result() for job in jobs), return_exceptions=True)


@pytest.mark.spark
async def test_queued_job_times_out_at_its_timeout_without_running(
    spark_manager: SparkSessionManager,
) -> None:
    # Every worker is busy: the third call waits in the pool's queue. Its timeout must end
    # it at once (it never started: nothing to wait for), not after stop_timeout with an
    # InvalidStateError, and its fn must never run later.
    blockers = await _occupy_every_worker(spark_manager, "edge-busy")
    ran = threading.Event()

    def fn(spark: Any) -> int:
        ran.set()
        return 1

    try:
        t0 = time.monotonic()
        with pytest.raises(SparkJobTimeoutError):
            async with asyncio.timeout(5.0):
                await spark_manager.run(fn, tag="edge-queued", timeout=0.5)
        assert time.monotonic() - t0 < 3.0
        assert spark_manager.jobs("edge-queued") == []
    finally:
        await _cancel_and_wait(spark_manager, "edge-busy", blockers)
    await spark_manager.run(lambda spark: 0, tag="edge-after")  # a worker is free again
    assert not ran.is_set()


@pytest.mark.spark
async def test_timeout_of_a_thread_that_ignores_cancel_still_raises_the_timeout(
    spark_manager: SparkSessionManager, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fn runs Python code, not a Spark job: the cancel cannot stop it. After stop_timeout
    # of cancelling, the caller gets its SparkJobTimeoutError (not an InvalidStateError).
    monkeypatch.setattr(spark_manager, "options",
                        replace(spark_manager.options, stop_timeout=0.5))
    release = threading.Event()

    def stubborn(spark: Any) -> int:
        release.wait(WAIT)
        return 1

    job = spark_manager.submit(stubborn, tag="edge-stubborn", timeout=0.3)
    try:
        with pytest.raises(SparkJobTimeoutError):
            async with asyncio.timeout(5.0):
                await job
    finally:
        release.set()
        await asyncio.to_thread(job._op.thread_done.wait, WAIT)


@pytest.mark.spark
async def test_cancel_requested_before_the_timeout_is_a_cancel(
    spark_manager: SparkSessionManager,
) -> None:
    # The cancel comes first (just before the deadline); the loop notices it only at the
    # deadline. The caller gets SparkJobCancelledError with the cancel's reason, not a
    # timeout.
    loop = asyncio.get_running_loop()
    before = spark_manager.statistics()
    running = asyncio.Event()
    submitted = loop.time()
    job = spark_manager.submit(_long, 2, tag="edge-race", timeout=3.0,
                               on_progress=lambda p: p.tasks_total and running.set())
    async with asyncio.timeout(WAIT):
        await running.wait()
    await asyncio.sleep(submitted + 3.0 - 0.005 - loop.time())
    job.cancel("cancelled by the test")

    with pytest.raises(SparkJobCancelledError) as info:
        async with asyncio.timeout(WAIT):
            await job

    assert not isinstance(info.value, SparkJobTimeoutError)
    assert "cancelled by the test" in str(info.value)
    after = spark_manager.statistics()
    assert after.jobs_timed_out == before.jobs_timed_out
    assert after.jobs_cancelled == before.jobs_cancelled + 1
