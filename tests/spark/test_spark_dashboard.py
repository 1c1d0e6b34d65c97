"""The dashboard's Spark panel: a job running on the silo's session shows with its progress
in ``/api/cluster``, and once finished among the recent jobs, complete."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from orleanspy.testing import TestCluster
from silo.dashboard import install_ops_server
from tests.spark.conftest import WAIT
from tests.spark.grains import Analytics


async def test_running_and_finished_jobs_show_in_the_cluster_view(
    spark_cluster: TestCluster,
) -> None:
    server = install_ops_server(spark_cluster.silo, port=0)
    await server.start()  # the cluster started already: serve now
    try:
        async def spark_view() -> dict[str, Any]:
            async with aiohttp.ClientSession() as http, \
                    http.get(f"http://{server.address}/api/cluster") as r:
                (spark,) = (await r.json())["spark"]
                return spark  # type: ignore[no-any-return]

        call = asyncio.ensure_future(spark_cluster.get_grain(Analytics, "dash").sleepy(8, 0.4))
        async with asyncio.timeout(WAIT):
            running = await spark_view()
            while not running["running"]:  # the manager has no event for "a job started"
                await asyncio.sleep(0.1)
                running = await spark_view()
        assert await asyncio.wait_for(call, WAIT) == 80
        done = await spark_view()
        async with aiohttp.ClientSession() as http, \
                http.get(f"http://{server.address}/metrics") as r:
            metrics = await r.text()
    finally:
        await server.stop()
    (job,) = running["running"]
    assert running["state"] == "running" and running["master"] == "local[2]"
    assert job["state"] in ("queued", "running") and 0.0 <= job["fraction"] < 1.0
    assert done["jobs_running"] == 0 and done["jobs_succeeded"] >= 1
    last = done["recent"][0]
    assert last["job_group"] == job["job_group"]
    assert last["state"] == "succeeded" and last["fraction"] == 1.0
    finished = {s.labels["outcome"]: s.value for f in text_string_to_metric_families(metrics)
                for s in f.samples if s.name == "orleanspy_spark_jobs_finished_total"}
    assert finished["succeeded"] == done["jobs_succeeded"]
