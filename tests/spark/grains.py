"""Grains of the Spark tests."""

from __future__ import annotations

import time
from typing import Any

from orleanspy import Grain, always_interleave
from orleanspy.spark import JobProgress, SparkGrain


def _long(spark: Any, parts: int) -> Any:
    # Billions of rows per task: runs for minutes unless cancelled.
    return spark.range(0, 10**12, 1, parts).selectExpr("sum(id % 7) AS s").collect()


def _sleepy(spark: Any, tasks: int, seconds: float) -> int:
    def nap(rows: Any) -> Any:
        time.sleep(seconds)
        yield sum(1 for _ in rows)

    rdd = spark.sparkContext.parallelize(range(tasks * 10), tasks)
    return int(sum(rdd.mapPartitions(nap).collect()))


class Analytics(SparkGrain):
    async def word_counts(self, words: list[str]) -> list[dict[str, Any]]:
        def job(spark: Any, words: list[str]) -> Any:
            df = spark.createDataFrame([(w,) for w in words], "word string")
            return df.groupBy("word").count().orderBy("word").collect()

        return await self.run_job(job, words)

    async def squares_pandas(self, n: int) -> Any:
        return await self.run_job(
            lambda spark, n: spark.range(n).selectExpr("id", "id * id AS sq").toPandas(), n
        )

    async def squares_arrow(self, n: int) -> Any:
        return await self.run_job(
            lambda spark, n: spark.range(n).selectExpr("id", "id * id AS sq").toArrow(), n
        )

    async def bad_sql(self) -> Any:
        return await self.run_job(lambda spark: spark.sql("SELECT nope FROM nowhere").collect())

    async def user_error(self) -> Any:
        def job(spark: Any) -> Any:
            raise ValueError("the job's own error")

        return await self.run_job(job)

    async def job_properties(self) -> Any:
        def job(spark: Any) -> Any:
            sc = spark.sparkContext
            return {"group": sc.getLocalProperty("spark.jobGroup.id"),
                    "description": sc.getLocalProperty("spark.job.description"),
                    "tags": sorted(sc.getJobTags())}

        return await self.run_job(job)

    async def long_job(self, timeout: float | None = None) -> Any:
        probe = self.silo.probe

        def seen(p: JobProgress) -> None:
            probe.progress.append(p)
            if p.tasks_total > 0:
                probe.groups.append(p.job_group)
                probe.started.set()
            if p.done:
                probe.ended.set()

        try:
            return await self.run_job(_long, 4, timeout=timeout, on_progress=seen,
                                      description="long")
        except Exception as exc:  # what the grain saw, whatever reached its caller
            probe.errors.append(exc)
            probe.failed.set()
            raise

    async def long_with_timeout(self, timeout: float) -> Any:
        """A job that runs for minutes, given ``timeout`` seconds (needs no test probe)."""
        return await self.run_job(_long, 2, timeout=timeout, description="long")

    async def sleepy(self, tasks: int, seconds: float) -> int:
        probe = self.silo.probe
        return await self.run_job(_sleepy, tasks, seconds, on_progress=probe.progress.append,
                                  description="sleepy")

    @always_interleave
    async def stop_now(self) -> None:
        self.deactivate_on_idle()


class PingCounter(Grain):
    def __init__(self) -> None:
        self.n = 0

    async def add(self, k: int) -> int:
        self.n += k
        return self.n
