"""JobRunner: the bridge between the event loop and the worker threads that run Spark jobs.

Each job runs ``fn(spark, *args)`` on one of ``max_concurrent_jobs`` worker threads; its
driver task on the loop only waits, polls progress off the loop and, on a timeout, a
cancellation, a guard's reason or a stop, cancels the job's Spark job group again and again
until the thread returns (Spark cancels only jobs that exist at that moment). Nothing that
touches Spark runs on the loop.

Apart from the session manager because a job's thread, its job group, the cancel loop, the
progress poll and its outcome share one per-job state (``_Op``) and none of the session's:
the runner reaches the session only through the callables it is given (open it, read it,
its back end, whether the manager stops).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from orleanspy._util.clock import Clock
from orleanspy.logging import get_logger
from orleanspy.spark._backend import Backend
from orleanspy.spark.convert import to_plain
from orleanspy.spark.errors import SparkJobCancelledError, SparkJobTimeoutError
from orleanspy.spark.failures import first_line, is_spark_error, translate
from orleanspy.spark.job import JobProgress, SparkJob, _Op
from orleanspy.spark.options import SparkOptions

__all__ = ["RECENT_JOBS", "JobRunner"]

RECENT_JOBS = 20  # finished jobs kept for the statistics (the dashboard's Spark panel)


class JobRunner:
    """The jobs of one session manager: their threads, their drivers and their counts.

    Args:
        options: the manager's current options (read at each use: the manager's ``options``
            may be replaced): ``max_concurrent_jobs`` (read once, for the pool),
            ``progress_interval``, ``cancel_interval``, ``stop_timeout``.
        clock: every wait on the loop and every job's elapsed time.
        log: the manager's logger.
        open_session: blocking (a worker thread calls it): the session's back end, creating
            the session on first use.
        session: the running SparkSession (what ``fn`` receives).
        backend: the running session's back end, or None before it starts.
        stopping: True once the manager stops (a running job is then cancelled).
    """

    def __init__(
        self,
        options: Callable[[], SparkOptions],
        clock: Clock,
        log: Any,
        *,
        open_session: Callable[[], Backend],
        session: Callable[[], Any],
        backend: Callable[[], Backend | None],
        stopping: Callable[[], bool],
    ) -> None:
        self._options = options
        self.clock = clock
        self.log = log
        self._open_session = open_session
        self._session = session
        self._backend = backend
        self._stopping = stopping
        #: the worker threads (``max_concurrent_jobs`` of them) that run the jobs
        self.pool = ThreadPoolExecutor(
            max_workers=options().max_concurrent_jobs, thread_name_prefix="orleanspy-spark"
        )
        #: the jobs in flight, by job group
        self.ops: dict[str, _Op] = {}
        #: finished jobs by outcome: succeeded, failed, cancelled, timed_out
        self.counts = {"succeeded": 0, "failed": 0, "cancelled": 0, "timed_out": 0}
        #: the last ``RECENT_JOBS`` finished, newest first
        self.recent: deque[JobProgress] = deque(maxlen=RECENT_JOBS)

    def start(
        self, op: _Op, timeout: float | None, call_timeout: float | None = None,
    ) -> SparkJob[Any]:
        """Queue ``op`` on a worker thread and drive it from a task of the running loop;
        it is cancelled after ``timeout`` or ``call_timeout`` (the calling request's time
        left), whichever ends first."""
        reason = None if timeout is None else f"timed out after {timeout:g} s"
        if call_timeout is not None and (timeout is None or call_timeout < timeout):
            timeout = max(call_timeout, 0.0)
            reason = f"the grain call that started it timed out ({call_timeout:.3g} s left)"
        self.ops[op.id] = op
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(
            self._drive(op, timeout, reason), name=f"spark-job {op.id}"
        )
        return SparkJob(op, task)

    def cancel_tag(self, tag: str, reason: str) -> int:
        """Cancel every job of ``tag``; returns how many were in flight."""
        ops = [op for op in self.ops.values() if op.tag == tag]
        for op in ops:
            op.cancel_reason = op.cancel_reason or reason
        backend = self._backend()
        if ops and backend is not None:
            self._pool_free_call(backend.cancel_tag, tag)
        return len(ops)

    def cancel_all(self, reason: str) -> None:
        """Give every job in flight a cancel reason (its driver cancels it)."""
        for op in self.ops.values():
            op.cancel_reason = op.cancel_reason or reason

    async def wait_for_threads(self, deadline: float) -> None:
        """Cancel every Spark job, again every ``cancel_interval``, until the threads of the
        started jobs return or the clock reaches ``deadline`` (monotonic)."""
        clock = self.clock
        backend = self._backend()
        while clock.monotonic() < deadline:
            running = [op for op in self.ops.values()
                       if op.started and not op.thread_done.is_set()]
            if not running:
                break
            if backend is not None:
                await asyncio.to_thread(_quietly, backend.cancel_all)
            await asyncio.to_thread(running[0].thread_done.wait, self._options().cancel_interval)
        else:
            self.log.error("spark_stop_jobs_abandoned", count=len(self.ops))

    def shutdown(self) -> None:
        """Stop the worker threads' pool; jobs still queued never run."""
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- one job ----------------------------------------------------------------------------
    def _pool_free_call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a quick blocking Spark call on a plain thread (the job pool may be full)."""
        threading.Thread(target=_quietly, args=(fn, *args), daemon=True,
                         name="orleanspy-spark-cancel").start()

    def _body(self, op: _Op) -> Any:
        """Worker thread: scope the thread to the op, run ``fn``, always unscope."""
        try:
            if op.cancel_reason is not None:
                raise _NotStarted
            backend = self._open_session()
            if op.cancel_reason is not None:  # cancelled while the session was starting
                raise _NotStarted
            try:
                backend.enter(op)  # may fail half-way: exit() clears what it set
                op.started = True
                result = op.fn(self._session(), *op.args)
                return to_plain(result) if op.convert else result
            finally:
                backend.exit(op)
        finally:
            op.thread_done.set()

    async def _drive(self, op: _Op, timeout: float | None, reason: str | None) -> Any:
        clock = self.clock
        interval = self._options().progress_interval
        deadline = None if timeout is None else clock.monotonic() + timeout
        ctx = contextvars.copy_context()
        queued = self.pool.submit(ctx.run, self._body, op)
        fut = asyncio.wrap_future(queued)
        fut.add_done_callback(_retrieve)  # also when the caller gave up waiting for it
        timed_out = False
        try:
            while not fut.done():
                wait = interval if deadline is None else min(interval, deadline - clock.monotonic())
                if wait > 0:
                    await self._wait_done(fut, wait)
                    if fut.done():
                        break
                if (deadline is not None and clock.monotonic() >= deadline
                        and op.cancel_reason is None):  # a cancel that came first wins
                    timed_out = True
                    op.cancel_reason = reason
                if op.cancel_reason is None and op.guard is not None:
                    op.cancel_reason = op.guard()
                if op.cancel_reason is None and self._stopping():
                    op.cancel_reason = "the Spark session is stopping"
                if op.cancel_reason is not None:
                    await self._cancel_until_returned(op, fut, queued)
                    break
                await self._poll(op)
        except asyncio.CancelledError:
            op.cancel_reason = op.cancel_reason or "the caller was cancelled"
            await self._cancel_until_returned(op, fut, queued)
            self._finish(op, "cancelled")
            raise
        except BaseException:
            self._finish(op, "failed")
            raise
        return self._outcome(op, fut, timed_out)

    async def _wait_done(self, fut: asyncio.Future[Any], seconds: float) -> None:
        """Wait until ``fut`` is done or ``seconds`` of the clock pass (``fut`` is neither
        cancelled nor its error raised here)."""
        with contextlib.suppress(TimeoutError):
            async with self.clock.timeout(seconds):
                await asyncio.wait([fut])

    async def _poll(self, op: _Op) -> None:
        backend = self._backend()
        if backend is None or not op.started:
            return
        if backend.polls_progress:
            try:
                snapshot = await asyncio.to_thread(backend.progress, op)
            except Exception as exc:  # a poll is best effort: the job goes on
                self.log.debug("spark_progress_poll_failed", job_group=op.id, error=repr(exc))
                return
        else:
            snapshot = op.pushed or replace(op.progress, state="running")
        if op.progress.state in ("queued", "running") and not op.thread_done.is_set():
            op.publish(snapshot)

    async def _cancel_until_returned(
        self, op: _Op, fut: asyncio.Future[Any], queued: concurrent.futures.Future[Any],
    ) -> None:
        """Cancel the op's jobs, then again every ``cancel_interval``, until its thread
        returns (a cancel misses jobs submitted after it). A call still waiting for a worker
        is taken off the queue (it never runs). A second cancellation of the waiting task
        does not stop this loop; it is re-raised at the end."""
        clock = self.clock
        start = clock.monotonic()
        first = True
        interrupted: asyncio.CancelledError | None = None
        self.log.info("spark_job_cancelling", job_group=op.id, reason=op.cancel_reason)
        if not op.started and queued.cancel():  # still queued: fut ends cancelled
            first = False
        while not fut.done():
            try:
                backend = self._backend()
                if backend is not None and (op.started or first):
                    await asyncio.to_thread(_quietly, backend.cancel, op, first)
                    first = False
                await self._wait_done(fut, self._options().cancel_interval)
            except asyncio.CancelledError as exc:
                interrupted = exc
            if clock.monotonic() - start > self._options().stop_timeout and not fut.done():
                self.log.error("spark_job_cancel_overrun", job_group=op.id,
                               seconds=round(clock.monotonic() - start, 1))
                break
        if fut.done() and not fut.cancelled():
            error = fut.exception()  # retrieved: the op's outcome is the cancellation
            if error is not None and is_spark_error(error):
                op.spark_error = first_line(error)
        self.log.info("spark_job_cancelled", job_group=op.id,
                      seconds=round(clock.monotonic() - start, 3))
        if interrupted is not None:
            self._finish(op, "cancelled")
            raise interrupted

    def _outcome(self, op: _Op, fut: asyncio.Future[Any], timed_out: bool) -> Any:
        # Not done: the cancel overran stop_timeout (fn runs Python code that no Spark
        # cancel reaches); the caller gets its cancellation, the thread finishes on its own.
        exc = None if fut.cancelled() or not fut.done() else fut.exception()
        if op.spark_error is None and exc is not None and is_spark_error(exc):
            op.spark_error = first_line(exc)
        if op.cancel_reason is not None:
            self._finish(op, "timed_out" if timed_out else "cancelled", op.cancel_reason)
            cls = SparkJobTimeoutError if timed_out else SparkJobCancelledError
            spark_said = f" (Spark: {op.spark_error[:300]})" if op.spark_error else ""
            if not fut.done():
                spark_said += (f"; its worker thread still runs fn after "
                               f"{self._options().stop_timeout:g} s of cancelling")
            raise cls(f"Spark job {op.id} cancelled: {op.cancel_reason}{spark_said}",
                      op.id) from None
        if fut.cancelled() or isinstance(exc, _NotStarted):
            self._finish(op, "cancelled")
            raise SparkJobCancelledError(f"Spark job {op.id} was cancelled", op.id)
        if exc is None:
            self._finish(op, "succeeded")
            return fut.result()
        translated = translate(exc, op)
        if isinstance(translated, SparkJobCancelledError):
            self._finish(op, "cancelled")
        else:
            self._finish(op, "failed")
        if translated is exc:
            raise exc
        raise translated from None

    def _finish(self, op: _Op, outcome: str, reason: str | None = None) -> None:
        if self.ops.pop(op.id, None) is None:
            return
        self.counts[outcome] += 1
        state = {"succeeded": "succeeded", "failed": "failed"}.get(outcome, "cancelled")
        prev = op.progress
        final = replace(prev, state=state, elapsed=op.elapsed(),
                        fraction=1.0 if state == "succeeded" else prev.fraction,
                        tasks_done=prev.tasks_total if state == "succeeded" else
                        prev.tasks_done)
        op.publish(final)
        self.recent.appendleft(final)
        self.log.debug("spark_job_finished", job_group=op.id, outcome=outcome, reason=reason)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    """Mark a worker's outcome as seen (no "exception was never retrieved" warning)."""
    if not fut.cancelled():
        fut.exception()


class _NotStarted(Exception):
    """The op was cancelled before its thread started it."""


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception as exc:  # a cancel of a finished job, a stopped context: harmless
        get_logger(__name__).debug("spark_cancel_call_failed", error=repr(exc))
