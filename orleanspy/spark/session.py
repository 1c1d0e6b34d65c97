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

Split by role: this module holds the session's life (lazy start under one lock, stop with
its deadline), the public job API and the binding to a silo's lifecycle; building the
session lives in ``create.py``, the jobs' threads, drivers and cancel loops in
``runner.py``, the translation of Spark's errors in ``failures.py``, and the back ends
(classic or Connect) in ``_backend.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from orleanspy._util.clock import Clock, SystemClock
from orleanspy._util.lifecycle import Lifecycle, SiloStage
from orleanspy.logging import get_logger
from orleanspy.spark._backend import Backend, ClassicBackend, ConnectBackend
from orleanspy.spark.create import create_session
from orleanspy.spark.job import JobProgress, ProgressCallback, SparkJob, _Op
from orleanspy.spark.lake import check_lake
from orleanspy.spark.options import SparkOptions
from orleanspy.spark.runner import JobRunner

__all__ = [
    "SparkSessionManager",
    "SparkStatistics",
    "bind_spark",
    "install_spark",
    "installed_spark",
    "spark_for",
]

T = TypeVar("T")



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
    recent: tuple[JobProgress, ...] = ()  # the last runner.RECENT_JOBS finished, newest first


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
        self._lock = threading.Lock()
        self._session: Any = None
        self._backend: Backend | None = None
        self._owns_session = False
        self._state = "not_started"
        self._stopping = False
        self._stop_done: asyncio.Future[None] | None = None
        self._ids = itertools.count(1)
        self._jobs = JobRunner(
            lambda: self.options, self.clock, self.log,
            open_session=self._ensure_session,
            session=lambda: self._session,
            backend=lambda: self._backend,
            stopping=lambda: self._stopping,
        )

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
                session, owned = create_session(self.options)
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
        self._jobs.cancel_all("the Spark session is stopping")
        # A session being created (the lazy start takes seconds) must exist before it is
        # stopped, or it would come up after stop() and run unowned: wait for its creator.
        await asyncio.to_thread(self._wait_for_start)
        await self._jobs.wait_for_threads(deadline)
        session, self._session, self._backend = self._session, None, None
        if session is not None and self._owns_session:
            await asyncio.to_thread(session.stop)
        self._jobs.shutdown()
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
        call_tag: str | None = None,
        call_timeout: float | None = None,
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
            call_tag: a second job tag: the grain call that starts the job.
            call_timeout: seconds the calling request has left: past them the job is
                cancelled too (``SparkJobTimeoutError``), whatever ``timeout`` says.

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
        op.call_tag = call_tag
        if on_progress is not None:
            op.listeners.append(on_progress)
        return self._jobs.start(op, timeout, call_timeout)

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
        return self._jobs.cancel_tag(tag, reason)

    def jobs(self, tag: str | None = None) -> list[JobProgress]:
        """Progress of the jobs in flight (of one tag, or all)."""
        return [op.progress for op in self._jobs.ops.values() if tag is None or op.tag == tag]

    def statistics(self) -> SparkStatistics:
        jobs = self._jobs
        ops = list(jobs.ops.values())
        counts = jobs.counts
        return SparkStatistics(
            state=self._state,
            master=self.options.connect_url or self.options.master,
            connect=self.is_connect,
            jobs_running=sum(1 for op in ops if op.progress.state == "running"),
            jobs_queued=sum(1 for op in ops if op.progress.state == "queued"),
            jobs_succeeded=counts["succeeded"],
            jobs_failed=counts["failed"],
            jobs_cancelled=counts["cancelled"],
            jobs_timed_out=counts["timed_out"],
            running=tuple(op.progress for op in ops),
            recent=tuple(jobs.recent),
        )


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
        ConfigurationError: the options' ``lake`` is a relative path and the silo is a
            cluster member.
    """
    options = spark.options if isinstance(spark, SparkSessionManager) else spark
    if options is not None:
        check_lake(options.lake, silo.options.membership)
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
