"""A silo's start is all or nothing, a stop is recorded as such, and the tools find the
cluster: real silo processes.

One clustered silo runs, configured by an ``orleanspy.toml`` in its data dir (SQLite
membership, a secret, a stream provider on a SQLite queue file, a short
``defunct_silo_expiration``). A second, started from the CLI with a dashboard port that
another socket holds, exits 2 within seconds naming the port; it never appears in the
membership table and never leases a queue. A third, on a table holding an unreachable
"active" silo, waits to join: its gateway refuses clients with a retryable "starting" error,
and SIGTERM stops it at once, leaving its row ``stopped`` (``cluster status`` says so, and
why the unreachable one is there). A fourth, stopped with SIGTERM, leaves its row
``stopped``, and the running silo deletes that row once it is older than the expiration.
``orleanspy call`` run in the folder of the ``orleanspy.toml`` finds the cluster through its
membership table; ``cluster status`` without the secret says the silos refused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from orleanspy import ClusterClient
from orleanspy.cluster.membership import (
    MembershipEntry,
    SiloStatus,
    SqliteMembershipTable,
)
from orleanspy.errors import SiloUnavailableError
from orleanspy.ids import SiloAddress
from orleanspy.streams.leases import SqliteQueueLeaseStore

from .silo_process import (
    REPO_ROOT,
    SiloLauncher,
    child_env,
    free_port,
    poll_until,
    run_cli,
    run_cli_to_end,
)

pytestmark = pytest.mark.integration

APP = "tests.integration.cluster_stream_app"
CLUSTER = "startup"
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5",
        "--table-refresh-period", "0.5")
SECRET = "start-all-or-nothing"
EXPIRATION = 5.0  # defunct_silo_expiration: long enough to read the stopped row first
CONFIG = f"""
membership = "sqlite:membership.db"
[silo]
cluster_id = "{CLUSTER}"
secret = "{SECRET}"
defunct_silo_expiration = {EXPIRATION}
[streams.s]
adapter = "sqlite:streams.db"
total_queues = 4
pull_period = 0.05
balance_settle_time = 0.1
lease_duration = 3.0
lease_retry_period = 0.1
"""
EXIT_BOUND = 5.0  # seconds a failed start may take to exit, from its first log line
PATIENCE = 30.0  # bound on waiting for a process at all (the interpreter's start included)


async def rows(path: Path) -> list[MembershipEntry]:
    table = SqliteMembershipTable(str(path), cluster_id=CLUSTER)
    try:
        return list((await table.read_all()).entries())
    finally:
        await table.close()


async def lease_owners(path: Path) -> set[str]:
    store = SqliteQueueLeaseStore(str(path), CLUSTER)
    try:
        return {lease.owner for lease in (await store.read_all()).values()}
    finally:
        await store.close()


@contextlib.contextmanager
def held_port() -> socket.socket:  # type: ignore[misc]
    """A port another process would find taken: bound and listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock
    finally:
        sock.close()


