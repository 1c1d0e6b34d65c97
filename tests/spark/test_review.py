"""Review of the Spark integration: races and edge cases of the session manager and the sink
that the other Spark tests do not reach (each test failed before its fix)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orleanspy import Silo, SiloOptions
from orleanspy.spark import (
    JobProgress,
    ParquetSink,
    ParquetSinkOptions,
    ParquetSinkWriter,
    SparkJobCancelledError,
    SparkJobTimeoutError,
    SparkOptions,
    SparkSessionManager,
)
from orleanspy.spark import session as session_module
from orleanspy.spark import sink as sink_module
from orleanspy.spark.sink import stream_slug
from orleanspy.streams import implicit_subscription
from orleanspy.streams.tokens import SequenceToken

from .conftest import WAIT
from .grains import Analytics, _long


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
    blockers = await _occupy_every_worker(spark_manager, "review-busy")
    ran = threading.Event()

    def fn(spark: Any) -> int:
        ran.set()
        return 1

    try:
        t0 = time.monotonic()
        with pytest.raises(SparkJobTimeoutError):
            async with asyncio.timeout(5.0):
                await spark_manager.run(fn, tag="review-queued", timeout=0.5)
        assert time.monotonic() - t0 < 3.0
        assert spark_manager.jobs("review-queued") == []
    finally:
        await _cancel_and_wait(spark_manager, "review-busy", blockers)
    await spark_manager.run(lambda spark: 0, tag="review-after")  # a worker is free again
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

    job = spark_manager.submit(stubborn, tag="review-stubborn", timeout=0.3)
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
    job = spark_manager.submit(_long, 2, tag="review-race", timeout=3.0,
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


class _FakeSession:
    def __init__(self) -> None:
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()


class _FakeBackend:
    polls_progress = False

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def set_log_level(self, level: str) -> None:
        pass

    def cancel_all(self) -> None:
        pass


async def test_stop_while_the_session_is_starting_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # stop() during the lazy start (about 6 s of JVM start) must not return before the
    # session exists and then leave it running, unowned, for the rest of the process.
    fake = _FakeSession()
    creating = threading.Event()
    release = threading.Event()

    def slow_create(options: SparkOptions) -> tuple[Any, bool]:
        creating.set()
        release.wait(WAIT)
        return fake, True

    monkeypatch.setattr(session_module, "_create_session", slow_create)
    monkeypatch.setattr(session_module, "ClassicBackend", _FakeBackend)
    manager = SparkSessionManager(SparkOptions(master="local[1]"))
    start = asyncio.ensure_future(manager.start())
    await asyncio.to_thread(creating.wait, WAIT)

    stop = asyncio.ensure_future(manager.stop())
    await asyncio.sleep(0.2)
    release.set()
    async with asyncio.timeout(WAIT):
        await stop
        with contextlib.suppress(Exception):
            await start

    assert fake.stopped.is_set()
    assert not manager.started
    assert manager.statistics().state == "stopped"


# -- the Parquet sink ---------------------------------------------------------------------
pa = pytest.importorskip("pyarrow")

BASE_MS = 1_709_251_200_000  # 2024-03-01T00:00:00Z


@implicit_subscription("review-clicks")
class NoDedupeSink(ParquetSink):
    sink_options = ParquetSinkOptions(path="lake", timestamp_field="ts", dedupe=False)


async def test_sink_without_dedupe_still_removes_a_crashed_write(tmp_path: Path) -> None:
    # The docs: temporary files left by a crash "are deleted when the stream is next
    # written" -- also when dedupe is off.
    torn = tmp_path / "lake" / "date=2024-03-01" / (
        f".{stream_slug('review-clicks', 'u')}__6.0-9.0.parquet.tmp-dead")
    torn.parent.mkdir(parents=True)
    torn.write_bytes(b"PAR1 half a file")
    silo = Silo(SiloOptions(gateway_port=None, data_dir=str(tmp_path)), grains=[NoDedupeSink])
    async with silo:
        sink = silo.get_grain(NoDedupeSink, "u")
        files = await sink.write_events("review-clicks", "u",
                                        [({"ts": BASE_MS}, SequenceToken(10))])

    assert len(files) == 1
    assert not torn.exists()


def test_sink_commit_makes_new_folders_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A new dataset root (and its parents) is a new directory entry too: unless the folder
    # holding it is fsynced, a power loss can drop the whole folder of committed (and
    # acknowledged) files.
    synced: list[Path] = []
    real = sink_module._fsync_dir

    def record(path: Path) -> None:
        synced.append(Path(path))
        real(path)

    monkeypatch.setattr(sink_module, "_fsync_dir", record)
    root = tmp_path / "lake" / "pageviews"
    writer = ParquetSinkWriter(root, ParquetSinkOptions())

    writer.write("s-1", "k", [({"ts": BASE_MS}, (1, 0))])

    for folder in (tmp_path, tmp_path / "lake", root, root / "date=2024-03-01"):
        assert folder in synced, (folder, synced)


@pytest.mark.spark
async def test_a_manager_joining_the_process_session_does_not_stop_it(
    spark_manager: SparkSessionManager,
) -> None:
    # The process already runs a SparkSession (here: the tests' shared one, created on
    # another thread). A second manager joins it; stopping that manager must leave the
    # session running for its creator. (The session is created on a worker thread, where
    # SparkSession.getActiveSession() is None even though a session exists.)
    joining = SparkSessionManager(replace(spark_manager.options, stop_timeout=1.0))
    await joining.start()
    try:
        assert joining.session_nowait() is spark_manager.session_nowait()
        assert joining._owns_session is False
    finally:
        if not joining._owns_session:  # never stop the tests' shared session here
            await joining.stop()
    assert await spark_manager.run(lambda spark: spark.range(5).count(), tag="alive") == 5


@pytest.mark.spark
async def test_spark_tags_of_distinct_grains_are_distinct(spark_cluster: Any) -> None:
    # The tag cancels every job of a grain (deactivation, cancel_spark): two grains whose
    # keys only differ in characters a tag cannot hold must not share one.
    tags = []
    for key in ("a b", "a_b", "a,b"):
        props = await spark_cluster.get_grain(Analytics, key).job_properties()
        tags.append(props["tags"][0])

    assert len(set(tags)) == 3, tags
    assert all("," not in tag for tag in tags)


def test_progress_bar_final_line_keeps_the_task_counts() -> None:
    # The last line said "100.0%  0/0 tasks  done" for every job: finish() rendered no jobs.
    import io

    from silo.spark_progress import ProgressBar

    out = io.StringIO()
    bar = ProgressBar(out, tty=False)
    bar.update([{"tasks_done": 3, "tasks_total": 8, "fraction": 0.375}])
    bar.finish(True)

    last = out.getvalue().splitlines()[-1]
    assert "100.0%" in last and "8/8 tasks" in last and last.endswith("done"), last


class _EnterFails(_FakeBackend):
    exited: list[str] = []

    def enter(self, op: Any) -> None:
        raise RuntimeError("py4j hiccup after setJobGroup")

    def exit(self, op: Any) -> None:
        self.exited.append(op.id)


async def test_scope_is_cleared_when_entering_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # enter() sets the job group, then tags, pool...: if a later step fails, what it set
    # already must not stay on the pool thread for the next call.
    monkeypatch.setattr(session_module, "_create_session", lambda options: (_FakeSession(), True))
    monkeypatch.setattr(session_module, "ClassicBackend", _EnterFails)
    manager = SparkSessionManager(SparkOptions(master="local[1]"))
    try:
        job = manager.submit(lambda spark: 1, tag="review-enter")
        with pytest.raises(RuntimeError, match="hiccup"):
            await job
        assert _EnterFails.exited == [job.job_group]
    finally:
        await manager.stop()



@pytest.mark.spark
async def test_a_failing_progress_callback_does_not_orphan_the_spark_job(
    spark_manager: SparkSessionManager,
) -> None:
    # A progress callback that raises used to end the driving task with its error while
    # the Spark job ran on, untracked and never cancelled. Progress is an observer: the
    # error is logged, the job completes and reports its result.
    from .grains import _sleepy

    calls = 0

    def broken(progress: JobProgress) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a broken progress display")

    result = await asyncio.wait_for(
        spark_manager.run(_sleepy, 2, 0.6, tag="review-callback", on_progress=broken), WAIT)

    assert result == 20
    assert calls >= 2  # running and the final snapshot
    assert spark_manager.jobs("review-callback") == []


def test_sink_event_with_an_impossible_timestamp_is_dated_by_arrival(tmp_path: Path) -> None:
    # One event with a NaN or out-of-range timestamp used to fail the whole delivery, again
    # on every retry (a poison batch: past max_delivery_time the failure policy drops the
    # good events with it). Such an event is dated by its arrival, like one without a time.
    writer = ParquetSinkWriter(tmp_path, ParquetSinkOptions(timestamp_field="ts"))
    arrival = BASE_MS / 1000
    for n, ts in enumerate((float("nan"), float("inf"), 10**17, -(10**17))):
        files = writer.write(f"s-{n}", "k", [({"ts": ts}, (1, 0))], arrival=arrival)

        assert [Path(f).parent.name for f in files] == ["date=2024-03-01"], ts
