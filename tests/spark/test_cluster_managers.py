"""Spark beyond local mode: a standalone cluster (master + worker processes) and a Spark
Connect server, each started from the installed pyspark package. On each, a silo process
started from the CLI runs the Spark grain's jobs (results, conversions, errors, a timeout
that cancels the job on the cluster, progress through ``orleanspy spark run``), and the
clickstream example's Spark totals equal its real-time counters."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orleanspy.spark import SparkJobError, SparkJobTimeoutError
from tests.integration.silo_process import SiloLauncher, child_env, run_cli_to_end

from .clusters import ConnectServer, StandaloneCluster
from .conftest import have_java
from .grains import Analytics

pytestmark = [pytest.mark.spark, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
JOB_WAIT = 120.0  # a first job on a fresh cluster driver, on 2 busy cores


@pytest.fixture(scope="module", params=["standalone", "connect"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[StandaloneCluster | ConnectServer]:
    pytest.importorskip("pyspark")
    if not have_java():
        pytest.skip("no Java: install a JDK 17 to run the Spark tests")
    if request.param == "connect":  # the test run's one Connect server
        yield request.getfixturevalue("spark_connect_server")
        return
    manager = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield manager.start()
    finally:
        manager.stop()


def _conf_args(cluster: StandaloneCluster | ConnectServer) -> list[str]:
    args: list[str] = []
    for key, value in cluster.conf().items():
        args += ["--spark-conf", f"{key}={value}"]
    return args


async def test_spark_grains_run_on_the_cluster(
    cluster: StandaloneCluster | ConnectServer, silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start(
        "--app", "tests.spark.grains", "--spark-master", cluster.url, *_conf_args(cluster),
    )
    async with silo.client(response_timeout=JOB_WAIT) as client:
        ref: Any = client.get_grain(Analytics, "cluster")
        async with asyncio.timeout(JOB_WAIT):
            counts = await ref.word_counts(["b", "a", "b"])
        assert counts == [{"word": "a", "count": 1}, {"word": "b", "count": 2}]
        assert await ref.squares_pandas(4) == [{"id": i, "sq": i * i} for i in range(4)]
        assert await ref.squares_arrow(3) == [{"id": i, "sq": i * i} for i in range(3)]
        with pytest.raises(SparkJobError) as info:
            await ref.bad_sql()
        assert info.value.error_class == "TABLE_OR_VIEW_NOT_FOUND"
        with pytest.raises(ValueError, match="the job's own error"):
            await ref.user_error()

        # A job that would run for minutes: its timeout cancels it on the cluster, and the
        # cluster's only executor core is free again for the next job.
        t0 = time.monotonic()
        with pytest.raises(SparkJobTimeoutError):
            async with asyncio.timeout(JOB_WAIT):
                await ref.long_with_timeout(3.0)
        assert time.monotonic() - t0 < 3.0 + 15.0
        async with asyncio.timeout(JOB_WAIT):
            assert await ref.word_counts(["z"]) == [{"word": "z", "count": 1}]

    code, out, err = await run_cli_to_end(
        "spark", "run", "--gateway", silo.gateway, "--interval", "0.2",
        "Analytics", "cli", "word_counts", '["a", "b", "a"]', timeout=JOB_WAIT,
    )
    assert code == 0, err
    assert json.loads(out) == [{"word": "a", "count": 2}, {"word": "b", "count": 1}]
    assert "done" in err
    assert await silo.terminate(timeout=60) == 0
    log = silo.log_text()
    assert f"master={cluster.url}" in log or cluster.url in log


async def test_clickstream_totals_match_on_the_cluster(
    cluster: StandaloneCluster | ConnectServer, tmp_path: Path,
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.clickstream.run", "--master", cluster.url,
        *_conf_args(cluster), "--visitors-per-queue", "5", "--views-per-visitor", "40",
        "--data-dir", str(tmp_path), cwd=REPO, env=child_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(2 * JOB_WAIT):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = out.decode()
    assert proc.returncode == 0, text + err.decode()[-3000:]
    assert "800 page views" in text and ": 800 views" in text, text
    assert "MISMATCH" not in text
    assert "Spark's per-page totals equal the real-time counters exactly" in text
