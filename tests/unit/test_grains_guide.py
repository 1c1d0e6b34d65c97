"""The examples of docs/grains.md work as written: each is read from the document and run.

Bounded by ``asyncio.timeout``; the timer runs on a ``FakeClock``, the interleaving is
observed with events, never sleeps.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from orleanspy.diagnostics import RequestQueued
from orleanspy.testing import EventRecorder, FakeClock, TestCluster

WAIT = 5.0
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "grains.md"


def example(defines: str) -> dict[str, Any]:
    """Run the guide's python example that contains ``defines``; its namespace."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    (code,) = [b for b in blocks if defines in b]
    namespace: dict[str, Any] = {"__name__": "grains_guide"}
    exec(compile(code, str(GUIDE), "exec"), namespace)
    return namespace


Poller = example("class Poller(")["Poller"]
_search = example("class Search(")
Search, Shard = _search["Search"], _search["Shard"]
Ledger = example("class Ledger(")["Ledger"]
_chat = example("class ChatRoom(")
ChatRoom, IChat = _chat["ChatRoom"], _chat["IChat"]
SCREEN = next(b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"),
                                    re.S) if "class Screen" in b)
TRACING = next(b for b in re.findall(r"```python\n(.*?)```",
                                     GUIDE.read_text(encoding="utf-8"), re.S)
               if "set_tracer_provider" in b)
PriceList = example("class PriceList(")["PriceList"]
#: ``GatedPriceList._load`` sets "loading", then waits for "loaded" (made by the test)
EVENTS: dict[str, asyncio.Event] = {}


class GatedPriceList(PriceList):
    async def _load(self) -> dict[str, float]:
        EVENTS["loading"].set()
        await EVENTS["loaded"].wait()
        return dict(await super()._load())


async def test_guide_timer_change_rests_after_a_failed_poll():
    clock = FakeClock()
    async with TestCluster(grains=[Poller], clock=clock) as cluster:
        ref = cluster.get_grain(Poller, "p")
        await ref.start()
        await clock.run_for(2.0)  # polls at 1 and 2; the second fails
        assert await ref.count() == 2
        await clock.run_for(29.5)
        assert await ref.count() == 2  # resting
        await clock.run_for(0.5)  # 30 s after the failed poll completed
        assert await ref.count() == 3
        await clock.run_for(2.0)  # every second again
        assert await ref.count() == 5


async def test_guide_predicate_lets_cached_lookups_past_a_refresh():
    EVENTS.update(loading=asyncio.Event(), loaded=asyncio.Event())
    async with TestCluster(grains=[GatedPriceList]) as cluster:
        ref = cluster.get_grain(GatedPriceList, "shop")  # through the gateway
        refresh = asyncio.create_task(ref.refresh())
        try:
            async with asyncio.timeout(WAIT):
                await EVENTS["loading"].wait()

                assert await ref.price("tea") is None  # interleaved: the refresh still runs
                assert not refresh.done()
                with EventRecorder(cluster.silo.diagnostics) as events:
                    fresh = asyncio.create_task(ref.price("tea", fresh=True))
                    await events.wait_event(RequestQueued, lambda e: e.method == "price")
                assert not fresh.done()

                EVENTS["loaded"].set()
                await refresh
                assert await fresh == 2.5
        finally:
            EVENTS["loaded"].set()  # a failure above leaves no turn waiting
            await asyncio.gather(refresh, return_exceptions=True)


async def test_guide_a_cancellable_scan_stops_when_its_caller_times_out():
    from orleanspy import GrainCallTimeoutError

    async with TestCluster(grains=[Search, Shard]) as cluster:
        ref = cluster.get_grain(Search, "s")  # through the gateway
        async with asyncio.timeout(WAIT):
            try:
                await ref.with_timeout(0.5).scan("tea")
                raise AssertionError("a 64-shard scan ended within 0.5 s")
            except GrainCallTimeoutError:
                pass
            # the next request runs once the scan has ended, and sees it abandoned
            ((query, done),) = await ref.abandoned_scans()
        assert query == "tea"
        assert 0 < done < 64


async def test_guide_a_ledger_scan_streams_and_holds_the_grain():
    async with TestCluster(grains=[Ledger]) as cluster:
        ref = cluster.client.get_grain(Ledger, "main")  # through the gateway
        async with asyncio.timeout(WAIT):
            found = [entry["id"] async for entry in ref.scan(5)]
            assert found == [i for i in range(10_000) if i % 7 >= 5]
            async with ref.scan(5) as entries:
                assert (await anext(entries))["id"] == 5
                size = asyncio.ensure_future(ref.size())
                assert (await anext(entries))["id"] == 6
                assert not size.done()  # held while the scan is read
            assert await size == 10_000


async def test_guide_a_chat_room_calls_its_members_screens():
    printed: list[str] = []
    shown = asyncio.Event()

    def fake_print(text: str) -> None:  # what the guide's Screen prints, kept
        printed.append(text)
        shown.set()

    async with TestCluster(grains=[ChatRoom]) as cluster:
        client = cluster.client
        lines = SCREEN.replace(
            "...\n", "await client.get_grain(ChatRoom, 'lobby').say('hi')\nawait shown.wait()\n")
        body = "".join(f"    {line}\n" for line in lines.splitlines())
        namespace: dict[str, Any] = {"ChatRoom": ChatRoom, "IChat": IChat, "client": client,
                                     "print": fake_print, "shown": shown}
        exec(compile(f"async def scenario():\n{body}    return me\n", str(GUIDE), "exec"),
             namespace)
        async with asyncio.timeout(WAIT):
            await namespace["scenario"]()
        assert printed == ["hi"]


def test_guide_tracing_prints_a_span_per_call(tmp_path: Path):
    """The guide's set-up, in a process of its own (a tracer provider is set once per
    process): a call through a TestCluster prints its client and server spans."""
    import subprocess
    import sys

    script = TRACING + """
import asyncio
from orleanspy import Grain
from orleanspy.testing import TestCluster

class Greeter(Grain):
    async def hello(self) -> str:
        return "hi"

async def main() -> None:
    async with TestCluster(grains=[Greeter]) as cluster:
        assert await cluster.client.get_grain(Greeter, "g").hello() == "hi"

asyncio.run(main())
provider.shutdown()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=GUIDE.parents[1])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count('"name": "Greeter.hello"') == 2  # client and server
    assert '"kind": "SpanKind.SERVER"' in done.stdout
