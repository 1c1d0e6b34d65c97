"""A silo process's operations endpoints (``--dashboard-port``): liveness, readiness,
Prometheus metrics consistent with the load (parsed by prometheus-client's own parser), the
JSON figures, 4xx for what is not a valid request, and the secret guarding the figures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orleanspy import ConfigurationError, Silo, SiloOptions
from silo.dashboard import OpsServer

from .silo_process import SiloLauncher

GRAINS = 7


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items()
                                      if k not in ("silo", "cluster"))))] = s.value
    return out


async def raw_request(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(10):
            return await reader.read(4096)
    finally:
        writer.close()


async def test_endpoints_report_the_load_and_refuse_what_is_not_a_request(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--dashboard-port", "0")
    base = silo.dashboard
    assert base.startswith("http://127.0.0.1:")
    async with silo.client() as client:
        for k in range(GRAINS):
            counter: Any = client.get_grain("Counter", f"c{k}")
            await counter.add(1)
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/healthz") as r:
            assert r.status == 200 and (await r.text()).strip() == "ok"
        async with http.get(f"{base}/readyz") as r:
            assert r.status == 200 and (await r.json()) == {"ready": True}
        async with http.get(f"{base}/metrics") as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            got = samples(await r.text())
        async with http.get(f"{base}/api/silo") as r:
            figures = json.loads(await r.text())
        async with http.post(f"{base}/metrics", data=b"x") as r:
            assert r.status == 405
        async with http.get(f"{base}/nothing-here") as r:
            assert r.status == 404

    assert got[("orleanspy_activations", (("type", "Counter"),))] == GRAINS
    add = (("method", "add"), ("type", "Counter"))
    assert got[("orleanspy_grain_calls_total", add)] == GRAINS
    assert got[("orleanspy_grain_call_errors_total", add)] == 0
    assert got[("orleanspy_grain_call_seconds_count", add)] == GRAINS
    assert got[("orleanspy_grain_call_seconds_bucket", (("le", "+Inf"), *add))] == GRAINS
    assert got[("orleanspy_silo_up", ())] == 1
    assert got[("orleanspy_gateway_connections", ())] >= 0
    assert got[("process_resident_memory_bytes", ())] > 10 * 2**20
    assert ("orleanspy_event_loop_lag_seconds", ()) in got
    assert figures["activations_by_type"]["Counter"] == GRAINS
    assert figures["status"] == "active"

    # Not HTTP at all, and a request line too long: a 400 each, and the server goes on.
    status = (await raw_request(base, b"\x00\xff garbage\r\n\r\n")).split(b"\r\n")[0]
    assert status.startswith(b"HTTP/1.") and b" 400 " in status
    too_long = b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    status = (await raw_request(base, too_long)).split(b"\r\n")[0]
    assert status.startswith(b"HTTP/1.") and b" 4" in status
    async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as r:
        assert r.status == 200
    assert await silo.terminate() == 0


async def test_with_a_secret_the_figures_need_it_and_the_probes_do_not(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--dashboard-port", "0", secret="s3cret-s3cret-s3cret")
    base = silo.dashboard
    async with aiohttp.ClientSession() as http:
        for path in ("/metrics", "/api/silo", "/api/cluster"):
            async with http.get(f"{base}{path}") as r:
                assert r.status == 401
                assert r.headers["WWW-Authenticate"] == "Bearer"
            async with http.get(f"{base}{path}",
                                headers={"Authorization": "Bearer wrong"}) as r:
                assert r.status == 401
            async with http.get(f"{base}{path}",
                                headers={"Authorization": "Bearer s3cret-s3cret-s3cret"}) as r:
                assert r.status == 200
        async with http.get(f"{base}/healthz") as r:
            assert r.status == 200
        async with http.get(f"{base}/readyz") as r:
            assert r.status == 200
        async with http.get(f"{base}/") as r:  # the page holds no figures: its script asks
            assert r.status == 200 and "default-src 'none'" in r.headers["Content-Security-Policy"]
    assert await silo.terminate() == 0


def test_serving_beyond_loopback_without_a_secret_is_refused() -> None:
    silo = Silo(SiloOptions(gateway_port=None))
    with pytest.raises(ConfigurationError, match="needs the silo's secret"):
        OpsServer(silo, host="0.0.0.0", port=0)


async def test_the_stream_prober_reports_in_metrics(
    silo_launcher: SiloLauncher, tmp_path: Any,
) -> None:
    from .silo_process import poll_until

    config = tmp_path / "orleanspy.toml"
    config.write_text('[streams.s]\nadapter = "memory"\npull_period = 0.02\n')
    silo = await silo_launcher.start(
        "--config", str(config), "--dashboard-port", "0", "--stream-prober", "s",
        "--stream-prober-period", "0.1")

    async def scrape() -> dict[Any, float]:
        async with aiohttp.ClientSession() as http, http.get(f"{silo.dashboard}/metrics") as r:
            return samples(await r.text())

    got = await poll_until(
        scrape, lambda g: g.get(("orleanspy_probe_delivery_seconds_count",
                                 (("provider", "s"),)), 0) >= 3, timeout=20)
    assert got[("orleanspy_probe_failures_total", (("provider", "s"),))] == 0
    assert got[("orleanspy_probe_subscribe_seconds_count", (("provider", "s"),))] >= 3
    # The probe's events are the provider's own: its latency figures count them too.
    assert got[("orleanspy_stream_publish_seconds_count", (("provider", "s"),))] >= 3
    assert got[("orleanspy_stream_delivery_latency_seconds_count", (("provider", "s"),))] >= 3
    async with aiohttp.ClientSession() as http, \
            http.get(f"{silo.dashboard}/api/cluster") as r:
        (probe,) = (await r.json())["probes"]
    assert probe["provider"] == "s" and probe["probes"] >= 3 and probe["failures"] == 0
    assert probe["last_delivery_seconds"] is not None
    assert await silo.terminate() == 0


async def test_probes_reach_a_queue_that_another_silo_owns(
    silo_launcher: SiloLauncher, tmp_path: Any,
) -> None:
    """The only queue is the first silo's (the sticky balancer keeps it there); the second
    silo probes: its probe stream is served by the first silo's agent, which delivers to
    the probe grain like to any consumer, though the first silo runs no prober."""
    from .silo_process import poll_until

    config = tmp_path / "orleanspy.toml"
    config.write_text('[streams.s]\nadapter = "sqlite:streams.db"\ntotal_queues = 1\n'
                      'pull_period = 0.02\n')
    common = ("--membership", "sqlite:membership.db", "--cluster-id", "probes",
              "--config", str(config))
    first = await silo_launcher.start(*common, "--dashboard-port", "0")

    async def view() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, \
                http.get(f"{first.dashboard}/api/cluster") as r:
            found: dict[str, Any] = await r.json()
            return found

    await poll_until(view, lambda v: [q["silo"] for q in v["streams"]]
                     == [first.silo_address], timeout=20)
    second = await silo_launcher.start(*common, "--stream-prober", "s",
                                       "--stream-prober-period", "0.2")
    got = await poll_until(
        view, lambda v: len(v["probes"]) == 1 and v["probes"][0]["probes"] >= 3, timeout=30)
    (probe,) = got["probes"]
    assert probe["silo"] == second.silo_address and probe["failures"] == 0, probe
    assert [q["silo"] for q in got["streams"]] == [first.silo_address]
