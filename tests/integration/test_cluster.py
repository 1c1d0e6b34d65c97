"""A cluster of three real silo processes on loopback with SQLite membership in tmp_path.

Each silo is ``orleanspy silo start --app tests.integration.cluster_app --membership
sqlite:membership.db`` with fast failure detection; calls go through each silo's gateway.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient, RemoteGrainError
from orleanspy.cluster.membership import SiloStatus, SqliteMembershipTable

from .silo_process import SiloLauncher, SiloProcess, poll_until, run_cli_to_end

pytestmark = pytest.mark.integration

APP = "tests.integration.cluster_app"
CLUSTER = "itest"
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5",
        "--table-refresh-period", "0.5")
DETECTION_BOUND = 5.0


async def start_cluster(launcher: SiloLauncher, n: int = 3, app: str = APP,
                        extra: tuple[str, ...] = ()) -> list[SiloProcess]:
    silos = [
        await launcher.start("--membership", "sqlite:membership.db", "--cluster-id", CLUSTER,
                             "--storage", "memory", "--reminders", "memory", *FAST, *extra,
                             app=app)
        for _ in range(n)
    ]
    table = membership_table(launcher.data_dir)
    try:
        await poll_until(table.read_all, lambda d: sum(
            e.status is SiloStatus.ACTIVE for e in d.entries()) == n, timeout=15)
    finally:
        await table.close()
    # every silo routes by the same view before the test starts
    await poll_until(lambda: cluster_status(launcher.data_dir),
                     lambda rows: all(r["reachable"] for r in rows) and len(rows) == n,
                     timeout=15)
    return silos


def membership_table(data_dir: Path) -> SqliteMembershipTable:
    return SqliteMembershipTable(str(data_dir / "membership.db"), cluster_id=CLUSTER)


async def cluster_status(data_dir: Path) -> list[dict[str, Any]]:
    import json

    code, out, err = await run_cli_to_end(
        "cluster", "status", "--membership", "sqlite:membership.db", "--data-dir",
        str(data_dir), "--cluster-id", CLUSTER, "--json",
    )
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


async def clients(silos: list[SiloProcess]) -> list[ClusterClient]:
    result = [s.client(cluster_id=CLUSTER) for s in silos]
    for c in result:
        await c.connect()
    return result


async def close_all(cs: list[ClusterClient]) -> None:
    for c in cs:
        await c.close()


async def test_cluster_calls_and_exceptions_cross_silos(silo_launcher: SiloLauncher):
    silos = await start_cluster(silo_launcher)
    a, b, c = await clients(silos)
    try:
        # prefer-local placement: the first call through b's gateway activates it on b
        on_b = await b.get_grain("Spot", "x").info()
        assert on_b["pid"] == silos[1].pid

        through_a = await a.get_grain("Spot", "x").info()
        assert through_a["pid"] == silos[1].pid
        assert through_a["activation"] == on_b["activation"]
        assert await c.get_grain("Spot", "x").hit() == 1
        assert await a.get_grain("Spot", "x").hit() == 2

        relayed = await a.get_grain("Relay", "r").info_of("x")  # grain on a -> grain on b
        assert relayed["relay_pid"] == silos[0].pid and relayed["pid"] == silos[1].pid

        with pytest.raises(ValueError, match="bad"):
            await a.get_grain("Spot", "x").bad_value("bad")
        with pytest.raises(Exception) as info:
            await c.get_grain("Spot", "x").explode("kaboom")
        exc = info.value
        name = exc.type_name if isinstance(exc, RemoteGrainError) else type(exc).__name__
        assert name.endswith("Boom") and "kaboom" in str(exc)
        assert await a.get_grain("Relay", "r").explode_via("x") == "caught Boom: inner"
    finally:
        await close_all([a, b, c])


@pytest.mark.parametrize("grain_type", ["Spot", "SpreadSpot"])
async def test_cluster_burst_of_first_calls_from_every_silo_leaves_one_activation_each(
    silo_launcher: SiloLauncher, grain_type: str
):
    silos = await start_cluster(silo_launcher)
    cs = await clients(silos)
    keys = [f"burst-{i}" for i in range(60)]
    try:
        results = await asyncio.gather(*(
            client.get_grain(grain_type, key).hit() for key in keys for client in cs
        ))
        assert sorted(results) == sorted([1, 2, 3] * len(keys))  # one counter per grain

        for key in keys:
            infos = [await client.get_grain(grain_type, key).info() for client in cs]
            assert len({i["activation"] for i in infos}) == 1, infos
            assert infos[0]["hits"] == 3
        rows = await cluster_status(silo_launcher.data_dir)
        assert sum(r["activations"] for r in rows) == len(keys)
    finally:
        await close_all(cs)


async def test_cluster_kill_9_is_detected_within_5_s_and_its_grains_reactivate_elsewhere(
    silo_launcher: SiloLauncher,
):
    silos = await start_cluster(silo_launcher)
    a, b, c = await clients(silos)
    keys = [f"victim-{i}" for i in range(20)]
    try:
        for key in keys:
            await b.get_grain("Spot", key).hit()
            await a.get_grain("Spot", key).hit()  # a learns where they live
        victim = silos[1]
        before = [await a.get_grain("Spot", k).info() for k in keys]
        assert all(i["pid"] == victim.pid for i in before)

        killed_at = time.monotonic()
        await victim.kill()
        table = membership_table(silo_launcher.data_dir)
        try:
            await poll_until(
                table.read_all,
                lambda d: any(str(e.silo) == victim.silo_address
                              and e.status is SiloStatus.DEAD for e in d.entries()),
                timeout=DETECTION_BOUND + 5, interval=0.05,
            )
        finally:
            await table.close()
        detected = time.monotonic() - killed_at
        assert detected < DETECTION_BOUND, f"declared dead after {detected:.1f} s"

        async def all_answer() -> list[dict[str, Any]]:
            return [await a.get_grain("Spot", k).info() for k in keys]

        infos = await poll_until(all_answer, lambda _: True, timeout=10)
        assert all(i["pid"] in (silos[0].pid, silos[2].pid) for i in infos), infos
        assert all(i["hits"] == 0 for i in infos)  # fresh activations
        for key in keys:
            assert await c.get_grain("Spot", key).hit() == 1
            assert (await c.get_grain("Spot", key).info())["activation"] == (
                await a.get_grain("Spot", key).info())["activation"]
    finally:
        await close_all([a, b, c])


async def test_cluster_status_lists_every_silo_with_activations(silo_launcher: SiloLauncher):
    silos = await start_cluster(silo_launcher, 2)
    a, b = await clients(silos)
    try:
        await a.get_grain("Spot", "s1").hit()
        await b.get_grain("Spot", "s2").hit()
        code, out, err = await run_cli_to_end(
            "cluster", "status", "--membership", "sqlite:membership.db", "--data-dir",
            str(silo_launcher.data_dir), "--cluster-id", CLUSTER,
        )
        assert code == 0, err
        assert "2 active" in out
        for silo in silos:
            line = next(x for x in out.splitlines() if x.startswith(silo.silo_address))
            assert " active " in line and silo.gateway in line and " 1 " in line
        # grains locate: the silo the grain says it runs on, from the directory
        where = (await a.get_grain("Spot", "s1").info())["silo"]
        common = ("--membership", "sqlite:membership.db", "--data-dir",
                  str(silo_launcher.data_dir), "--cluster-id", CLUSTER)
        code, out, err = await run_cli_to_end("grains", "locate", "Spot", "s1", *common)
        assert code == 0, err
        assert out.startswith("Spot/s1: active on ") and where in out
        code, out, _ = await run_cli_to_end("grains", "locate", "Spot", "never", *common)
        assert (code, out) == (1, "Spot/never: not active\n")
        code, _, err = await run_cli_to_end("grains", "locate", "Spott", "s1", *common)
        assert code == 2 and "did you mean 'Spot'?" in err
        # grains top: both silos' calls added up (two hits, each on its own silo's client)
        for _ in range(3):
            await b.get_grain("Spot", "s2").hit()
        code, out, err = await run_cli_to_end("grains", "top", "--interval", "0", "--json",
                                              *common)
        assert code == 0, err
        hit = next(r for r in json.loads(out) if (r["type"], r["method"]) == ("Spot", "hit"))
        assert hit["calls"] == 5 and hit["errors"] == 0 and hit["p50_seconds"] is not None
        code, out, err = await run_cli_to_end("grains", "top", "--interval", "0", *common)
        assert code == 0 and out.splitlines()[0].split()[:3] == ["TYPE", "METHOD", "CALLS"]
        assert any(line.split()[:3] == ["Spot", "hit", "5"] for line in out.splitlines())
    finally:
        await close_all([a, b])
    await silos[0].terminate()
    rows = await cluster_status(silo_launcher.data_dir)
    gone = next(r for r in rows if r["silo"] == silos[0].silo_address)
    assert gone["status"] == "stopped" and gone["activations"] is None  # SIGTERM: graceful
    assert gone["why"].startswith("stopped gracefully at ")
