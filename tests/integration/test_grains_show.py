"""``orleanspy grains show`` against a real silo process that shows grain state: a grain that
is not active says so (exit 1) and a lookup never activates it; an active one shows its silo,
mailbox, method figures, reminder rows and its in-memory state."""

from __future__ import annotations

import json

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
                                     CLUSTER, "--config", str(config))
    common = ("--membership", "sqlite:membership.db", "--data-dir",
              str(silo_launcher.data_dir), "--cluster-id", CLUSTER)
    client = silo.client(cluster_id=CLUSTER)
    await client.connect()
    try:
        code, out, err = await run_cli_to_end("grains", "show", "Counter", "nobody", *common)
        assert code == 1, err
        assert out.startswith("Counter/nobody: not active\n")

        assert await client.get_grain("Counter", "c1").add(5) == 5
        await client.get_grain("Ticker", "t1").start(3600.0)
        code, out, err = await run_cli_to_end("grains", "show", "Counter", "c1", "--json",
                                              *common)
        assert code == 0, err
        page = json.loads(out)
        assert page["active"] is True and page["silo"] == silo.silo_address
        assert page["mailbox"]["queued"] == 0
        assert {m["method"]: m["calls"] for m in page["methods"]}["add"] == 1
        (state,) = page["state"]
        assert state["source"] == "memory" and json.loads(state["json"])["value"] == 5

        code, out, err = await run_cli_to_end("grains", "show", "Ticker", "t1", *common)
        assert code == 0, err
        assert out.startswith(f"Ticker/t1: active on {page['silo']} since ")
        assert "mailbox: 0 queued" in out and "reminders: 1\n  tick: every 3600 s" in out
        assert "state state (memory):" in out

        # the earlier lookups activated nothing
        code, out, _ = await run_cli_to_end("grains", "show", "Counter", "nobody", "--json",
                                            *common)
        assert code == 1 and json.loads(out)["active"] is False
        code, _, err = await run_cli_to_end("grains", "show", "Countr", "x", *common)
        assert code == 2 and "Counter" in err
    finally:
        await client.close()
