"""Spark back ends: per-call scoping, cancellation and progress, classic and Connect.

Classic (embedded driver, py4j) and Spark Connect need different mechanisms:

* Classic: ``SparkSession.addTag``/``interruptTag`` only work within one thread, so a call is
  scoped with SparkContext *job groups* (one per call, cancelled from any thread) and *job
  tags* (one per grain). A cancel only hits jobs that exist, so the caller repeats it until
  the worker thread returns; ``cancelJobGroupAndFutureJobs`` also refuses later jobs of the
  group. Progress is polled from ``statusTracker()`` (about 6 ms, so off the loop).
* Connect: session tags are matched by name on the server, so ``interruptTag`` works from any
  thread; progress is pushed to a handler that runs on the worker thread.

Every method here blocks (py4j or gRPC): callers run them in threads, never on the loop.
Pool threads are reused, and Spark's thread-local properties stick to them: ``exit`` clears
what ``enter`` set.
"""

from __future__ import annotations

import threading
from typing import Any

from orleanspy.spark.job import JobProgress, _Op

__all__ = ["Backend", "ClassicBackend", "ConnectBackend"]


class Backend:
    """What the session manager needs from a Spark session kind."""

    __slots__ = ("spark",)

    polls_progress = False

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def enter(self, op: _Op) -> None:
        """On the worker thread, before ``fn``: scope the thread's jobs to ``op``."""
        raise NotImplementedError

    def exit(self, op: _Op) -> None:
        """On the worker thread, after ``fn`` (always): clear what ``enter`` set."""
        raise NotImplementedError

    def cancel(self, op: _Op, first: bool) -> None:
        """Cancel the jobs of ``op`` (``first``: also refuse its future jobs)."""
        raise NotImplementedError

    def cancel_tag(self, tag: str) -> None:
        raise NotImplementedError

    def cancel_all(self) -> None:
        raise NotImplementedError

    def progress(self, op: _Op) -> JobProgress:
        """A fresh snapshot of ``op`` (only where ``polls_progress``)."""
        return op.progress

    def set_log_level(self, level: str) -> None:
        """Best effort."""


class ClassicBackend(Backend):
    """Embedded driver: job groups, job tags, FAIR pools and the status tracker."""

    __slots__ = ("_sc", "_scala_sc")

    polls_progress = True

    def __init__(self, spark: Any) -> None:
        super().__init__(spark)
        self._sc = spark.sparkContext
        self._scala_sc = self._sc._jsc.sc()

    def enter(self, op: _Op) -> None:
        sc = self._sc
        sc.setJobGroup(op.id, op.description or op.id, interruptOnCancel=True)
        sc.setJobDescription(op.description or op.id)
        sc.addJobTag(op.tag)
        if op.call_tag is not None:
            sc.addJobTag(op.call_tag)
        sc.setInterruptOnCancel(True)
        sc.setLocalProperty("spark.scheduler.pool", threading.current_thread().name)

    def exit(self, op: _Op) -> None:
        sc = self._sc
        sc._jsc.clearJobGroup()
        sc.setJobDescription(None)
        sc.clearJobTags()
        sc.setInterruptOnCancel(False)
        sc.setLocalProperty("spark.scheduler.pool", None)

    def cancel(self, op: _Op, first: bool) -> None:
        try:
            if first:  # Spark 4+ (absent in 3.5): the repeated cancelJobGroup still runs
                self._scala_sc.cancelJobGroupAndFutureJobs(op.id)
        finally:
            self._sc.cancelJobGroup(op.id)

    def cancel_tag(self, tag: str) -> None:
        self._sc.cancelJobsWithTag(tag)

    def cancel_all(self) -> None:
        self._sc.cancelAllJobs()

    def progress(self, op: _Op) -> JobProgress:
        tracker = self._sc.statusTracker()
        done = total = jobs = 0
        stage: str | None = None
        for job_id in tracker.getJobIdsForGroup(op.id):
            info = tracker.getJobInfo(job_id)
            if info is None:
                continue
            jobs += 1
            succeeded = info.status == "SUCCEEDED"
            for stage_id in info.stageIds:
                st = tracker.getStageInfo(stage_id)
                if st is None:
                    continue
                total += st.numTasks
                done += st.numTasks if succeeded else st.numCompletedTasks
                if not succeeded and st.numActiveTasks:
                    stage = st.name
        fraction = done / total if total else 0.0
        return JobProgress(
            op.id, op.description, "running", jobs=jobs, stage=stage, tasks_done=done,
            tasks_total=total, fraction=fraction,
            elapsed=op.elapsed(),
        )

    def set_log_level(self, level: str) -> None:
        self._sc.setLogLevel(level.upper())


class ConnectBackend(Backend):
    """Spark Connect client: session tags, ``interruptTag`` and pushed progress."""

    __slots__ = ("_current", "_handler")

    def __init__(self, spark: Any) -> None:
        super().__init__(spark)
        self._current = threading.local()
        self._handler = self._on_progress
        spark.registerProgressHandler(self._handler)

    def enter(self, op: _Op) -> None:
        self.spark.addTag(op.id)
        self.spark.addTag(op.tag)
        if op.call_tag is not None:
            self.spark.addTag(op.call_tag)
        self._current.op = op

    def exit(self, op: _Op) -> None:
        self._current.op = None
        self.spark.clearTags()

    def cancel(self, op: _Op, first: bool) -> None:
        self.spark.interruptTag(op.id)

    def cancel_tag(self, tag: str) -> None:
        self.spark.interruptTag(tag)

    def cancel_all(self) -> None:
        self.spark.interruptAll()

    def _on_progress(
        self, stages: Any, inflight_tasks: int, operation_id: str | None, done: bool
    ) -> None:
        # Runs on the worker thread that consumes the result stream: the thread's op.
        op: _Op | None = getattr(self._current, "op", None)
        if op is None:
            return
        total = finished = 0
        for st in stages or ():
            total += int(getattr(st, "num_tasks", 0))
            finished += int(getattr(st, "num_completed_tasks", 0))
        snapshot = JobProgress(
            op.id, op.description, "running", jobs=1, stage=None,
            tasks_done=finished, tasks_total=total,
            fraction=finished / total if total else 0.0,
            elapsed=op.elapsed(),
        )
        op.pushed = snapshot  # published by the loop's next poll
