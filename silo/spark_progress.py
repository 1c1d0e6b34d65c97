"""The progress bar of ``orleanspy spark run``: call a Spark grain's method and draw its job's
progress.

The method is called through a gateway like ``orleanspy call``; while it runs, the command
polls the grain's ``spark_progress()`` (an always-interleaved ``SparkGrain`` method) every
``--interval`` seconds and draws a bar on stderr: rich's live progress bar on a terminal,
otherwise (logs and pipes) one plain line per change of the bar, and one every
``QUIET_LINE`` seconds while it stands still (a long task). Spark's stage names that are its
own call sites (``$anonfun$...``) are left out: the job's description names the work. The
result is printed as JSON on stdout. Ctrl-C asks the grain to cancel its Spark jobs
(``cancel_spark``) before exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any, Final, TextIO

from orleanspy import ClusterClient
from orleanspy._util.clock import Clock, SystemClock

__all__ = ["ProgressBar", "run_spark_job"]

_WIDTH: Final = 30
QUIET_LINE: Final = 5.0  # seconds between plain lines while the bar stands still
_CANCEL_TIMEOUT: Final = 5.0  # seconds the grain gets to answer cancel_spark on Ctrl-C


class ProgressBar:
    """Renders ``spark_progress()`` snapshots: ``[#####.....]  45%  12/27 tasks  3.2s
    PageStats/daily.top  stage`` (the job's description, then Spark's current stage) as text
    lines, or as a rich progress bar on a terminal."""

    def __init__(
        self, stream: TextIO, *, tty: bool | None = None, clock: Clock | None = None
    ) -> None:
        self.stream = stream
        self.tty = _isatty(stream) if tty is None else tty
        self.clock = clock if clock is not None else SystemClock()
        self.started = self.clock.monotonic()
        self.last = ""
        self.written = self.started  # when the last plain line was written
        self.fraction = 0.0
        self.lines = 0
        self.tasks = (0, 0)  # the last (done, total) seen
        self.label = ""  # the job's description (e.g. PageStats/daily.top)
        self._live: Any = None
        self._task: Any = None
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._live = Progress(
                TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                TextColumn("{task.fields[tasks]}"), TimeElapsedColumn(),
                TextColumn("{task.fields[stage]}"),
                console=Console(file=stream, highlight=False, markup=False), transient=False)
            self._task = self._live.add_task("spark", total=1.0, tasks="0/0 tasks", stage="")
            self._live.start()

    def render(self, jobs: list[dict[str, Any]], *, finished: bool = False) -> str:
        done = sum(int(j.get("tasks_done", 0)) for j in jobs)
        total = sum(int(j.get("tasks_total", 0)) for j in jobs)
        if jobs:
            self.tasks = (done, total)
        else:  # between jobs, or after the last one: keep the last counts
            done, total = self.tasks
            if finished and self.fraction >= 1.0:
                done = total
        if jobs:
            frac = sum(float(j.get("fraction", 0.0)) for j in jobs) / len(jobs)
            self.fraction = max(self.fraction, frac)
        filled = int(self.fraction * _WIDTH)
        stage = _stage(jobs)
        label = next((j.get("description") for j in jobs if j.get("description")), None)
        if label:
            self.label = str(label)[:60]
        text = (f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {self.fraction * 100:5.1f}%  "
                f"{done}/{total} tasks  {self.clock.monotonic() - self.started:6.1f}s")
        if self.label:
            text += f"  {self.label}"
        return text + (f"  {stage[:40]}" if stage else "")

    def update(self, jobs: list[dict[str, Any]]) -> None:
        text = self.render(jobs)
        if self._live is not None:
            stage = _stage(jobs)
            self._live.update(self._task, completed=self.fraction,
                              description=self.label or "spark",
                              tasks=f"{self.tasks[0]}/{self.tasks[1]} tasks",
                              stage=str(stage)[:40] if stage else "")
        elif (text.split("  ")[0] != self.last.split("  ")[0]
              or self.clock.monotonic() - self.written >= QUIET_LINE):
            self.stream.write(text + "\n")
            self.lines += 1
            self.written = self.clock.monotonic()
        self.last = text
        self.stream.flush()

    def finish(self, ok: bool) -> None:
        if ok:
            self.fraction = 1.0
        text = self.render([], finished=True) + ("  done" if ok else "  failed")
        if self._live is not None:
            done, total = self.tasks
            self._live.update(self._task, completed=self.fraction,
                              description="done" if ok else "failed",
                              tasks=f"{total if ok else done}/{total} tasks", stage="")
            self._live.stop()
            self._live = None
            return
        self.stream.write(text + "\n")
        self.stream.flush()


def _stage(jobs: list[dict[str, Any]]) -> str | None:
    """The first stage name of ``jobs`` that says something: Spark names a stage by its call
    site, which for the SQL engine's own threads is ``$anonfun$...`` (no help to a reader)."""
    return next((str(j["stage"]) for j in jobs
                 if j.get("stage") and not str(j["stage"]).startswith("$anonfun$")), None)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


async def run_spark_job(
    client: ClusterClient,
    grain_type: str,
    key: Any,
    method: str,
    args: list[Any],
    *,
    interval: float = 0.5,
    stream: TextIO | None = None,
) -> Any:
    """Call ``method`` on a Spark grain through ``client`` while drawing its progress.

    Returns the method's result; re-raises its error. Cancelling this coroutine asks the
    grain to cancel its Spark jobs.
    """
    clock = client.clock
    bar = ProgressBar(stream or sys.stderr, clock=clock)
    ref: Any = client.get_grain(grain_type, key)
    call = asyncio.ensure_future(ref.invoke(method, *args))
    ok = False
    try:
        while not call.done():
            with contextlib.suppress(TimeoutError):
                async with clock.timeout(interval):
                    await asyncio.wait([call])
            if call.done():
                break
            try:
                jobs = await ref.invoke("spark_progress")
            except Exception:  # progress is best effort; the call's outcome decides
                jobs = []
            if not call.done():
                bar.update(list(jobs))
        result = call.result()
        ok = True
        return result
    except asyncio.CancelledError:
        if not call.done():
            with contextlib.suppress(Exception):
                async with clock.timeout(_CANCEL_TIMEOUT):
                    await ref.invoke("cancel_spark")
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
        raise
    finally:
        bar.finish(ok)
