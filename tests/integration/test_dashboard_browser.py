"""The dashboard end to end: two clustered silo processes under load; one silo's page, opened
in headless Chromium (Debian's package, driven by playwright), shows the whole cluster —
both silos, the grain type with exactly the activations made, the stream queues — and a
screenshot is saved. Skipped with the reason when Chromium or playwright is missing, except
under CI, where that is a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from .silo_process import SiloLauncher, poll_until

CLUSTER = "dash"
GRAINS = 12
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


async def test_one_silos_page_shows_the_whole_cluster(
    silo_launcher: SiloLauncher, tmp_path: Path,
) -> None:
    async_playwright = need_browser()
    config = tmp_path / "orleanspy.toml"
    config.write_text('[streams.s]\nadapter = "memory"\ntotal_queues = 4\n')
    common = ("--membership", "sqlite:membership.db", "--cluster-id", CLUSTER,
              "--storage", "memory", "--reminders", "memory", "--config", str(config))
    first = await silo_launcher.start(*common, "--dashboard-port", "0",
                                      app="tests.integration.cluster_app")
    second = await silo_launcher.start(*common, app="tests.integration.cluster_app")
    async with first.client(cluster_id=CLUSTER) as client:
        for k in range(GRAINS):
            spot: Any = client.get_grain("SpreadSpot", f"g{k}")
            await spot.hit()

    async def api() -> dict[str, Any]:
        async with aiohttp.ClientSession() as http, \
                http.get(f"{first.dashboard}/api/cluster") as r:
            view: dict[str, Any] = await r.json()
            return view

    view = await poll_until(api, lambda v: len(v["silos"]) == 2, timeout=20)
    assert view["grains"]["SpreadSpot"] == GRAINS
    assert {s["silo"] for s in view["silos"]} == {first.silo_address, second.silo_address}
    assert sum(s["activations"] for s in view["silos"]) >= GRAINS
    assert {q["queue"] for q in view["streams"]} == {f"s-{i}" for i in range(4)}

    shot = tmp_path / "dashboard.png"
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            await page.goto(f"{first.dashboard}/")
            await page.wait_for_function(
                "document.querySelectorAll('#silos tbody tr').length === 2", timeout=15000)
            grains = await page.locator("#grains tbody tr").all_inner_texts()
            silos = await page.locator("#silos tbody tr td:first-child").all_inner_texts()
            queues = await page.locator("#streams tbody tr").count()
            state = await page.locator("#state").inner_text()
            await page.screenshot(path=str(shot), full_page=True)
        finally:
            await browser.close()
    assert any(row.split("\t") == ["SpreadSpot", str(GRAINS)] for row in grains), grains
    assert set(silos) == {first.silo_address, second.silo_address}
    assert queues == 4
    assert state.startswith("live, 2 silo(s)")
    assert shot.stat().st_size > 10_000
    assert await first.terminate() == 0 and await second.terminate() == 0
