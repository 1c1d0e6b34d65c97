"""SparkSessionManager: one lazily created SparkSession per silo, and the jobs run on it.

Where it sits: a ``SparkGrain`` turn calls ``run_job`` -> ``SparkSessionManager.run`` -> a
worker thread (``max_concurrent_jobs`` of them) runs ``fn(spark, *args)``; the loop only
waits, polls progress off the loop and, on a timeout, a cancellation, a deactivation of the
grain or a stop, cancels the call's Spark job group again and again until the thread
returns (Spark cancels only jobs that exist at that moment). Nothing that touches Spark runs
on the event loop.

Binding to a silo: ``install_spark(silo, options_or_manager)``. A manager created from
options belongs to that silo and is stopped by the silo's lifecycle; a manager passed in is
shared (tests share one session per test run) and its creator stops it. A silo without one
gets a manager with ``SparkOptions()`` on its first Spark call.

Longer than most modules (about 650 lines): a call's thread, its job group, the cancel loop,
the progress poll and the stop deadline share one per-call state and one lock, and the
lifecycle binding that owns them sits with them; the back end (classic or Connect) lives in
``_backend``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import itertools
import os
import shutil
import sys
import threading
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from orleanspy._util.clock import Clock, SystemClock
from orleanspy._util.lifecycle import Lifecycle, SiloStage
from orleanspy.logging import get_logger
from orleanspy.spark._backend import Backend, ClassicBackend, ConnectBackend
from orleanspy.spark.convert import to_plain
from orleanspy.spark.errors import (
    SparkJobCancelledError,
    SparkJobError,
    SparkJobTimeoutError,
    SparkUnavailableError,
)
from orleanspy.spark.job import JobProgress, ProgressCallback, SparkJob, _Op
from orleanspy.spark.options import SparkOptions

__all__ = [
    "SparkSessionManager",
    "SparkStatistics",
    "bind_spark",
    "install_spark",
    "installed_spark",
    "spark_for",
]

T = TypeVar("T")

RECENT_JOBS = 20  # finished jobs kept for the statistics (the dashboard's Spark panel)

_CONF_DIR = Path(__file__).with_name("conf")
_CANCELLED_MARKERS = ("SPARK_JOB_CANCELLED", "OPERATION_CANCELED", "cancelled as part of",
                      "was cancelled", "Job group", "cancelled because")


@dataclass(frozen=True, slots=True)
class SparkStatistics:
    """What a silo's Spark session is doing (the dashboard's input)."""

    state: str  # not_started | starting | running | stopping | stopped | failed
    master: str
    connect: bool
    jobs_running: int
    jobs_queued: int
    jobs_succeeded: int
    jobs_failed: int
    jobs_cancelled: int
    jobs_timed_out: int
    running: tuple[JobProgress, ...]
    recent: tuple[JobProgress, ...] = ()  # the last RECENT_JOBS finished, newest first


class SparkSessionManager:
    """Owns one SparkSession (created on first use) and runs jobs on it off the loop.

    Example::

        manager = SparkSessionManager(SparkOptions(master="local[2]"))
        total = await manager.run(lambda spark: spark.range(10).count())
        await manager.stop()
    """

    def __init__(self, options: SparkOptions | None = None, *, clock: Clock | None = None) -> None:
        self.options = options if options is not None else SparkOptions()
        #: Every wait on the loop (progress polls, cancel re-tries, the stop's deadline) and
        #: every job's elapsed time; a silo's own manager takes the silo's clock.
        self.clock = clock if clock is not None else SystemClock()
        self.log = get_logger(__name__, master=self.options.connect_url or self.options.master)
        self._pool = ThreadPoolExecutor(
            max_workers=self.options.max_concurrent_jobs, thread_name_prefix="orleanspy-spark"
        )
        self._lock = threading.Lock()
        self._session: Any = None
        self._backend: Backend | None = None
        self._owns_session = False
        self._state = "not_started"
        self._stopping = False
        self._stop_done: asyncio.Future[None] | None = None
        self._ops: dict[str, _Op] = {}
        self._ids = itertools.count(1)
        self._counts = {"succeeded": 0, "failed": 0, "cancelled": 0, "timed_out": 0}
        self._recent: deque[JobProgress] = deque(maxlen=RECENT_JOBS)

    def __repr__(self) -> str:
        return f"<SparkSessionManager {self.options.connect_url or self.options.master} " \
               f"{self._state}>"

    # -- session ------------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def is_connect(self) -> bool:
        return self.options.connect_url is not None

    async def start(self, *, warm_up: bool = False) -> None:
        """Create the session now (in a thread) instead of on the first job.

        Args:
            warm_up: also run one tiny query (the first query of a JVM is ~10x slower).

        Raises:
            SparkUnavailableError: pyspark or Java is missing, or the session failed to start.
        """
        await asyncio.to_thread(self._ensure_session)
        if warm_up:
            await self.run(lambda spark: spark.range(4).count(), tag="orleanspy-warm-up",
                           description="warm-up")

    def session_nowait(self) -> Any:
        """The SparkSession if it is running (for tests and tools; do not use it on the loop)."""
        if self._session is None:
            raise RuntimeError("the Spark session is not started; await manager.start() first")
        return self._session

    def _ensure_session(self) -> Backend:
        """Blocking: the session's back end, creating the session on first use."""
        with self._lock:
            if self._stopping:
                raise RuntimeError(
                    "the Spark session manager is stopped; create a new SparkSessionManager"
                )
            if self._backend is not None:
                return self._backend
            self._state = "starting"
            started = self.clock.monotonic()
            try:
                session, owned = _create_session(self.options)
                backend: Backend = (
                    ConnectBackend(session) if self.is_connect else ClassicBackend(session)
                )
                backend.set_log_level(self.options.log_level)
            except BaseException:
                self._state = "failed"
                raise
            self._session, self._backend, self._owns_session = session, backend, owned
            self._state = "running"
            self.log.info("spark_session_started",
                          seconds=round(self.clock.monotonic() - started, 2),
                          connect=self.is_connect, reused=not owned)
            return backend

    def _wait_for_start(self) -> None:
        """Blocking: return once no thread is creating the session."""
        with self._lock:
            pass

    async def stop(self) -> None:
        """Refuse new jobs, cancel the running ones until their threads return, stop the
        session (if this manager created it). Idempotent."""
        loop = asyncio.get_running_loop()
        if self._stop_done is not None:
            if self._stop_done.get_loop() is loop:
                await asyncio.shield(self._stop_done)
            return
        self._stop_done = loop.create_future()
        try:
            await self._stop()
        finally:
            self._stop_done.set_result(None)

    async def _stop(self) -> None:
        clock = self.clock
        self._stopping = True
        self._state = "stopping"
        deadline = clock.monotonic() + self.options.stop_timeout
        for op in self._ops.values():
            op.cancel_reason = op.cancel_reason or "the Spark session is stopping"
        # A session being created (the lazy start takes seconds) must exist before it is
        # stopped, or it would come up after stop() and run unowned: wait for its creator.
        await asyncio.to_thread(self._wait_for_start)
        backend = self._backend
        while clock.monotonic() < deadline:
            running = [op for op in self._ops.values()
                       if op.started and not op.thread_done.is_set()]
            if not running:
                break
            if backend is not None:
                await asyncio.to_thread(_quietly, backend.cancel_all)
            await asyncio.to_thread(running[0].thread_done.wait, self.options.cancel_interval)
        else:
            self.log.error("spark_stop_jobs_abandoned", count=len(self._ops))
        session, self._session, self._backend = self._session, None, None
        if session is not None and self._owns_session:
            await asyncio.to_thread(session.stop)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._state = "stopped"
        if session is not None:  # a session never created (no Spark job ran) has no stop
            self.log.info("spark_session_stopped")

    # -- jobs -----------------------------------------------------------------------------------
    def submit(
        self,
        fn: Callable[..., T],
        *args: Any,
        tag: str = "orleanspy",
        description: str = "",
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        guard: Callable[[], str | None] | None = None,
        convert: bool = True,
    ) -> SparkJob[T]:
        """Start ``fn(spark, *args)`` on a worker thread; returns its ``SparkJob`` handle.

        Args:
            fn: a function of the SparkSession (and ``args``) returning plain data. Build
                DataFrames inside it; never capture a grain (``self``) in it.
            tag: the Spark job tag (the grain's), for ``cancel_tag``; no commas.
            description: shown in the Spark UI and in progress.
            timeout: seconds after which the job is cancelled (``SparkJobTimeoutError``).
            on_progress: called on the loop with each new ``JobProgress``.
            guard: called every progress interval; a non-None reason cancels the job.
            convert: turn rows, pandas and Arrow results into plain data (``to_plain``).

        Raises:
            RuntimeError: the manager is stopped.
        """
        if self._stopping:
            raise RuntimeError("the Spark session manager is stopped; no new jobs")
        if "," in tag or not tag:
            raise ValueError(f"Spark job tag {tag!r}: must be non-empty without commas")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        op_id = f"{tag}#{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        op = _Op(op_id, tag, description, fn, args, guard, convert, self.clock)
        if on_progress is not None:
            op.listeners.append(on_progress)
        self._ops[op_id] = op
        task: asyncio.Task[T] = asyncio.get_running_loop().create_task(
            self._drive(op, timeout), name=f"spark-job {op_id}"
        )
        return SparkJob(op, task)

    async def run(
        self,
        fn: Callable[..., T],
        *args: Any,
        tag: str = "orleanspy",
        description: str = "",
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
        guard: Callable[[], str | None] | None = None,
        convert: bool = True,
    ) -> T:
        """``submit`` and wait: the result, or the job's error (see ``SparkJob``)."""
        job = self.submit(fn, *args, tag=tag, description=description, timeout=timeout,
                          on_progress=on_progress, guard=guard, convert=convert)
        return await job.result()

    def cancel_tag(self, tag: str, reason: str = "cancelled") -> int:
        """Cancel every job started with ``tag``; returns how many were in flight.

        Each is cancelled at once and its driver repeats the cancel until its thread returns.
        """
        ops = [op for op in self._ops.values() if op.tag == tag]
        for op in ops:
            op.cancel_reason = op.cancel_reason or reason
        if ops and self._backend is not None:
            backend = self._backend
            self._pool_free_call(backend.cancel_tag, tag)
        return len(ops)

    def jobs(self, tag: str | None = None) -> list[JobProgress]:
        """Progress of the jobs in flight (of one tag, or all)."""
        return [op.progress for op in self._ops.values() if tag is None or op.tag == tag]

    def statistics(self) -> SparkStatistics:
        ops = list(self._ops.values())
        return SparkStatistics(
            state=self._state,
            master=self.options.connect_url or self.options.master,
            connect=self.is_connect,
            jobs_running=sum(1 for op in ops if op.progress.state == "running"),
            jobs_queued=sum(1 for op in ops if op.progress.state == "queued"),
            jobs_succeeded=self._counts["succeeded"],
            jobs_failed=self._counts["failed"],
            jobs_cancelled=self._counts["cancelled"],
            jobs_timed_out=self._counts["timed_out"],
            running=tuple(op.progress for op in ops),
            recent=tuple(self._recent),
        )

    # -- internals ------------------------------------------------------------------------------
    def _pool_free_call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a quick blocking Spark call on a plain thread (the job pool may be full)."""
        threading.Thread(target=_quietly, args=(fn, *args), daemon=True,
                         name="orleanspy-spark-cancel").start()

    def _body(self, op: _Op) -> Any:
        """Worker thread: scope the thread to the op, run ``fn``, always unscope."""
        try:
            if op.cancel_reason is not None:
                raise _NotStarted
            backend = self._ensure_session()
            if op.cancel_reason is not None:  # cancelled while the session was starting
                raise _NotStarted
            try:
                backend.enter(op)  # may fail half-way: exit() clears what it set
                op.started = True
                result = op.fn(self._session, *op.args)
                return to_plain(result) if op.convert else result
            finally:
                backend.exit(op)
        finally:
            op.thread_done.set()

    async def _drive(self, op: _Op, timeout: float | None) -> Any:
        clock = self.clock
        interval = self.options.progress_interval
        deadline = None if timeout is None else clock.monotonic() + timeout
        ctx = contextvars.copy_context()
        queued = self._pool.submit(ctx.run, self._body, op)
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
                    op.cancel_reason = f"timed out after {timeout:g} s"
                if op.cancel_reason is None and op.guard is not None:
                    op.cancel_reason = op.guard()
                if op.cancel_reason is None and self._stopping:
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
        backend = self._backend
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
                backend = self._backend
                if backend is not None and (op.started or first):
                    await asyncio.to_thread(_quietly, backend.cancel, op, first)
                    first = False
                await self._wait_done(fut, self.options.cancel_interval)
            except asyncio.CancelledError as exc:
                interrupted = exc
            if clock.monotonic() - start > self.options.stop_timeout and not fut.done():
                self.log.error("spark_job_cancel_overrun", job_group=op.id,
                               seconds=round(clock.monotonic() - start, 1))
                break
        if fut.done() and not fut.cancelled():
            error = fut.exception()  # retrieved: the op's outcome is the cancellation
            if error is not None and _is_spark_error(error):
                op.spark_error = _head(error)
        self.log.info("spark_job_cancelled", job_group=op.id,
                      seconds=round(clock.monotonic() - start, 3))
        if interrupted is not None:
            self._finish(op, "cancelled")
            raise interrupted

    def _outcome(self, op: _Op, fut: asyncio.Future[Any], timed_out: bool) -> Any:
        # Not done: the cancel overran stop_timeout (fn runs Python code that no Spark
        # cancel reaches); the caller gets its cancellation, the thread finishes on its own.
        exc = None if fut.cancelled() or not fut.done() else fut.exception()
        if op.spark_error is None and exc is not None and _is_spark_error(exc):
            op.spark_error = _head(exc)
        if op.cancel_reason is not None:
            self._finish(op, "timed_out" if timed_out else "cancelled", op.cancel_reason)
            cls = SparkJobTimeoutError if timed_out else SparkJobCancelledError
            spark_said = f" (Spark: {op.spark_error[:300]})" if op.spark_error else ""
            if not fut.done():
                spark_said += (f"; its worker thread still runs fn after "
                               f"{self.options.stop_timeout:g} s of cancelling")
            raise cls(f"Spark job {op.id} cancelled: {op.cancel_reason}{spark_said}",
                      op.id) from None
        if fut.cancelled() or isinstance(exc, _NotStarted):
            self._finish(op, "cancelled")
            raise SparkJobCancelledError(f"Spark job {op.id} was cancelled", op.id)
        if exc is None:
            self._finish(op, "succeeded")
            return fut.result()
        translated = _translate(exc, op)
        if isinstance(translated, SparkJobCancelledError):
            self._finish(op, "cancelled")
        else:
            self._finish(op, "failed")
        if translated is exc:
            raise exc
        raise translated from None

    def _finish(self, op: _Op, outcome: str, reason: str | None = None) -> None:
        if self._ops.pop(op.id, None) is None:
            return
        self._counts[outcome] += 1
        state = {"succeeded": "succeeded", "failed": "failed"}.get(outcome, "cancelled")
        prev = op.progress
        final = replace(prev, state=state, elapsed=op.elapsed(),
                        fraction=1.0 if state == "succeeded" else prev.fraction,
                        tasks_done=prev.tasks_total if state == "succeeded" else
                        prev.tasks_done)
        op.publish(final)
        self._recent.appendleft(final)
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


def _is_spark_error(exc: BaseException) -> bool:
    module = type(exc).__module__
    return module.startswith(("py4j", "pyspark"))


def _head(exc: BaseException) -> str:
    """The first meaningful line of a Spark/py4j error (py4j puts it after a preamble)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("org.apache.spark", "[")) or "Exception:" in line:
            return line.removeprefix(": ")
    return lines[0] if lines else type(exc).__name__


