"""SparkGrain: a grain whose methods run PySpark jobs on the silo's shared SparkSession.

A turn calls ``await self.run_job(fn, *args, timeout=...)``; ``fn(spark, *args)`` runs on a
worker thread of the silo's ``SparkSessionManager`` while the loop stays free. The call's
Spark jobs carry a job group of their own and the grain's job tag, so a timeout, the
cancellation of the awaiting turn, the grain's deactivation or the silo's stop cancel the
Spark jobs themselves, not only the await.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any, TypeVar

from orleanspy import tracing
from orleanspy.grains.context import current_turn
from orleanspy.grains.grain import Grain
from orleanspy.grains.interface import always_interleave
from orleanspy.grains.request_context import get_context
from orleanspy.messaging.message import Direction
from orleanspy.runtime.tracing_filters import traced
from orleanspy.spark.job import JobProgress, ProgressCallback, SparkJob
from orleanspy.spark.session import SparkSessionManager, installed_spark, spark_for

__all__ = ["SparkGrain"]

T = TypeVar("T")

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/=-]")
_DEACTIVATING = 3  # ActivationState.DEACTIVATING (runtime enum, compared by value)


class SparkGrain(Grain):
    """Base class of grains that run Spark jobs.

    Example::

        class PageStats(SparkGrain):
            async def top_pages(self, path: str, n: int) -> list[dict]:
                def job(spark, path, n):          # runs on a worker thread
                    df = spark.read.parquet(path)
                    return df.groupBy("page").count().orderBy("count", ascending=False) \\
                             .limit(n).collect()   # rows come back as dicts
                return await self.run_job(job, path, n, timeout=60)

    Write ``fn`` as a plain function of its arguments: copy what it needs out of ``self``
    first (a closure over the grain would drag the runtime into Spark's pickling). Return
    small, aggregated results; rows, pandas and Arrow results are converted to plain data.
    Callers of long jobs should give the grain call a timeout above the job's
    (``ref.with_timeout(120).top_pages(...)``; the default call timeout is 30 s).
    """

    @property
    def spark(self) -> SparkSessionManager:
        """The silo's Spark session manager."""
        return spark_for(self.silo)

    @property
    def spark_tag(self) -> str:
        """The Spark job tag of this grain's jobs (``orleanspy/<type>/<key>``, no commas;
        a short hash is appended when the key is not a plain string, so that two grains
        never share a tag)."""
        gid = self.grain_id
        raw = f"orleanspy/{gid.type_name}/{gid.key}"
        tag = _TAG_UNSAFE.sub("_", raw)
        if tag != raw or len(tag) > 200 or not isinstance(gid.key, str):
            digest = hashlib.blake2b(f"{type(gid.key).__name__}:{raw}".encode(),
                                     digest_size=5).hexdigest()
            tag = f"{tag[:180]}-{digest}"
        return tag

    def submit_job(
        self,
        fn: Callable[..., T],
        *args: Any,
        timeout: float | None = None,
        description: str = "",
        on_progress: ProgressCallback | None = None,
    ) -> SparkJob[T]:
        """Start ``fn(spark, *args)``; returns the ``SparkJob`` (``await job`` for the
        result, ``async for p in job.updates()`` for progress). See ``run_job``."""
        activation = self._orleanspy_activation
        silo = self.silo

        def guard() -> str | None:
            if silo.stopping:
                return "the silo is stopping"
            if activation.state >= _DEACTIVATING:
                return f"grain {activation.grain_id} is deactivating"
            return None

        call = self._spark_call()
        name = f"{self.grain_id.type_name}/{self.grain_id.key}"
        if call is None:
            label = f"{name}: {description or _describe(fn)}"
            call_tag, left = None, None
        else:
            method, request_id, left = call
            label = f"{name}.{method}" + (f": {description}" if description else "")
            call_tag = f"{self.spark_tag}/{method}#{request_id}"
        return self.spark.submit(
            fn, *args, tag=self.spark_tag, description=label, timeout=timeout,
            on_progress=on_progress, guard=guard, call_tag=call_tag, call_timeout=left,
        )

    def _spark_call(self) -> tuple[str, int, float | None] | None:
        """``(method, request id, seconds its caller has left)`` of the grain call running
        this code (None outside one: a timer, activation; no time limit for a one-way)."""
        turn = current_turn.get()
        if turn is None or turn.invoke is not None or turn.target != self.grain_id:
            return None
        if turn.direction is Direction.ONE_WAY:  # nobody waits for it
            return turn.method, turn.id, None
        now = self.silo.clock.monotonic()
        deadline = turn.deadline or now + (turn.timeout or self.silo.options.response_timeout)
        return turn.method, turn.id, deadline - now

    async def run_job(
        self,
        fn: Callable[..., T],
        *args: Any,
        timeout: float | None = None,
        description: str = "",
        on_progress: ProgressCallback | None = None,
    ) -> T:
        """Run ``fn(spark, *args)`` on a worker thread and return its (plain) result.

        Args:
            fn: a function of the SparkSession and ``args``.
            timeout: seconds; past it the Spark jobs are cancelled and
                ``SparkJobTimeoutError`` is raised. The grain call running this has a
                timeout of its own (its caller's): when that passes first, the jobs are
                cancelled then.
            description: added to the job's label (``PageStats/daily.top: description``)
                shown in progress, the dashboard and the Spark UI; the label names the grain
                and its method (or, outside a grain call, ``fn``).
            on_progress: called on the loop with each new ``JobProgress``.

        Raises:
            SparkJobTimeoutError: the timeout elapsed (the jobs were cancelled).
            SparkJobCancelledError: ``cancel_spark_jobs``, a deactivation or a silo stop
                cancelled it.
            SparkJobError: Spark failed the job (message and Spark error class).
            SparkUnavailableError: pyspark or Java is missing, or the session cannot start.
            Any exception ``fn`` raises itself.
        """
        job = self.submit_job(fn, *args, timeout=timeout, description=description,
                              on_progress=on_progress)
        tracer = tracing.tracer()
        if tracer is None:
            return await job.result()
        # a span of its own, child of the grain call's (``orleanspy.tracing``)
        span = tracing.start_span(
            tracer, f"spark job {job.progress.description or job.job_group}", "internal",
            get_context(), {"orleanspy.spark.job_group": job.job_group})
        result: T = await traced(tracer, span, job.result())
        return result

    def cancel_spark_jobs(self, reason: str = "cancelled by the grain") -> int:
        """Cancel every Spark job this grain has in flight; returns how many."""
        manager = installed_spark(self.silo)
        return 0 if manager is None else manager.cancel_tag(self.spark_tag, reason)

    @always_interleave
    async def spark_progress(self) -> list[dict[str, Any]]:
        """Progress of this grain's jobs in flight, as plain dicts (callable remotely, even
        while a job holds the grain's turn: the CLI's progress bar uses it)."""
        return [p.as_dict() for p in self._spark_jobs()]

    @always_interleave
    async def cancel_spark(self) -> int:
        """Cancel this grain's Spark jobs from outside (callable while a job runs)."""
        return self.cancel_spark_jobs("cancelled by a caller")

    def _spark_jobs(self) -> list[JobProgress]:
        manager = installed_spark(self.silo)
        return [] if manager is None else manager.jobs(self.spark_tag)

    async def on_deactivate(self, reason: Any) -> None:
        """Cancel whatever this grain still runs. Subclasses overriding it call super()."""
        self.cancel_spark_jobs(f"grain deactivated ({reason})")


def _describe(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "spark job"))
