"""A ClusterClient with the gateways of three real silo processes: spreading and failover.

The silos are those of test_cluster.py (SQLite membership, fast failure detection), also
hosting ``failover_app.Sleeper``. Grains are placed prefer-local, so a grain's first call
activates it on the silo of the gateway that carried the call: the process id a grain reports
shows which gateway the client chose.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from orleanspy import ClusterClient, SiloUnavailableError
from orleanspy.cluster.membership import SiloStatus
from orleanspy.options import ClientOptions

from .silo_process import SiloLauncher, SiloProcess, poll_until
from .test_cluster import APP, CLUSTER, DETECTION_BOUND, FAST, cluster_status, membership_table

pytestmark = pytest.mark.integration

FAILOVER_APP = "tests.integration.failover_app"
KEYS = [f"spread-{i}" for i in range(30)]
RECOVERY_BOUND = DETECTION_BOUND + 5.0  # kill -9 to every grain answering again


async def start_silo(launcher: SiloLauncher, *extra: str) -> SiloProcess:
    return await launcher.start(
        "--membership", "sqlite:membership.db", "--cluster-id", CLUSTER, "--storage", "memory",
        "--reminders", "memory", *FAST, "--app", FAILOVER_APP, *extra, app=APP,
    )


async def wait_active(launcher: SiloLauncher, n: int) -> None:
    table = membership_table(launcher.data_dir)
    try:
        await poll_until(table.read_all, lambda d: sum(
            e.status is SiloStatus.ACTIVE for e in d.entries()) == n, timeout=15)
    finally:
        await table.close()
    await poll_until(lambda: cluster_status(launcher.data_dir),
                     lambda rows: sum(r["reachable"] for r in rows) == n, timeout=15)


def client_of(silos: list[SiloProcess]) -> ClusterClient:
    return ClusterClient(ClientOptions(
        cluster_id=CLUSTER, gateways=tuple(s.gateway for s in silos), response_timeout=30.0,
        reconnect_delay=0.2, reconnect_delay_max=1.0,
    ))


async def test_client_spreads_over_gateways_and_fails_over_when_a_silo_is_killed(
    silo_launcher: SiloLauncher,
):
    silos = [await start_silo(silo_launcher) for _ in range(3)]
    await wait_active(silo_launcher, 3)
    client = client_of(silos)
    tasks: list[asyncio.Task[Any]] = []
    try:
        await client.connect()
        assert sorted(client.connected_gateways) == sorted(s.gateway for s in silos)
        rows = await cluster_status(silo_launcher.data_dir)
        assert len(rows) == 3

        # calls spread: first calls activate their grain on the silo of their gateway
        placed = {k: (await client.get_grain("Spot", k).info())["pid"] for k in KEYS}
        by_pid = {s.pid: [k for k in KEYS if placed[k] == s.pid] for s in silos}
        assert sum(1 for keys in by_pid.values() if keys) >= 2, by_pid

        sleepers = {f"nap-{i}": await client.get_grain("Sleeper", f"nap-{i}").pid()
                    for i in range(24)}
        victim = max(silos, key=lambda s: min(
            len(by_pid[s.pid]), sum(pid == s.pid for pid in sleepers.values())))
        survivors = [s for s in silos if s is not victim]
        alive_pids = {s.pid for s in survivors}

        # calls in flight: long naps through the victim's gateway, short ones elsewhere
        doomed = [k for k, pid in sleepers.items() if pid == victim.pid]
        spared = [k for k, pid in sleepers.items() if pid != victim.pid]
        assert doomed and spared, sleepers
        tasks = [asyncio.create_task(client.get_grain("Sleeper", k).nap(600.0)) for k in doomed]
        spared_tasks = [asyncio.create_task(client.get_grain("Sleeper", k).nap(3.0))
                        for k in spared]
        tasks += spared_tasks
        await asyncio.sleep(0.3)  # the requests reached their grains

        killed_at = time.monotonic()
        await victim.kill()

        # in-flight calls through the dead gateway fail at once, not after 600 s or a timeout
        results = await asyncio.wait_for(
            asyncio.gather(*tasks[:len(doomed)], return_exceptions=True), timeout=3.0
        )
        assert all(isinstance(r, SiloUnavailableError) for r in results), results
        assert time.monotonic() - killed_at < 3.0

        # grains on the survivors answer through the remaining gateways at once
        for pid, keys in by_pid.items():
            if pid != victim.pid:
                for k in keys:
                    assert (await client.get_grain("Spot", k).info())["pid"] == pid
        assert sorted(client.connected_gateways) == sorted(s.gateway for s in survivors)

        # the victim's grains re-activate on a survivor once the cluster declares it dead
        async def all_answer() -> list[int]:
            pids = []
            for k in KEYS:
                try:
                    pids.append((await client.get_grain("Spot", k).info())["pid"])
                except SiloUnavailableError:
                    pids.append(-1)
            return pids

        pids = await poll_until(all_answer, lambda ps: -1 not in ps, timeout=RECOVERY_BOUND,
                                interval=0.2)
        recovered = time.monotonic() - killed_at
        assert set(pids) <= alive_pids, pids
        assert recovered < RECOVERY_BOUND, f"every grain answered after {recovered:.1f} s"
        # the naps elsewhere were not disturbed
        assert await asyncio.gather(*spared_tasks) == [sleepers[k] for k in spared]

        # a silo restarted on the dead gateway's port is connected again (with back-off)
        _host, port = victim.gateway_host_port
        back = await start_silo(silo_launcher, "--gateway-port", str(port))
        assert back.gateway == victim.gateway
        await poll_until(lambda: asyncio.sleep(0, client.connected_gateways),
                         lambda gws: victim.gateway in gws, timeout=10, interval=0.1)
        assert len(client.connected_gateways) == 3
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()


async def test_client_given_the_membership_table_finds_gateways_not_listed(
    silo_launcher: SiloLauncher,
):
    silos = [await start_silo(silo_launcher) for _ in range(2)]
    await wait_active(silo_launcher, 2)
    client = ClusterClient(ClientOptions(
        cluster_id=CLUSTER, gateways=(silos[0].gateway,), response_timeout=30.0,
        membership=f"sqlite:{silo_launcher.data_dir / 'membership.db'}",
        gateway_refresh_period=0.2, reconnect_delay=0.2, reconnect_delay_max=1.0,
    ))
    try:
        await client.connect()  # reads the table first: both gateways at once
        assert sorted(client.connected_gateways) == sorted(s.gateway for s in silos)

        joiner = await start_silo(silo_launcher)
        await wait_active(silo_launcher, 3)
        await poll_until(lambda: asyncio.sleep(0, client.connected_gateways),
                         lambda gws: joiner.gateway in gws, timeout=10, interval=0.1)
        pids = {(await client.get_grain("Spot", k).info())["pid"] for k in KEYS}
        assert joiner.pid in pids  # its gateway carries calls: prefer-local placed grains
    finally:
        await client.close()