def _translate(exc: BaseException, op: _Op) -> BaseException:
    """Spark and py4j errors -> plain SparkJobError/SparkJobCancelledError (no JVM refs)."""
    if isinstance(exc, (SparkUnavailableError, SparkJobError, SparkJobCancelledError)):
        return exc
    if not _is_spark_error(exc):
        return exc  # the user's own exception, as raised by fn
    text = str(exc)
    error_class = None
    getter = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    if getter is not None:
        try:
            error_class = getter()
        except Exception:
            error_class = None
    head = _head(exc)
    if any(marker in text for marker in _CANCELLED_MARKERS[:2]) or (
        op.cancel_reason is not None and any(m in text for m in _CANCELLED_MARKERS)
    ):
        return SparkJobCancelledError(f"Spark job {op.id} was cancelled: {head[:500]}", op.id)
    op.error_class = error_class
    return SparkJobError(f"{type(exc).__name__}: {head[:2000]}", error_class)


def _create_session(options: SparkOptions) -> tuple[Any, bool]:
    """Blocking: build (or join) the process's SparkSession. Returns (session, created)."""
    connect = options.connect_url
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailableError(
            f"pyspark is not installed ({exc}); install the Spark extra: "
            "pip install 'orleanspy[spark]'"
        ) from None
    if connect is None and _java() is None:
        raise SparkUnavailableError(
            "Java was not found (no JAVA_HOME and no java on PATH); the embedded Spark driver "
            "needs a JDK 17 or 21: install one (e.g. apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME, or point spark.remote at a Spark Connect server"
        )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_CONF_DIR", str(_CONF_DIR))
    if options.is_local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Another owner's session (getActiveSession() is per thread: None on this worker
    # thread even when the process runs a session, so look at the process's SparkContext).
    existing = connect is None and _context_running()
    builder = SparkSession.builder.appName(options.app_name)
    builder = builder.remote(connect) if connect is not None else builder.master(options.master)
    for key, value in options.session_conf().items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except ImportError as exc:
        raise SparkUnavailableError(
            f"Spark Connect needs extra packages ({exc}); install them: "
            "pip install 'pyspark[connect]'"
        ) from None
    except Exception as exc:
        text = str(exc)
        hint = ("check that Java 17+ runs (java -version) and JAVA_HOME points at it"
                if "JAVA_GATEWAY" in text or "Java gateway" in text
                else "check the master URL and the spark.* settings")
        raise SparkUnavailableError(
            f"the SparkSession did not start ({type(exc).__name__}: "
            f"{text.strip().splitlines()[0] if text.strip() else ''}); {hint}"
        ) from None
    return session, not existing


