"""``orleanspy grains show`` against a real silo process that shows grain state: a grain that
is not active says so (exit 1) and a lookup never activates it; an active one shows its silo,
mailbox, method figures, reminder rows and its in-memory state."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from .silo_process import SiloLauncher, run_cli_to_end

pytestmark = pytest.mark.integration

CLUSTER = "grainpage"


async def test_grains_show_reads_a_grain_without_activating_it(
    silo_launcher: SiloLauncher,
) -> None:
    config = silo_launcher.log_dir / "page.toml"
    config.write_text("[silo]\ngrain_page_state = true\n", encoding="utf-8")
    silo = await silo_launcher.start("--membership", "sqlite:membership.db", "--cluster-id",
                                     CLUSTER, "--config", str(config), "--dashboard-port", "0")
    common = ("--membership", "sqlite:membership.db", "--data-dir",
              str(silo_launcher.data_dir), "--cluster-id", CLUSTER)
    client = silo.client(cluster_id=CLUSTER)
    await client.connect()
    try:
        assert await client.get_grain("Counter", "c1").add(5) == 5
        await client.get_grain("Ticker", "t1").start(3600.0)
        # independent commands, run concurrently to keep the test short
        (nobody, counter, ticker) = await asyncio.gather(
            run_cli_to_end("grains", "show", "Counter", "nobody", *common),
            run_cli_to_end("grains", "show", "Counter", "c1", "--json", *common),
            run_cli_to_end("grains", "show", "Ticker", "t1", *common),
        )
        code, out, err = nobody
        assert code == 1, err
        assert out.startswith("Counter/nobody: not active\n")

        code, out, err = counter
        assert code == 0, err
        page = json.loads(out)
        assert page["active"] is True and page["silo"] == silo.silo_address
        assert page["mailbox"]["queued"] == 0
        assert {m["method"]: m["calls"] for m in page["methods"]}["add"] == 1
        (state,) = page["state"]
        assert state["source"] == "memory" and json.loads(state["json"])["value"] == 5

        code, out, err = ticker
        assert code == 0, err
        assert out.startswith(f"Ticker/t1: active on {page['silo']} since ")
        assert "mailbox: 0 queued" in out and "reminders: 1\n  tick: every 3600 s" in out
        assert "state state (memory):" in out

        # the lookups activated nothing: one Counter (c1) and one Ticker (t1)
        async with aiohttp.ClientSession() as http, \
                http.get(f"{silo.dashboard}/api/silo") as response:
            stats = await response.json()
        assert stats["activations_by_type"] == {"Counter": 1, "Ticker": 1}, stats
    finally:
        await client.close()
