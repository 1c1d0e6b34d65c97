"""The dashboard end to end: two clustered silo processes under load; one silo's page, opened
in headless Chromium (Debian's package, driven by playwright), shows the whole cluster —
both silos, the grain type with exactly the activations made, the stream queues — and a
screenshot is saved. Skipped with the reason when Chromium or playwright is missing, except
under CI, where that is a failure."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .silo_process import SiloLauncher, poll_until

CLUSTER = "dash"
GRAINS = 12
FAILING = 3
REMINDERS = 5
EVENTS = 30
PANELS = ("overview", "grains-panel", "streams-panel", "reminders-panel", "grain-panel",
          "spark-panel")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def need_browser() -> Any:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        reason = "playwright is not installed (the dev extra has it)"
    else:
        if CHROMIUM is not None:
            return async_playwright
        reason = "no chromium on PATH (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


async def _until_count(page: Any, selector: str, n: int) -> None:
    """Wait (bounded) until ``selector`` matches ``n`` elements. Through a locator: it runs
    in Playwright's own script world, which the page's Content-Security-Policy (no eval)
    does not govern, unlike a ``wait_for_function`` expression."""
    from playwright.async_api import expect

    await expect(page.locator(selector)).to_have_count(n, timeout=15000)


async def _until_text(page: Any, selector: str, prefix: str) -> None:
    """Wait (bounded) until the text of ``selector`` starts with ``prefix`` (a locator, as
    ``_until_count``)."""
    from playwright.async_api import expect

    await expect(page.locator(selector)).to_have_text(re.compile("^" + re.escape(prefix)),
                                                      timeout=15000)


async def test_one_silos_page_shows_the_whole_cluster(
    silo_launcher: SiloLauncher, tmp_path: Path,
) -> None:
    async_playwright = need_browser()
    config = tmp_path / "orleanspy.toml"
    config.write_text('[streams.s]\nadapter = "memory"\ntotal_queues = 4\n')
    common = ("--membership", "sqlite:membership.db", "--cluster-id", CLUSTER,
              "--storage", "memory", "--reminders", "sqlite:reminders.db", "--config", str(config))
    first = await silo_launcher.start(*common, "--dashboard-port", "0",
                                      app="tests.integration.cluster_app")
    second = await silo_launcher.start(*common, app="tests.integration.cluster_app")
    async with first.client(cluster_id=CLUSTER) as client:
        for k in range(GRAINS):
            spot: Any = client.get_grain("SpreadSpot", f"g{k}")
            await spot.hit()
        for k in range(FAILING):
            with pytest.raises(Exception, match="on purpose"):
                await client.get_grain("SpreadSpot", f"g{k}").bad_value("on purpose")
        for k in range(REMINDERS):
            await client.get_grain("Ticker", f"t{k}").remind()
        listener: Any = client.get_grain("Listener", "l")
        await listener.publish(EVENTS)
        await poll_until(listener.count, lambda n: n == EVENTS, timeout=20)

    async def api() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, \
                http.get(f"{first.dashboard}/api/cluster") as r:
            view: dict[str, Any] = await r.json()
            return view

    # Until the second silo is ACTIVE and the first has handed it its share, queues move
    # (a queue in hand-off is owned by neither): wait for both to own theirs.
    view = await poll_until(
        api, lambda v: len(v["silos"]) == 2 and len(v["reminders"]) == REMINDERS
        and len(v["streams"]) == 4 and len({q["silo"] for q in v["streams"]}) == 2,
        timeout=20)
    assert view["grains"]["SpreadSpot"] == GRAINS
    assert {s["silo"] for s in view["silos"]} == {first.silo_address, second.silo_address}
    assert sum(s["activations"] for s in view["silos"]) >= GRAINS
    assert all(s["loop_lag"] is not None for s in view["silos"])
    assert {q["queue"] for q in view["streams"]} == {f"s-{i}" for i in range(4)}
    methods = {(m["type"], m["method"]): m for m in view["methods"]}
    hit, bad = methods[("SpreadSpot", "hit")], methods[("SpreadSpot", "bad_value")]
    assert hit["calls"] == GRAINS and hit["errors"] == 0 and hit["p99"] is not None
    assert bad["calls"] == FAILING and bad["errors"] == FAILING
    assert methods[("Listener", "(stream delivery)")]["calls"] >= 1
    assert sum(q["delivered"] for q in view["streams"]) == EVENTS
    (sub,) = view["subscriptions"]
    assert (sub["stream"], sub["consumer"]) == ("feed/l", "Listener/l")
    assert sub["lag"] == 0 and sub["failing"] == 0
    (latency,) = view["stream_latency"]
    assert latency["provider"] == "s" and latency["publish_count"] == EVENTS
    assert latency["delivery_count"] >= 1 and latency["delivery_p99"] is not None
    assert sorted(r["grain"] for r in view["reminders"]) == [
        f"Ticker/t{k}" for k in range(REMINDERS)]
    assert {r["silo"] for r in view["reminders"]} <= {first.silo_address, second.silo_address}
    assert sum(s["reminders"] for s in view["silos"]) == REMINDERS
    async with aiohttp.ClientSession() as http, \
            http.get(f"{first.dashboard}/metrics") as r:
        metrics = await r.text()
    (own,) = [s["reminders"] for s in view["silos"] if s["silo"] == first.silo_address]
    (gauge,) = [s.value for f in text_string_to_metric_families(metrics) for s in f.samples
                if s.name == "orleanspy_reminders"]
    assert gauge == own
    assert view["spark"] == []  # no Spark session in this app: an empty panel

    shot = tmp_path / "dashboard.png"
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            await page.goto(f"{first.dashboard}/")
            await _until_count(page, "#silos tbody tr", 2)
            await _until_count(page, "#reminders tbody tr", REMINDERS)
            await _until_count(page, "#streams tbody tr", 4)
            grains = await page.locator("#grains tbody tr").all_inner_texts()
            silos = await page.locator("#silos tbody tr td:first-child").all_inner_texts()
            queues = await page.locator("#streams tbody tr").count()
            methods_text = await page.locator("#methods tbody tr").all_inner_texts()
            latency_text = await page.locator("#latency tbody tr").all_inner_texts()
            spark_text = await page.locator("#spark tbody").inner_text()
            state = await page.locator("#state").inner_text()
            # The grain lookup: one grain's page, read without activating it.
            await page.fill("#grain-type", "Listener")
            await page.fill("#grain-key", "l")
            await page.click("#grain-form button")
            await _until_text(page, "#grain-page > div:first-child", "Listener/l: active on ")
            grain_page = await page.locator("#grain-page").inner_text()
            await page.screenshot(path=str(shot), full_page=True)
            # Each page (panel) on its own; ORLEANSPY_DASHBOARD_SHOTS=DIR keeps them (docs/).
            keep = os.environ.get("ORLEANSPY_DASHBOARD_SHOTS")
            shots = Path(keep) if keep else tmp_path
            for panel in PANELS:
                await page.locator(f"#{panel}").screenshot(
                    path=str(shots / f"dashboard-{panel}.png"))
        finally:
            await browser.close()
    assert any(row.split("\t") == ["SpreadSpot", str(GRAINS)] for row in grains), grains
    assert set(silos) == {first.silo_address, second.silo_address}
    assert queues == 4
    rows = [r.split("\t") for r in methods_text]
    bad_row = next(r for r in rows if r[:2] == ["SpreadSpot", "bad_value"])
    assert bad_row[3:5] == [str(FAILING), str(FAILING)]  # calls, errors
    assert any(r[:2] == ["Listener", "(stream delivery)"] for r in rows)
    (latency_row,) = [r.split("\t") for r in latency_text]
    assert latency_row[:2] == ["s", str(EVENTS)]
    assert spark_text.strip() == "none"
    assert state.startswith("live, 2 active")
    assert "implicit subscriptions (namespaces): feed" in grain_page, grain_page
    assert "s:feed/l\timplicit\timplicit:Listener\t0\tfalse" in grain_page, grain_page
    assert "state: not shown" in grain_page
    assert errors == []  # the page's script ran without an error
    assert shot.stat().st_size > 10_000
    assert all((shots / f"dashboard-{panel}.png").stat().st_size > 2_000 for panel in PANELS)
    assert await first.terminate() == 0 and await second.terminate() == 0


async def test_with_a_secret_the_page_needs_the_token_in_its_fragment(
    silo_launcher: SiloLauncher,
) -> None:
    async_playwright = need_browser()
    silo = await silo_launcher.start("--dashboard-port", "0", secret="s3cret-for-the-page")
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page()
            await page.goto(f"{silo.dashboard}/")
            await _until_text(page, "#state", "unreachable")
            refused = await page.locator("#state").inner_text()
            await page.goto(f"{silo.dashboard}/#token=s3cret-for-the-page")
            await page.reload()
            await _until_text(page, "#state", "live")
            silos = await page.locator("#silos tbody tr").count()
        finally:
            await browser.close()
    assert "HTTP 401" in refused
    assert silos == 1
    assert await silo.terminate() == 0
