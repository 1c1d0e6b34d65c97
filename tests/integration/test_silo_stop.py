"""``orleanspy silo stop``: finds the silos of a data dir by their run records, stops the one
named (by gateway, address or pid) or all of them, gracefully, and waits for their exit; a
record left by a silo killed with -9 is recognised as stale and removed."""

from __future__ import annotations

import json

from .silo_process import SiloLauncher, run_cli_to_end


async def test_stop_names_the_silo_stops_it_gracefully_and_waits(
    silo_launcher: SiloLauncher,
) -> None:
    first = await silo_launcher.start()
    second = await silo_launcher.start()
    data = ("--data-dir", str(silo_launcher.data_dir))

    code, _, err = await run_cli_to_end("silo", "stop", *data)
    assert code == 2 and "2 silos run from this data dir" in err
    assert str(first.pid) in err and str(second.pid) in err
    code, _, err = await run_cli_to_end("silo", "stop", "127.0.0.1:1", *data)
    assert code == 2 and "no silo '127.0.0.1:1'" in err

    code, out, err = await run_cli_to_end("silo", "stop", first.gateway, *data, "--json",
                                          timeout=60)
    assert code == 0, err
    (outcome,) = json.loads(out)
    assert outcome["pid"] == first.pid and outcome["stopped"] is True
    assert await first.wait_exit() == 0  # a graceful stop: exit code 0
    assert second.alive

    code, out, err = await run_cli_to_end("silo", "stop", "--all", *data, timeout=60)
    assert code == 0, err
    assert out.startswith("stopped ") and f"(pid {second.pid})" in out
    assert await second.wait_exit() == 0
    assert not list((silo_launcher.data_dir / "run").glob("*.json"))  # records removed


async def test_a_record_left_by_a_killed_silo_is_stale(silo_launcher: SiloLauncher) -> None:
    silo = await silo_launcher.start()
    (record,) = (silo_launcher.data_dir / "run").glob("*.json")
    assert json.loads(record.read_text())["pid"] == silo.pid
    await silo.kill()
    assert record.exists()  # kill -9: the process could not remove it
    code, _, err = await run_cli_to_end("silo", "stop", "--data-dir",
                                        str(silo_launcher.data_dir))
    assert code == 2 and "no silo started by `orleanspy silo start` runs" in err
    assert not record.exists()
