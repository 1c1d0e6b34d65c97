"""What one job or grain leaves behind must not reach another: a failed scope entry is
cleared from the pool thread, a broken progress callback does not orphan its job, and two
grains never share a job tag."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orleanspy.spark import JobProgress, SparkOptions, SparkSessionManager
from orleanspy.spark import session as session_module

from .conftest import WAIT
from .fakes import FakeBackend, FakeSession
from .grains import Analytics, _sleepy


class _EnterFails(FakeBackend):
    exited: list[str] = []

    def enter(self, op: Any) -> None:
        raise RuntimeError("py4j hiccup after setJobGroup")

    def exit(self, op: Any) -> None:
        self.exited.append(op.id)


async def test_scope_is_cleared_when_entering_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # enter() sets the job group, then tags, pool...: if a later step fails, what it set
    # already must not stay on the pool thread for the next call.
    monkeypatch.setattr(session_module, "create_session", lambda options: (FakeSession(), True))
    monkeypatch.setattr(session_module, "ClassicBackend", _EnterFails)
    manager = SparkSessionManager(SparkOptions(master="local[1]"))
    try:
        job = manager.submit(lambda spark: 1, tag="edge-enter")
        with pytest.raises(RuntimeError, match="hiccup"):
            await job
        assert _EnterFails.exited == [job.job_group]
    finally:
        await manager.stop()


@pytest.mark.spark
async def test_a_failing_progress_callback_does_not_orphan_the_spark_job(
    spark_manager: SparkSessionManager,
) -> None:
    # Progress is an observer: a callback that raises must neither end the driving task
    # (leaving the Spark job running untracked and never cancelled) nor fail the job; the
    # error is logged, the job completes and reports its result.
    calls = 0

    def broken(progress: JobProgress) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a broken progress display")

    result = await asyncio.wait_for(
        spark_manager.run(_sleepy, 2, 0.6, tag="edge-callback", on_progress=broken), WAIT)

    assert result == 20
    assert calls >= 2  # running and the final snapshot
    assert spark_manager.jobs("edge-callback") == []


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
