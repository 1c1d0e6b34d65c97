"""A Spark job's timeout and cancel: a queued job times out without running, a thread that
ignores the cancel still ends in the timeout, a cancel that comes before the timeout is
reported as a cancel, and the timeout runs on the manager's clock."""

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
    SparkOptions,
    SparkSessionManager,
)
from orleanspy.spark import session as session_module
from orleanspy.testing import FakeClock

from .conftest import WAIT
from .fakes import FakeBackend, FakeSession
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


class _CancellableBackend(FakeBackend):
    """A backend whose cancel releases the running job's function."""

    def __init__(self, spark: Any) -> None:
        super().__init__(spark)
        self.release = threading.Event()
        self.cancels = 0

    def enter(self, op: Any) -> None:
        pass

    def exit(self, op: Any) -> None:
        pass

    def cancel(self, op: Any, first: bool) -> None:
        self.cancels += 1
        self.release.set()


async def test_a_job_timeout_runs_on_the_managers_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The timeout, the progress polls and the cancel re-tries wait on the manager's clock:
    # with a FakeClock, an hour-long timeout passes when the test advances the clock.
    backends: list[_CancellableBackend] = []

    def make_backend(spark: Any) -> _CancellableBackend:
        backends.append(_CancellableBackend(spark))
        return backends[-1]

    monkeypatch.setattr(session_module, "create_session", lambda options: (FakeSession(), True))
    monkeypatch.setattr(session_module, "ClassicBackend", make_backend)
    clock = FakeClock()
    manager = SparkSessionManager(SparkOptions(master="local[1]"), clock=clock)
    entered = threading.Event()

    def waits_for_cancel(spark: Any) -> int:
        entered.set()
        backends[0].release.wait(WAIT)
        return 1

    try:
        job = manager.submit(waits_for_cancel, tag="edge-clock", timeout=3600.0)
        await asyncio.to_thread(entered.wait, WAIT)
        assert not job.done()
        async with asyncio.timeout(WAIT):
            while not job.done():
                await clock.run_for(600.0)
                await asyncio.sleep(0)  # the worker thread's return reaches the loop
        with pytest.raises(SparkJobTimeoutError):
            await job
        assert backends[0].cancels >= 1
        assert job.progress.elapsed >= 3600.0
    finally:
        await manager.stop()
