"""What an operator sees of a cluster in trouble, everywhere it looks: three clustered silo
processes (fast membership options) under a stream load, each serving its dashboard.

- A fourth silo started with a dashboard port another socket holds exits 2 within seconds
  naming the port; it never appears in the membership table and never leases a queue.
- An implicit consumer held behind on one of two streams of a queue shows its lag on exactly
  that (stream, consumer) row of ``/api/cluster``, the page (in Chromium when present), the
  owner's ``/metrics``, ``orleanspy streams status`` and ``orleanspy cluster status``, while
  the other stream's row reads 0 (and ``cluster status``, which lists what is behind, leaves
  it out).
- After a kill -9 of one silo, ``/api/cluster`` (and the page, in Chromium when present),
  ``/metrics`` and ``orleanspy cluster status`` show it dead (when, by whom) and its queues
  unowned, with a banner on the page; then the survivors take the queues and the unowned
  queues are gone while the dead row stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from orleanspy.cluster.membership import SqliteMembershipTable
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.ids import StreamId
from orleanspy.streams.mapper import HashRingQueueMapper

from .silo_process import (
    SiloLauncher,
    SiloProcess,
    poll_until,
    run_cli_to_end,
)
from .test_cluster_streams import leases, owners
from .test_dashboard_browser import CHROMIUM
from .test_start_all_or_nothing import EXIT_BOUND, start_on_a_taken_dashboard_port

pytestmark = pytest.mark.integration

APP = "tests.integration.ops_view_app"
CLUSTER = "streams"  # the lease helpers of test_cluster_streams read this cluster's table
QUEUES = 4
BEHIND = 31  # events the held consumer is behind
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5",
        "--table-refresh-period", "0.5")
DETECTION = 20.0  # a kill -9 is declared well within this with the fast options
SETTLE = 6.0  # survivors wait this long before taking a dead silo's queues: the window in
# which the CLI (a new Python process, slow to start on a loaded machine) reads them unowned
CONFIG = f"""
[streams.s]
adapter = "sqlite:streams.db"
total_queues = {QUEUES}
pull_period = 0.02
balance_settle_time = {SETTLE}
lease_duration = 3.0
lease_retry_period = 0.1
"""


def two_streams_of_one_queue() -> tuple[str, int, int]:
    mapper = HashRingQueueMapper(QUEUES, "s")
    seen: dict[str, list[int]] = defaultdict(list)
    for key in range(1000):
        queue = str(mapper.queue_for(StreamId("held", key)))
        seen[queue].append(key)
        if len(seen[queue]) == 2:
            return queue, seen[queue][0], seen[queue][1]
    raise AssertionError("no two streams share a queue")


QUEUE, HELD, FREE = two_streams_of_one_queue()


async def enqueue(data_dir: Path, namespace: str, key: int, items: range) -> None:
    adapter = SqliteAdapterFactory(str(data_dir / "streams.db")).create_adapter("s")
    mapper = HashRingQueueMapper(QUEUES, "s")
    await adapter.open()
    try:
        stream = StreamId(namespace, key)
        for n in items:  # one container each: the lag counts them
            await adapter.enqueue(mapper.queue_for(stream), stream, [n])
    finally:
        await adapter.close()


async def load(data_dir: Path) -> None:
    """A steady stream load over the other queues while the cluster changes (the held
    queue gets only the held streams' events: its lag counts queue positions)."""
    mapper = HashRingQueueMapper(QUEUES, "s")
    keys = [k for k in range(16) if str(mapper.queue_for(StreamId("load", k))) != QUEUE]
    n = 0
    while True:
        await asyncio.gather(*(enqueue(data_dir, "load", k, range(n, n + 1)) for k in keys))
        n += 1
        await asyncio.sleep(0.05)


async def get_json(http: aiohttp.ClientSession, url: str) -> Any:
    async with http.get(url) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def metric_samples(http: aiohttp.ClientSession, silo: SiloProcess) -> list[Any]:
    async with http.get(f"{silo.dashboard}/metrics") as r:
        text = await r.text()
    return [s for f in text_string_to_metric_families(text) for s in f.samples]


async def cli_json(data_dir: Path, *command: str) -> Any:
    code, out, err = await run_cli_to_end(
        *command, "--membership", "sqlite:membership.db", "--data-dir", str(data_dir),
        "--cluster-id", CLUSTER, "--json")
    assert code == 0, err
    return json.loads(out)


async def test_lag_per_stream_and_a_dead_silo_shown_everywhere(
    silo_launcher: SiloLauncher, tmp_path: Path,
) -> None:
    data_dir = silo_launcher.data_dir
    config = data_dir / "streams.toml"  # its relative SQLite paths resolve against it
    data_dir.mkdir(parents=True, exist_ok=True)
    config.write_text(CONFIG)
    common = ("--membership", silo_launcher.shared("sqlite:membership.db"), "--cluster-id",
              CLUSTER, "--storage", "memory", "--reminders", "memory", "--config", str(config),
              *FAST)
    silos = [await silo_launcher.start(  # one at a time: each start has its own bound
        *common, "--dashboard-port", "0", app=APP) for _ in range(3)]
    by_address = {s.silo_address: s for s in silos}
    names = set(by_address)
    await poll_until(lambda: leases(data_dir), lambda held: set(owners(held)) == names
                     and sum(map(len, owners(held).values())) == QUEUES, timeout=20)
    producer = asyncio.create_task(load(data_dir))
    try:
        await _a_fourth_with_a_taken_port_leaves_no_trace(data_dir, common, names)
        async with aiohttp.ClientSession() as http:
            await _lag_is_per_stream(http, data_dir, silos, by_address)
            await _a_dead_silo_is_shown(http, data_dir, silos, by_address, tmp_path)
    finally:
        producer.cancel()
        await asyncio.gather(producer, return_exceptions=True)
        (data_dir / f"hold-{HELD}").unlink(missing_ok=True)


async def membership_rows(data_dir: Path) -> set[str]:
    table = SqliteMembershipTable(str(data_dir / "membership.db"), cluster_id=CLUSTER)
    try:
        return {str(e.silo) for e in (await table.read_all()).entries()}
    finally:
        await table.close()


async def _a_fourth_with_a_taken_port_leaves_no_trace(
    data_dir: Path, common: tuple[str, ...], names: set[str],
) -> None:
    code, elapsed, out, raw_err, port, silo_port = await start_on_a_taken_dashboard_port(
        APP, data_dir, *common)
    err = raw_err.decode()
    assert code == 2, err
    assert elapsed < EXIT_BOUND, f"exited {elapsed:.1f} s after its first log line"
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(port) in errors[0] and "--dashboard-port" in errors[0]
    assert b"ready" not in out
    assert await membership_rows(data_dir) == names
    held = owners(await leases(data_dir))
    assert set(held) == names and sum(map(len, held.values())) == QUEUES
    assert not any(f":{silo_port}@" in owner for owner in held)


async def _lag_is_per_stream(http: aiohttp.ClientSession, data_dir: Path,
                             silos: list[SiloProcess],
                             by_address: dict[str, SiloProcess]) -> None:
    (data_dir / f"hold-{HELD}").touch()
    await enqueue(data_dir, "held", FREE, range(5))
    await enqueue(data_dir, "held", HELD, range(BEHIND))  # the first waits: all are behind

    def rows_of(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {r["stream"]: r for r in view["subscriptions"] if r["queue"] == QUEUE
                and r["stream"].startswith("held/")}

    view = await poll_until(
        lambda: get_json(http, f"{silos[0].dashboard}/api/cluster"),
        lambda v: rows_of(v).get(f"held/{HELD}", {}).get("lag") == BEHIND
        and rows_of(v).get(f"held/{FREE}", {}).get("lag") == 0, timeout=20)
    held, free = rows_of(view)[f"held/{HELD}"], rows_of(view)[f"held/{FREE}"]
    assert (held["consumer"], free["consumer"]) == (f"Held/{HELD}", f"Held/{FREE}")
    assert held["subscription"] == free["subscription"] == "implicit:Held"
    lagging = [r for r in view["subscriptions"] if r["lag"] > 0]
    assert lagging[0] is held  # furthest behind first
    assert all(r is held or r["lag"] < BEHIND for r in lagging)
    async with page_of(silos[0]) as page:
        await page_shows_the_lag(page)

    owner = by_address[held["silo"]]
    lags = {(s.labels["stream"], s.labels["consumer"]): s.value
            for s in await metric_samples(http, owner)
            if s.name == "orleanspy_stream_subscription_lag" and s.labels["queue"] == QUEUE
            and s.labels["stream"].startswith("held/")}
    assert lags == {(f"held/{HELD}", f"Held/{HELD}"): BEHIND,
                    (f"held/{FREE}", f"Held/{FREE}"): 0}

    rows = await cli_json(data_dir, "streams", "status")
    (row,) = [r for r in rows if r["queue"] == QUEUE]
    subs = {s["stream"]: s for s in row["subs"] if s["stream"].startswith("held/")}
    assert (subs[f"held/{HELD}"]["lag"], subs[f"held/{FREE}"]["lag"]) == (BEHIND, 0)
    assert (subs[f"held/{HELD}"]["consumer"], subs[f"held/{FREE}"]["consumer"]) == (
        f"Held/{HELD}", f"Held/{FREE}")
    assert row["max_lag"] >= BEHIND

    silo_rows = await cli_json(data_dir, "cluster", "status")
    behind = [(r["silo"], b) for r in silo_rows for b in r["behind"]
              if b["queue"] == QUEUE and b["stream"].startswith("held/")]
    assert [(silo, b["stream"], b["consumer"], b["lag"]) for silo, b in behind] == [
        (held["silo"], f"held/{HELD}", f"Held/{HELD}", BEHIND)]  # the free one is not behind


async def _a_dead_silo_is_shown(http: aiohttp.ClientSession, data_dir: Path,
                                silos: list[SiloProcess], by_address: dict[str, SiloProcess],
                                tmp_path: Path) -> None:
    watcher = silos[0]
    held = owners(await leases(data_dir))
    victim = next(s for s in silos[1:] if QUEUE not in held.get(s.silo_address, ()))
    lost = held[victim.silo_address]
    assert lost
    api = f"{watcher.dashboard}/api/cluster"
    readings: list[list[dict[str, Any]]] = []  # cluster status --json, run back to back
    enough = asyncio.Event()

    def told(status: list[dict[str, Any]]) -> bool:  # dead, and its queues unowned
        (cli_row,) = [r for r in status if r["silo"] == victim.silo_address]
        return cli_row["status"] == "dead" and {f"s/{q}" for q in lost} <= set(
            cli_row["unowned_queues"])

    async def watch_cli() -> None:
        # A new Python process each time, slow to start on a loaded machine: run from the
        # kill on, so that one of the runs reads inside the window (ends between runs).
        while not enough.is_set():
            readings.append(await cli_json(data_dir, "cluster", "status"))
            if told(readings[-1]):
                enough.set()

    cli = asyncio.create_task(watch_cli())
    try:
        async with page_of(watcher) as page:
            await victim.kill()

            def dead(view: dict[str, Any]) -> bool:
                rows = {s["silo"]: s for s in view["silos"]}
                return bool(rows[victim.silo_address]["status"] == "dead")

            view = await poll_until(lambda: get_json(http, api), dead, timeout=DETECTION)
            metrics, shown = await asyncio.gather(metric_samples(http, watcher),
                                                  page_shows_it(page, tmp_path))
        async with asyncio.timeout(SETTLE + 10):
            await enough.wait()
    finally:
        enough.set()
        await cli
    assert lost <= {q["queue"] for q in view["unowned_queues"] if q["state"] == "unowned"}
    (row,) = [s for s in view["silos"] if s["silo"] == victim.silo_address]
    survivors = {s.silo_address for s in silos if s is not victim}
    assert row["declared_dead_by"] and set(row["declared_dead_by"]) <= survivors
    assert row["declared_dead_at"] >= row["last_seen"] > 0 and row["reachable"] is False
    for q in view["unowned_queues"]:
        assert q["last_owner"] == victim.silo_address and q["last_owner_status"] == "dead"
        assert q["for_seconds"] is not None and 0 <= q["for_seconds"] < DETECTION
    assert any(w.startswith(f"queue s/{q}") for q in lost for w in view["warnings"])
    assert victim.silo_address not in view["summed"]

    statuses = {(s.labels["peer"], s.labels["status"]) for s in metrics
                if s.name == "orleanspy_cluster_silo_status"}
    assert (victim.silo_address, "dead") in statuses
    assert any(s.name == "orleanspy_cluster_silo_declared_dead_timestamp_seconds"
               and s.labels["peer"] == victim.silo_address for s in metrics)
    # /metrics and the page read within the settle window: the survivors have not taken
    # the queues yet (they wait SETTLE seconds after the membership change).
    assert lost <= {s.labels["queue"] for s in metrics
                    if s.name == "orleanspy_stream_queue_unowned_seconds"}
    (cli_row,) = [r for r in readings[-1] if r["silo"] == victim.silo_address]
    assert told(readings[-1]) and cli_row["declared_dead_by"] == row["declared_dead_by"]
    if shown is not None:
        dead_text, banner, gaps = shown
        assert victim.silo_address in dead_text and "declared dead" in dead_text
        assert "unowned" in banner and gaps >= 1

    view = await poll_until(lambda: get_json(http, api),
                            lambda v: not v["unowned_queues"], timeout=SETTLE + 10)
    (row,) = [s for s in view["silos"] if s["silo"] == victim.silo_address]
    assert row["status"] == "dead" and not view["warnings"]
    assert {q["queue"] for q in view["streams"]} == {f"s-{i}" for i in range(QUEUES)}
    status = await cli_json(data_dir, "cluster", "status")
    assert not any(r["unowned_queues"] for r in status)


@contextlib.asynccontextmanager
async def page_of(silo: SiloProcess) -> AsyncIterator[Any]:
    """The silo's page open in Chromium (None without Chromium or playwright, except under
    CI, where that is a failure, as in test_dashboard_browser.py)."""
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        async_playwright = None  # type: ignore[assignment]
    if async_playwright is None or CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("the page check needs playwright and chromium")
        yield None
        return
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{silo.dashboard}/")
            yield page
            assert errors == []  # the page's script ran without an error
        finally:
            await browser.close()


async def page_shows_the_lag(page: Any) -> None:
    """The page's subscriptions table: lag 31 on the held (stream, consumer) row, 0 on the
    other stream's row of the queue, the held one listed first."""
    if page is None:
        return
    from playwright.async_api import expect

    def row(key: int) -> Any:
        stream = page.locator("td:nth-child(2)", has_text=re.compile(rf"^held/{key}$"))
        return page.locator("#subscriptions tbody tr", has=stream)

    for key, lag in ((HELD, BEHIND), (FREE, 0)):
        cells = row(key).locator("td")
        await expect(cells.nth(4)).to_have_text(str(lag), timeout=5000)
        await expect(cells.nth(2)).to_have_text(f"Held/{key}")
        await expect(cells.nth(0)).to_have_text(f"s:{QUEUE}")
    streams = await page.locator("#subscriptions tbody tr td:nth-child(2)").all_inner_texts()
    assert streams.index(f"held/{HELD}") < streams.index(f"held/{FREE}")


async def page_shows_it(page: Any, tmp_path: Path) -> tuple[str, str, int] | None:
    """The dead row, the banner and the charts' gap, once the page shows them; a
    screenshot of the top of the page (ORLEANSPY_DASHBOARD_SHOTS=DIR keeps it)."""
    if page is None:
        return None
    from playwright.async_api import expect

    dead = page.locator("#silos tbody tr.dead")
    await expect(dead).to_have_count(1, timeout=5000)
    await expect(page.locator("#unowned tbody tr td.warn").first).to_be_visible(timeout=5000)
    await expect(page.locator("#banner.on")).to_be_visible(timeout=5000)
    keep = os.environ.get("ORLEANSPY_DASHBOARD_SHOTS")
    shots = Path(keep) if keep else tmp_path
    await page.screenshot(path=str(shots / "dashboard-dead-silo.png"),
                          clip={"x": 0, "y": 0, "width": 1280, "height": 520})
    gaps = int(await page.locator("#rate").get_attribute("data-gaps") or 0)
    return await dead.inner_text(), await page.locator("#banner").inner_text(), gaps