async def start_on_a_taken_dashboard_port(
    app: str, data_dir: Path, *args: str,
) -> tuple[int, float, bytes, bytes, int, int]:
    """``silo start`` with a dashboard port another socket holds, to its end: its exit code,
    the seconds from its first log line to its exit, its stdout and stderr, the taken port
    and the silo port it was given."""
    with held_port() as taken:
        port = taken.getsockname()[1]
        silo_port = free_port()
        proc = await run_cli(
            "silo", "start", "--app", app, "--data-dir", str(data_dir), "--port",
            str(silo_port), "--gateway-port", str(free_port()), "--dashboard-port", str(port),
            *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert proc.stderr is not None and proc.stdout is not None
        async with asyncio.timeout(PATIENCE):
            first = await proc.stderr.readline()  # the silo runs (imports done)
            started = time.monotonic()
            out, rest = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
            await proc.wait()
        elapsed = time.monotonic() - started
    assert proc.returncode is not None
    return proc.returncode, elapsed, out, first + rest, port, silo_port


async def test_a_failed_start_leaves_no_trace_and_sigterm_stops_a_start(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    data = silo_launcher.data_dir
    data.mkdir(parents=True, exist_ok=True)
    config = data / "orleanspy.toml"
    config.write_text(CONFIG)
    membership = data / "membership.db"
    common = ("--storage", "memory", "--reminders", "memory", "--config", str(config), *FAST)
    running = await silo_launcher.start(*common, app=APP)
    await poll_until(lambda: lease_owners(membership),
                     lambda owners: owners == {running.silo_address}, timeout=10)

    # A taken dashboard port: exit 2 within seconds, naming the port; no row, no lease.
    code, elapsed, out, err, port, silo_port = await start_on_a_taken_dashboard_port(
        APP, data, *common)
    assert code == 2, err.decode()
    assert elapsed < EXIT_BOUND, f"exited {elapsed:.1f} s after its first log line"
    errors = [line for line in err.decode().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(port) in errors[0] and "--dashboard-port" in errors[0]
    assert b"ready" not in out
    assert "spark_session_stopped" not in err.decode()  # no session was started
    assert [str(e.silo) for e in await rows(membership)] == [running.silo_address]
    assert await lease_owners(membership) == {running.silo_address}
    assert not any(f":{silo_port}@" in owner for owner in await lease_owners(membership))

    # A start that waits to join: clients are refused as "starting"; SIGTERM stops it.
    lonely = data / "lonely.db"
    table = SqliteMembershipTable(str(lonely), cluster_id=CLUSTER)
    try:
        version = (await table.read_all()).version
        now = time.time()
        ghost = SiloAddress("127.0.0.1", free_port(), 1)  # nobody listens there
        assert await table.insert_row(MembershipEntry(
            silo=ghost, status=SiloStatus.ACTIVE, start_time=now, i_am_alive_time=now + 60,
        ), version)
    finally:
        await table.close()
    gateway = free_port()
    waiting = await run_cli(
        "silo", "start", "--app", APP, "--data-dir", str(data), "--port", str(free_port()),
        "--gateway-port", str(gateway), "--membership", f"sqlite:{lonely}",
        "--cluster-id", CLUSTER, "--storage", "memory", "--reminders", "memory", *FAST,
        "--log-format", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert waiting.stderr is not None
    async with asyncio.timeout(PATIENCE):
        while b"membership_join_silos_unreachable" not in await waiting.stderr.readline():
            pass
    client = ClusterClient(gateways=[f"127.0.0.1:{gateway}"], cluster_id=CLUSTER)
    with pytest.raises(SiloUnavailableError, match="is starting"):
        await client.connect()
    await client.close()
    waiting.send_signal(signal.SIGTERM)
    async with asyncio.timeout(2 * EXIT_BOUND):
        _, rest = await waiting.communicate()
    assert waiting.returncode == 0, rest.decode()
    statuses = {e.silo.port: e.status for e in await rows(lonely)}
    assert {s for p, s in statuses.items() if p != ghost.port} == {SiloStatus.STOPPED}
    # cluster status says why each row that is not an active, answering silo is there
    code, out, err = await run_cli_to_end(
        "cluster", "status", "--membership", f"sqlite:{lonely}", "--cluster-id", CLUSTER,
        "--json", timeout=PATIENCE)
    assert code == 0, err
    why = {r["silo"]: (r["status"], r["why"]) for r in json.loads(out)}
    assert why.pop(str(ghost))[1].startswith("did not answer; last alive ")
    ((status, reason),) = why.values()
    assert status == "stopped" and reason.startswith("stopped gracefully at ")

    # A graceful stop is recorded as stopped, not dead; the running silo deletes the row
    # once it is older than defunct_silo_expiration.
    leaving = await silo_launcher.start(*common, app=APP)
    assert await leaving.terminate() == 0
    statuses = {str(e.silo): e.status for e in await rows(membership)}
    assert statuses == {running.silo_address: SiloStatus.ACTIVE,
                        leaving.silo_address: SiloStatus.STOPPED}
    code, out, err = await run_cli_to_end("cluster", "status", "--config", str(config),
                                          "--json", timeout=PATIENCE)
    assert code == 0, err
    assert {r["silo"]: r["why"] for r in json.loads(out)}[running.silo_address] is None
    await poll_until(lambda: rows(membership),
                     lambda entries: [str(e.silo) for e in entries] == [running.silo_address],
                     timeout=3 * EXPIRATION)

    # Without the secret, cluster status says the silo refused it (exit 2), not "-".
    code, out, err = await run_cli_to_end(
        "cluster", "status", "--membership", f"sqlite:{membership}", "--cluster-id", CLUSTER,
        timeout=PATIENCE)
    assert code == 2
    assert "refused" in err and "secret" in err and "--secret" in err
    assert "wrong or missing secret" in out

    # orleanspy call in the folder of orleanspy.toml: the gateways come from its membership.
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    call = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "silo", "call", "ExplicitSink", "7", "subscribe", cwd=data,
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    async with asyncio.timeout(PATIENCE):
        out_b, err_b = await call.communicate()
    assert call.returncode == 0, err_b.decode()
    assert json.loads(out_b) == running.silo_address
