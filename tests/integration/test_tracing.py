"""OpenTelemetry traces across real processes: a client (its own process, with the SDK's
tracer provider) calls Front on its gateway silo, which calls Back on the other silo, which
publishes to a stream whose implicit consumer handles the event. Every process writes its
spans to a file; together they make one trace, each span the child of the one before."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from .silo_process import REPO_ROOT, SiloLauncher, child_env, poll_until
from .test_cluster import CLUSTER, start_cluster

pytest.importorskip("opentelemetry.sdk.trace", reason="the tracing test needs opentelemetry-sdk")

pytestmark = pytest.mark.integration

APP = "tests.integration.traced_app"

CLIENT = """
import asyncio, sys
from orleanspy import ClusterClient
import tests.integration.traced_app  # sets the tracer provider first

async def main(gateway, cluster, front, back):
    async with ClusterClient(gateways=[gateway], cluster_id=cluster) as client:
        print(await client.get_grain("Front", front).order("tea", back), flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


def spans_in(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in sorted(folder.glob("spans-*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines()]


async def test_one_trace_from_a_client_to_a_stream_consumer(
        silo_launcher: SiloLauncher, tmp_path: Path) -> None:
    data = silo_launcher.data_dir
    data.mkdir(parents=True, exist_ok=True)
    config = data / "streams.toml"
    config.write_text('[streams.s]\nadapter = "sqlite:streams.db"\npull_period = 0.02\n',
                      encoding="utf-8")
    first, second = await start_cluster(silo_launcher, n=2, app=APP,
                                        extra=("--config", str(config)))
    here, there = (s.silo_address.partition("@")[0] for s in (first, second))
    client = first.client(cluster_id=CLUSTER)
    await client.connect()
    try:
        async def key_on(type_name: str, silo: str) -> str:
            for i in range(64):
                if await client.get_grain(type_name, f"k{i}").where() == silo:
                    return f"k{i}"
            raise AssertionError(f"no {type_name} key on {silo}")

        front, back = await key_on("Front", here), await key_on("Back", there)
        env = {**child_env(), "ORLEANSPY_TEST_SPANS": str(tmp_path)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLIENT, first.gateway, CLUSTER, front, back,
            cwd=REPO_ROOT, env=env, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-2000:]
        assert out.decode().strip() == there
        await poll_until(client.get_grain("Shipper", "tea").seen, lambda s: "tea" in s,
                         timeout=15, interval=0.05)
    finally:
        await client.close()

    async def consumer_span() -> list[dict[str, Any]]:
        return [s for s in spans_in(data) if s["kind"] == "consumer"]

    # (the consumer's span ends as its handler returns)
    await poll_until(consumer_span, bool, timeout=10, interval=0.05)
    spans = spans_in(tmp_path) + spans_in(data)
    (client_span,) = [s for s in spans_in(tmp_path) if s["name"] == "Front.order"]
    trace = [s for s in spans if s["trace"] == client_span["trace"]]
    by_id = {s["span"]: s for s in trace}

    def chain(span: dict[str, Any]) -> list[tuple[str, str]]:
        out = []
        while span is not None:
            out.append((span["kind"], span["name"]))
            span = by_id.get(span["parent"])
        return out[::-1]

    (consumer,) = [s for s in trace if s["kind"] == "consumer"]
    assert chain(consumer) == [
        ("client", "Front.order"), ("server", "Front.order"), ("client", "Back.ship"),
        ("server", "Back.ship"), ("consumer", "stream event")]
    pids = [by_id[s]["pid"] for s in by_id]
    assert len(set(pids)) >= 3  # the client and both silos
