"""SparkJob and JobProgress: one Spark call in flight, its progress and its outcome.

A job is identified by its Spark *job group* (unique per call, used for progress and for
cancelling that call) and carries the *job tag* of the grain that started it (used to cancel
everything a grain started when it deactivates).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import asdict, dataclass, replace
from typing import Any, Generic, TypeVar

from orleanspy._util.clock import Clock
from orleanspy.logging import get_logger

__all__ = ["JobProgress", "SparkJob"]

T = TypeVar("T")

ProgressCallback = Callable[["JobProgress"], Any]


@dataclass(frozen=True, slots=True)
class JobProgress:
    """A snapshot of a job's progress.

    ``tasks_done`` of ``tasks_total`` counts the tasks of every Spark job the call started
    so far (adaptive execution adds jobs while a query runs, so the total may grow).
    ``fraction`` is monotonic: it never goes down, and reaches 1.0 only when the call
    succeeded.
    """

    job_group: str
    description: str
    state: str  # queued | running | succeeded | failed | cancelled
    jobs: int = 0
    stage: str | None = None
    tasks_done: int = 0
    tasks_total: int = 0
    fraction: float = 0.0
    elapsed: float = 0.0

    @property
    def done(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for grain replies and the CLI)."""
        return asdict(self)


class _Op:
    """The shared state of one call: written by the loop and read by the worker thread."""

    __slots__ = (
        "args",
        "call_tag",
        "cancel_reason",
        "clock",
        "convert",
        "description",
        "error_class",
        "fn",
        "guard",
        "id",
        "listeners",
        "progress",
        "pushed",
        "spark_error",
        "started",
        "started_at",
        "tag",
        "thread_done",
    )

    def __init__(
        self, op_id: str, tag: str, description: str, fn: Callable[..., Any],
        args: tuple[Any, ...], guard: Callable[[], str | None] | None, convert: bool,
        clock: Clock,
    ) -> None:
        self.id = op_id
        self.tag = tag
        self.description = description
        self.fn = fn
        self.args = args
        self.guard = guard
        self.convert = convert
        self.started = False  # the worker set the job group: Spark jobs may exist
        self.thread_done = threading.Event()
        self.cancel_reason: str | None = None
        self.error_class: str | None = None
        self.spark_error: str | None = None  # Spark's own words on how the op ended
        self.clock = clock
        self.started_at = clock.monotonic()
        self.progress = JobProgress(op_id, description, "queued")
        self.pushed: JobProgress | None = None  # written by a worker thread (Connect)
        self.listeners: list[Callable[[JobProgress], None]] = []
        self.call_tag: str | None = None  # the Spark job tag of the grain call that started it

    def elapsed(self) -> float:
        """Seconds since the call was submitted, on the manager's clock (any thread)."""
        return self.clock.monotonic() - self.started_at

    def publish(self, progress: JobProgress) -> None:
        """Record a new snapshot (monotonic fraction) and tell the listeners (on the loop;
        a listener's exception is logged, not raised)."""
        prev = self.progress
        if progress.state == "running":
            fraction = min(max(prev.fraction, progress.fraction), 0.99)
            progress = replace(progress, fraction=fraction,
                               tasks_done=max(progress.tasks_done, prev.tasks_done))
        elif progress.state != "succeeded":
            progress = replace(progress, fraction=prev.fraction)
        if progress == prev:
            return
        self.progress = progress
        for listener in list(self.listeners):
            try:
                listener(progress)
            except Exception as exc:  # an observer's bug must not orphan the Spark job
                get_logger(__name__).warning("spark_progress_callback_failed",
                                             job_group=self.id, error=repr(exc))


class SparkJob(Generic[T]):
    """A submitted Spark call: ``await job`` for the result, ``job.updates()`` for progress.

    Cancelling the awaiting task (or calling ``cancel()``) cancels the Spark jobs of the call
    and keeps cancelling until its worker thread returns.
    """

    def __init__(self, op: _Op, task: asyncio.Task[T]) -> None:
        self._op = op
        self._task = task
        self._changed = asyncio.Event()
        op.listeners.append(lambda _: self._changed.set())
        task.add_done_callback(lambda _: self._changed.set())

    @property
    def job_group(self) -> str:
        """The Spark job group of this call (``statusTracker().getJobIdsForGroup``)."""
        return self._op.id

    @property
    def tag(self) -> str:
        """The Spark job tag of the grain that started it."""
        return self._op.tag

    @property
    def call_tag(self) -> str | None:
        """The Spark job tag of the grain call that started it
        (``<grain tag>/<method>#<request id>``), or None outside a grain call."""
        return self._op.call_tag

    @property
    def progress(self) -> JobProgress:
        return self._op.progress

    def done(self) -> bool:
        return self._task.done()

    def cancel(self, reason: str = "cancelled") -> None:
        """Request cancellation; ``await job`` then raises ``SparkJobCancelledError``."""
        if self._op.cancel_reason is None:
            self._op.cancel_reason = reason
        self._changed.set()

    async def result(self) -> T:
        """Wait for the outcome; cancelling this wait cancels the job."""
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.done():
                self._task.cancel()
                await asyncio.wait([self._task])
            raise

    def __await__(self) -> Generator[Any, None, T]:
        return self.result().__await__()

    async def updates(self) -> AsyncIterator[JobProgress]:
        """Yield each new progress snapshot until the job ends (the last one is final)."""
        last: JobProgress | None = None
        while True:
            self._changed.clear()
            current = self._op.progress
            if current != last:
                last = current
                yield current
            if self._task.done():
                final = self._op.progress
                if final != last:
                    yield final
                return
            await self._changed.wait()