def _context_running() -> bool:
    """Blocking-free: whether this process already has a classic SparkContext."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if candidate.exists():
            return str(candidate)
    return shutil.which("java")


# -- binding to silos ----------------------------------------------------------------------
class _SparkSlot:
    """The silo's Spark manager, kept on its lifecycle; the lifecycle's "spark" participant
    stops it (if the silo owns it) and reports its statistics."""

    __slots__ = ("manager", "owned")

    def __init__(self, manager: SparkSessionManager, owned: bool) -> None:
        self.manager = manager
        self.owned = owned

    async def stop(self) -> None:
        if self.owned:
            await self.manager.stop()

    def statistics(self) -> SparkStatistics:
        return self.manager.statistics()


def install_spark(silo: Any, spark: SparkOptions | SparkSessionManager | None = None) -> (
    SparkSessionManager
):
    """Give ``silo`` its Spark session manager (before or after the silo starts).

    Args:
        silo: the silo whose ``SparkGrain``s use it.
        spark: options (a new manager owned by the silo: stopped when the silo stops), or a
            manager (shared: its creator stops it), or None for ``SparkOptions()``.

    Returns:
        The manager.

    Raises:
        RuntimeError: the silo already runs another Spark session, or it is stopping.
    """
    if isinstance(spark, SparkSessionManager):
        return bind_spark(silo.lifecycle, spark, owned=False)
    return bind_spark(silo.lifecycle, SparkSessionManager(spark, clock=silo.clock), owned=True)


def bind_spark(lifecycle: Lifecycle, manager: SparkSessionManager, *, owned: bool) -> (
    SparkSessionManager
):
    """Make ``manager`` the Spark session manager of the silo whose lifecycle this is
    (``owned``: the silo stops it). What ``install_spark`` and the silo builder use."""
    slot = lifecycle.component(_SparkSlot)
    if slot is not None:
        if slot.manager is not manager and slot.manager.started:
            raise RuntimeError("this silo already runs a Spark session; install before first use")
        slot.manager, slot.owned = manager, owned
        return manager
    slot = _SparkSlot(manager, owned)
    # Stops run by descending stage, and a SparkGrain's deactivation (stage GRAINS) cancels
    # its jobs through this manager: the session stops at STORAGE, below GRAINS, so that it
    # outlives every grain. The statistics are silo.statistics().extensions["spark"].
    lifecycle.subscribe("spark", SiloStage.STORAGE, on_stop=slot.stop,
                        statistics=slot.statistics)
    lifecycle.set_component(_SparkSlot, slot)
    return manager


def spark_for(silo: Any) -> SparkSessionManager:
    """The silo's manager (installing one with default options on first use)."""
    manager = installed_spark(silo)
    return manager if manager is not None else install_spark(silo, None)


def installed_spark(silo: Any) -> SparkSessionManager | None:
    """The silo's manager if it has one (creates nothing: usable while the silo stops)."""
    lifecycle: Lifecycle = silo.lifecycle
    slot = lifecycle.component(_SparkSlot)
    return None if slot is None else slot.manager
