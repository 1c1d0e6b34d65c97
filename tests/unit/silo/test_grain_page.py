"""The grain page (``/api/grains/TYPE/KEY``): a grain that is not active reads "not active"
and is still not activated after the lookup; an active one shows its silo, since when, its
mailbox, its type's method figures, its reminder rows and its stream subscriptions (explicit
and implicit); its state only when the silo enables it, from memory when active and from
storage when not, cut at the cap."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.grains.host import DeactivationReason
from orleanspy.grains.state import persistent_state
from orleanspy.ids import GrainId
from orleanspy.runtime import grain_report
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from orleanspy.streams.provider import implicit_namespaces, implicit_subscription
from orleanspy.testing import TestCluster
from silo.dashboard.app import OpsServer

WAIT = 10.0
DELIVERED: list[asyncio.Event] = []


@dataclass
class PageState:
    blob: str = ""


@implicit_subscription("imp")
class Page(Grain):
    data = persistent_state(PageState)

    async def touch(self, blob: str = "") -> str:
        self.data.value.blob = blob
        await self.data.write()
        return str(self.silo.address)

    async def remind(self) -> None:
        await self.register_reminder("nightly", 3600.0, 3600.0)

    async def receive_reminder(self, name: str, status: Any) -> None:
        pass

    async def follow(self, key: str) -> None:
        stream = self.get_stream_provider("s").get_stream("news", key)
        await stream.subscribe(self._on_news)

    async def _on_news(self, item: Any, token: Any) -> None:
        DELIVERED[0].set()

    async def on_next(self, item: Any, token: Any) -> None:  # implicit "imp"
        pass

    async def publish(self, key: str) -> None:
        await self.get_stream_provider("s").get_stream("news", key).on_next("hello")


def _grain_id(key: str) -> GrainId:
    return GrainId("Page", key)


def _activations(cluster: TestCluster, key: str) -> list[Any]:
    return [s.catalog.get(_grain_id(key)) for s in cluster.silos
            if s.catalog.get(_grain_id(key)) is not None]


async def _get(server: OpsServer, path: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, \
            http.get(f"http://{server.address}{path}") as response:
        body: dict[str, Any] = await response.json()
        return response.status, body


async def test_the_grain_page_reads_without_activating(tmp_path: Any) -> None:
    DELIVERED[:] = [asyncio.Event()]
    factory = MemoryAdapterFactory()

    def providers() -> dict[str, Any]:
        return {"s": PersistentStreamProvider(factory, StreamProviderOptions(
            total_queues=2, pull_period=0.01))}

    cluster = TestCluster([Page], silos=2, stream_providers=providers,
                          options=SiloOptions(gc_freeze=False, minimum_reminder_period=1.0))
    await cluster.start()
    server = OpsServer(cluster.silos[0])
    await server.start()
    try:
        status, page = await _get(server, "/api/grains/Page/nobody")
        assert status == 200, page
        assert page["active"] is False and page["silo"] is None
        assert page["state"] is None and page["reminders"] == []
        assert page["implicit_namespaces"] == ["imp"]
        assert _activations(cluster, "nobody") == []  # the lookup activated nothing
        for silo in cluster.silos:
            assert await silo.cluster.directory.lookup(_grain_id("nobody")) is None

        status, page = await _get(server, "/api/grains/Pagee/a")
        assert status == 404 and "Page" in page["error"]

        before = time.time()
        # placed on the second silo (prefer-local): the first, asked, reads it over the wire
        grain = cluster.silos[1].get_grain("Page", "a")
        where = await grain.touch("x")
        assert where == str(cluster.silos[1].address)
        await grain.remind()
        await grain.follow("k1")
        await grain.publish("k1")
        async with asyncio.timeout(WAIT):
            await DELIVERED[0].wait()
        status, page = await _get(server, "/api/grains/Page/a")
        assert status == 200, page
        assert page["active"] is True and page["silo"] == where
        assert before - 1.0 <= page["since"] <= time.time()
        assert page["mailbox"]["queued"] == 0 and page["mailbox"]["capacity"] > 0
        calls = {m["method"]: m["calls"] for m in page["methods"]}
        assert calls["touch"] >= 1 and calls["follow"] >= 1
        assert [r["name"] for r in page["reminders"]] == ["nightly"]
        (sub,) = [s for s in page["subscriptions"] if s["kind"] == "explicit"]
        assert sub["provider"] == "s" and "k1" in sub["stream"]
        assert page["state"] is None  # the silo does not show state
        assert len(_activations(cluster, "a")) == 1
    finally:
        await server.stop()
        await cluster.stop()


async def test_state_only_when_enabled_from_memory_or_storage_and_capped() -> None:
    silo = Silo(SiloOptions(gateway_port=None, gc_freeze=False, grain_page_state=True),
                grains=[Page])
    await silo.start()
    server = OpsServer(silo)
    await server.start()
    try:
        big = "y" * (grain_report.GRAIN_STATE_CAP + 100)
        await silo.get_grain("Page", "big").touch(big)
        status, page = await _get(server, "/api/grains/Page/big")
        assert status == 200 and page["active"] is True and page["silo"] == str(silo.address)
        (state,) = page["state"]
        assert state["source"] == "memory" and state["truncated"] is True
        assert len(state["json"].encode()) == grain_report.GRAIN_STATE_CAP
        assert state["bytes"] > grain_report.GRAIN_STATE_CAP

        act = silo.catalog.get(_grain_id("big"))
        assert act is not None
        act.deactivate(DeactivationReason.REQUESTED)
        await act.wait_deactivated()
        status, page = await _get(server, "/api/grains/Page/big")
        assert page["active"] is False
        (state,) = page["state"]
        assert state["source"] == "storage" and state["truncated"] is True
        assert silo.catalog.get(_grain_id("big")) is None  # read from storage, not activated

        status, page = await _get(server, "/api/grains/Page/never")
        assert page["state"][0]["stored"] is False and page["state"][0]["json"] is None
        assert silo.catalog.get(_grain_id("never")) is None
    finally:
        await server.stop()
        await silo.stop()


def test_the_implicit_attribute_is_the_streams_one() -> None:
    assert grain_report.implicit_namespaces_of(type("I", (), {"cls": Page})) == list(
        implicit_namespaces(Page)) == ["imp"]


def test_small_state_is_whole_and_unrepresentable_state_says_why() -> None:
    small = grain_report.state_json("s", {"a": [1, 2], "b": {1, 2}}, "memory")
    assert small["json"] == '{"a": [1, 2], "b": [1, 2]}' and small["truncated"] is False
    bad = grain_report.state_json("s", {(1, 2): "tuple key"}, "memory")
    assert bad["json"] is None and "JSON" in bad["error"]


async def test_the_grain_api_asks_for_the_secret_and_names_a_bad_key() -> None:
    silo = Silo(SiloOptions(gateway_port=None, gc_freeze=False, secret="s3cret-s3cret"),
                grains=[Page])
    await silo.start()
    server = OpsServer(silo)
    await server.start()
    base = f"http://{server.address}/api/grains/Page"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/x") as r:
                assert r.status == 401
            auth = {"Authorization": "Bearer s3cret-s3cret"}
            async with http.get(f"{base}/x", headers=auth) as r:
                assert r.status == 200 and (await r.json())["active"] is False
            async with http.get(f"{base}/x?key_type=int", headers=auth) as r:
                assert r.status == 400 and "'x'" in (await r.json())["error"]
            async with http.get(f"{base}/7?key_type=str", headers=auth) as r:
                assert (await r.json())["key"] == "7"
        assert silo.catalog.get(_grain_id("x")) is None
    finally:
        await server.stop()
        await silo.stop()
