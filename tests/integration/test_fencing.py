"""A silo paused past its fence (SIGSTOP) serves nothing from its old activations when it
wakes: requests that waited on its sockets are refused while it cannot confirm that it is
still a member, it learns that it was declared dead, and it exits within seconds."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest

from orleanspy import SiloUnavailableError
from orleanspy.cluster.membership import SiloStatus, SqliteMembershipTable

from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration

APP = "tests.integration.cluster_app"
CLUSTER = "fenced"
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5",
        "--table-refresh-period", "0.5")


async def test_a_paused_silo_serves_nothing_stale_and_exits(silo_launcher: SiloLauncher) -> None:
    a, b = [
        await silo_launcher.start("--membership", "sqlite:membership.db", "--cluster-id",
                                  CLUSTER, "--storage", "memory", "--reminders", "memory",
                                  *FAST, app=APP)
        for _ in range(2)
    ]
    table = SqliteMembershipTable(str(silo_launcher.data_dir / "membership.db"),
                                  cluster_id=CLUSTER)

    async def statuses() -> list[SiloStatus]:
        return [e.status for e in (await table.read_all()).entries()]

    await poll_until(statuses, lambda s: s.count(SiloStatus.ACTIVE) == 2, timeout=15)
    client_a = a.client(cluster_id=CLUSTER)
    client_b = b.client(cluster_id=CLUSTER)
    await client_a.connect()
    await client_b.connect()
    try:
        keys = [f"g{i}" for i in range(10)]
        before = {k: await client_a.get_grain("Spot", k).info() for k in keys}
        assert {v["pid"] for v in before.values()} == {a.pid}  # placed on a (prefer_local)

        os.kill(a.pid, signal.SIGSTOP)
        try:
            queued: list[asyncio.Task[Any]] = [
                asyncio.create_task(client_a.get_grain("Spot", k).info()) for k in keys
            ]
            await poll_until(statuses, lambda s: SiloStatus.DEAD in s, timeout=20)
            moved = {k: await client_b.get_grain("Spot", k).info() for k in keys}
            assert {v["pid"] for v in moved.values()} == {b.pid}
        finally:
            woke = time.monotonic()
            os.kill(a.pid, signal.SIGCONT)
        outcomes = await asyncio.gather(*queued, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                assert isinstance(outcome, SiloUnavailableError), repr(outcome)
            else:  # served after all: never by the stale activation on a
                assert outcome["pid"] == b.pid, outcome
        code = await a.wait_exit(timeout=5)
        exited_after = time.monotonic() - woke
        assert exited_after < 2, exited_after  # a declared-dead silo exits at once
        assert code is not None
        # b keeps serving every grain, each from one activation
        again = {k: await client_b.get_grain("Spot", k).info() for k in keys}
        assert {v["activation"] for v in again.values()} == {
            v["activation"] for v in moved.values()}
        log = a.log_text()
        assert '"event": "membership_found_myself_dead"' in log
    finally:
        await client_a.close()
        await client_b.close()
        await table.close()
