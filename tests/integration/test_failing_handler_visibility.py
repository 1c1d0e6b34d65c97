"""A failing stream handler is visible, while it fails, everywhere an operator looks: the silo's log
(``stream_delivery_failing`` at warning), ``/metrics``, the dashboard's JSON and
``orleanspy streams status``; and under the default failure policy its event is not
acknowledged until the handler takes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from .silo_process import SiloLauncher, poll_until, run_cli_to_end

CLUSTER = "fussy"
# The first attempt fails at once; the next is after delivery_backoff (0.1 s) and the
# back-off doubles up to max_delivery_backoff (5 s): every surface shows the failure while
# the handler keeps failing (a bounded poll: how soon depends on the machine, not asserted).


def failures_in_metrics(text: str) -> float:
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "orleanspy_stream_delivery_failures_total")


async def test_a_failing_handler_shows_in_logs_metrics_dashboard_and_cli(
    silo_launcher: SiloLauncher, tmp_path: Path,
) -> None:
    config = tmp_path / "orleanspy.toml"
    config.write_text('[streams.s]\nadapter = "sqlite:streams.db"\ntotal_queues = 1\n')
    silo = await silo_launcher.start(
        "--membership", "sqlite:membership.db", "--cluster-id", CLUSTER, "--config",
        str(config), "--dashboard-port", "0", app="tests.integration.cluster_app")

    async def surfaces() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{silo.dashboard}/metrics") as r:
                metrics = failures_in_metrics(await r.text())
            async with http.get(f"{silo.dashboard}/api/cluster") as r:
                view = await r.json()
                (queue,) = view["streams"]
                subscriptions = view["subscriptions"]
        code, out, err = await run_cli_to_end(
            "streams", "status", "--membership", "sqlite:membership.db", "--data-dir",
            str(silo_launcher.data_dir), "--cluster-id", CLUSTER, "--json")
        assert code == 0, err
        (row,) = json.loads(out)
        logged = [json.loads(line) for line in silo.log_path.read_text().splitlines()
                  if '"stream_delivery_failing"' in line]
        return {"metrics": metrics, "queue": queue, "cli": row, "logged": logged,
                "subscriptions": subscriptions}

    async with silo.client(cluster_id=CLUSTER) as client:
        fussy: Any = client.get_grain("Fussy", "f")
        await fussy.publish("first")
        seen = await poll_until(
            surfaces, lambda s: s["metrics"] > 0 and s["queue"]["failures"] > 0
            and s["cli"]["failures"] > 0 and bool(s["logged"]), timeout=20)
        (warning, *_) = seen["logged"]
        assert warning["level"] == "warning" and warning["stream"] == "fussy/f"
        assert "not ready for events yet" in warning["error"]
        (sub,) = seen["subscriptions"]
        assert (sub["stream"], sub["consumer"]) == ("fussy/f", "Fussy/f")
        assert sub["failing"] >= 1
        assert min(s["failing"] for s in seen["cli"]["subs"]) >= 1  # read apart: no equality
        # Not acknowledged while it fails: the queue keeps the event.
        assert seen["queue"]["acknowledged"] == 0 and seen["cli"]["acknowledged"] == 0
        assert await fussy.received() == []

        await fussy.heal()
        assert await poll_until(fussy.received, lambda r: r == ["first"], timeout=20)
        done = await poll_until(surfaces, lambda s: s["queue"]["acknowledged"] == 1,
                                timeout=20)
        assert done["queue"]["delivered"] == 1
    assert await silo.terminate() == 0
