"""The stream operator commands against two real silo processes with a client secret:
``orleanspy streams subscriptions`` lists a stream's subscriptions, ``streams unsubscribe``
removes one (its events stop; an implicit one is refused), ``streams agents stop`` stops
every silo's agents (events published meanwhile wait in the queue) and ``start`` delivers
each of them once. Without the secret every command is refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from orleanspy.cluster.transport import query_silo

from .silo_process import SiloLauncher, SiloProcess, poll_until, run_cli_to_end

pytestmark = pytest.mark.integration

APP = "tests.integration.cluster_stream_app"
CLUSTER = "ops"
SECRET = "operator-secret"
KEY = 7
CONFIG = """
[streams.s]
adapter = "sqlite:streams.db"
total_queues = 4
pull_period = 0.02
balance_settle_time = 0.2
lease_duration = 3.0
lease_retry_period = 0.1
"""


async def cli(data_dir: Path, *args: str, secret: str = SECRET) -> tuple[int, str, str]:
    return await run_cli_to_end(
        "streams", *args, "--membership", "sqlite:membership.db", "--data-dir", str(data_dir),
        "--cluster-id", CLUSTER, "--secret", secret, timeout=60)


def explicit_numbers(data_dir: Path) -> list[int]:
    path = data_dir / "explicit.txt"
    if not path.exists():
        return []
    return [int(line.split()[1]) for line in path.read_text().splitlines()]


async def test_operator_lists_and_removes_subscriptions_and_stops_and_starts_agents(
    silo_launcher: SiloLauncher,
) -> None:
    data_dir = silo_launcher.data_dir
    config = data_dir / "streams.toml"
    data_dir.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG)
    silos: list[SiloProcess] = [await silo_launcher.start(
        "--membership", "sqlite:membership.db", "--cluster-id", CLUSTER, "--storage",
        "memory", "--reminders", "memory", "--config", str(config), "--probe-period", "0.5",
        secret=SECRET, app=APP) for _ in range(2)]

    async def agents(command: str) -> list[dict[str, Any]]:
        code, out, err = await cli(data_dir, "agents", command, "s", "--json")
        assert code == 0, err
        rows: list[dict[str, Any]] = json.loads(out)
        return rows

    async def held() -> list[Any]:  # what `agents status` asks, without a process each time
        ports = [int(s.silo_address.partition("@")[0].rpartition(":")[2]) for s in silos]
        return [await query_silo("127.0.0.1", port, "stream_agents", ["s", "status"],
                                 cluster_id=CLUSTER, secret=SECRET) for port in ports]

    # both silos answer, and the four queues are spread over them
    await poll_until(held, lambda rows: sum(len(r["queues"]) for r in rows) == 4
                     and all(r["queues"] for r in rows), timeout=20)

    client = silos[0].client(cluster_id=CLUSTER)
    await client.connect()
    try:
        seen: list[int] = []
        arrived = asyncio.Event()

        async def on_number(item: int, token: Any) -> None:
            seen.append(item)
            arrived.set()

        stream = client.get_stream_provider("s").get_stream("explicit", KEY)
        await client.get_grain("ExplicitSink", KEY).subscribe()
        mine = await stream.subscribe(on_number)
        for n in range(5):
            await stream.on_next(n)
        await poll_until(lambda: asyncio.sleep(0, explicit_numbers(data_dir)),
                         lambda got: got == list(range(5)), timeout=20, interval=0.05)

        # independent commands, run at once (each is a process)
        listed, table, implicit, refused, no_secret, no_secret_stop = await asyncio.gather(
            cli(data_dir, "subscriptions", "s", "explicit", str(KEY), "--json"),
            cli(data_dir, "subscriptions", "s", "explicit", str(KEY)),
            cli(data_dir, "subscriptions", "s", "numbers", str(KEY), "--json"),
            cli(data_dir, "unsubscribe", "s", "numbers", str(KEY), "implicit:NumberSink"),
            cli(data_dir, "subscriptions", "s", "explicit", str(KEY), secret="wrong"),
            cli(data_dir, "agents", "stop", "s", secret="wrong"),
        )
        code, out, err = listed
        assert code == 0, err
        rows = {r["consumer"]: r for r in json.loads(out)}
        assert set(rows) == {f"ExplicitSink/{KEY}",
                             f"orleanspy.ClientStreamConsumer/{client.client_id}"}
        sink = rows[f"ExplicitSink/{KEY}"]
        assert sink["kind"] == "explicit" and sink["filter"] is None and not sink["faulted"]
        assert rows[f"orleanspy.ClientStreamConsumer/{client.client_id}"]["sub_id"] == \
            mine.sub_id
        code, out, err = table
        assert code == 0 and sink["sub_id"] in out and "explicit" in out, err

        # the implicit subscription of stream numbers/KEY is listed and cannot be removed
        code, out, err = implicit
        assert code == 0, err
        assert [(r["sub_id"], r["kind"]) for r in json.loads(out)] == [
            ("implicit:NumberSink", "implicit")]
        code, out, err = refused
        assert code == 1 and "implicit" in err, (out, err)

        # without the secret nothing is listed, removed, stopped
        code, out, err = no_secret
        assert code == 2 and "secret" in err, (out, err)
        code, out, err = no_secret_stop
        assert code == 1 and "secret" in err, (out, err)
        assert {r["state"] for r in await held()} == {"running"}

        # stopped agents deliver nothing; the events wait in the queue
        stopped = await agents("stop")
        assert [r["state"] for r in stopped] == ["stopped"] * 2
        assert sum(len(r["queues"]) for r in stopped) == 4  # each silo keeps its queues
        arrived.clear()
        for n in range(5, 15):
            await stream.on_next(n)
        await asyncio.sleep(1.0)  # fifty pull periods: a running agent would deliver
        assert explicit_numbers(data_dir) == list(range(5)) and seen == list(range(5))

        # started again: every event arrives, once, in order
        assert [r["state"] for r in await agents("start")] == ["running"] * 2
        await poll_until(lambda: asyncio.sleep(0, explicit_numbers(data_dir)),
                         lambda got: len(got) >= 15, timeout=20, interval=0.05)
        await poll_until(lambda: asyncio.sleep(0, list(seen)),
                         lambda got: len(got) >= 15, timeout=20, interval=0.05)
        assert explicit_numbers(data_dir) == list(range(15))
        assert seen == list(range(15))

        # unsubscribe the grain: its events stop, the client's go on
        code, out, err = await cli(data_dir, "unsubscribe", "s", "explicit", str(KEY),
                                   sink["sub_id"])
        assert code == 0 and sink["sub_id"] in out, err
        for n in range(15, 20):
            await stream.on_next(n)
        again, listed = await asyncio.gather(
            cli(data_dir, "unsubscribe", "s", "explicit", str(KEY), sink["sub_id"]),
            cli(data_dir, "subscriptions", "s", "explicit", str(KEY), "--json"))
        code, out, err = again
        assert code == 1 and "no subscription" in err and mine.sub_id in err, (out, err)
        assert [r["sub_id"] for r in json.loads(listed[1])] == [mine.sub_id]
        await poll_until(lambda: asyncio.sleep(0, list(seen)),
                         lambda got: len(got) >= 20, timeout=20, interval=0.05)
        assert explicit_numbers(data_dir) == list(range(15))
    finally:
        await client.close()
