"""The clickstream example end to end on the shared SparkSession."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.clickstream.run import run_pipeline
from orleanspy.spark import SparkSessionManager

pytestmark = pytest.mark.spark


async def test_clickstream_spark_totals_equal_the_real_time_counters(
    tmp_path: Path, spark_manager: SparkSessionManager,
) -> None:
    report = await run_pipeline(tmp_path, queues=2, visitors_per_queue=5,
                                views_per_visitor=40, spark=spark_manager, timeout=60)

    assert report["expected"] == report["views"] == 400
    assert report["page_totals"] == report["counters"]  # the views stream, through the source
    assert report["lake_page_totals"] == report["counters"]  # the Parquet lake
    assert report["progress"] == {"counted": 400, "landed": 400}
    assert report["unique_visitors"] == 10
    assert report["sessions"] == sum(r["sessions"] for r in report["sessions_per_hour"])
    assert 10 <= report["sessions"] < 400
    tops = [r["views"] for r in report["top_pages"]]
    assert tops == sorted(tops, reverse=True) and len(tops) == 5
    assert len(report["dates"]) >= 2  # partitioned by the views' dates
