"""Memory of a pulling agent with a consumer far behind: bounded by the cache, not the backlog.

Usage::

    .venv/bin/python benchmarks/stream_memory.py             # 500,000 events apart
    .venv/bin/python benchmarks/stream_memory.py -n 100000   # quicker
    .venv/bin/python benchmarks/stream_memory.py --json

One durable stream (``SqliteAdapterFactory``, one queue, default ``cache_size``, spilling and
``min`` flow control) with two consumer grains. The slow one takes its first event and then
waits in its handler until the fast one has received all ``N`` events, so the two are ``N``
events apart: the slow consumer is spilled (served from the queue) and the queue, not the
silo, holds its backlog. Then the slow consumer is let go and catches up.

Figures (process RSS, sampled every 50 ms): the growth over the RSS measured after start-up
and a warm-up (the baseline: the same silo, the same two consumers, before the backlog), at
its peak while the consumers are ``N`` apart, at the peak of the whole run, and at the end;
and the cache items alive in the process while they are apart, against the cache's own.
The bound is 50 MiB whatever ``N`` is: a cache of 4096 containers is a few MiB, and the
SQLite page cache is bounded too. Each consumer also checks that it got every event once,
in order.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import progress, quiet_logging

from orleanspy import Grain, Silo, SiloOptions, grain_type, stream_handler
from orleanspy.streams.adapters import SqliteAdapterFactory
from orleanspy.streams.cache import CacheItem
from orleanspy.streams.options import StreamProviderOptions
from orleanspy.streams.provider import PersistentStreamProvider

NS = "mem"
KEY = "s"
BODY = "x" * 64
PRODUCERS = 100
BOUND_MIB = 50.0
SAMPLE_EVERY = 0.05
TIMEOUT = 900.0


class Tally:
    """One consumer's count; checks that event ``i`` comes after ``i - 1``."""

    def __init__(self, expect: int) -> None:
        self.expect = expect
        self.count = 0
        self.errors = 0
        self.next: dict[int, int] = {}
        self.done = asyncio.get_running_loop().create_future()
        self.first = asyncio.get_running_loop().create_future()

    def add(self, item: list[Any]) -> None:
        p, i = item[0], item[1]
        if self.next.get(p, 0) != i:
            self.errors += 1
        self.next[p] = i + 1
        self.count += 1
        if not self.first.done():
            self.first.set_result(None)
        if self.count == self.expect and not self.done.done():
            self.done.set_result(None)


TALLIES: dict[str, Tally] = {}
GATE: dict[str, asyncio.Event] = {}


@grain_type("MemBenchProducer")
class Producer(Grain):
    async def produce(self, producer: int, count: int) -> None:
        on_next = self.get_stream_provider("p").get_stream(NS, KEY).on_next
        for i in range(count):
            await on_next([producer, i, BODY])


@grain_type("MemBenchConsumer")
class Consumer(Grain):
    async def subscribe(self) -> None:
        await self.get_stream_provider("p").get_stream(NS, KEY).subscribe(self.on_event)

    @stream_handler
    async def on_event(self, item: list[Any], token: Any) -> None:
        tally = TALLIES[self.key]
        if self.key == "slow" and tally.count == 1:
            await GATE["slow"].wait()  # far behind: waits in its handler, spilled
        tally.add(item)


def live_items() -> int:
    """Cache items alive in the process (the cache's own and any others kept reachable)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is CacheItem)


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def publish(silo: Silo, n: int, first: int = 0) -> None:
    per = n // PRODUCERS
    await asyncio.gather(*(
        silo.get_grain(Producer, f"p{p}").produce(p + first, per) for p in range(PRODUCERS)
    ))


async def run(n: int, folder: Path) -> dict[str, float]:
    n = n // PRODUCERS * PRODUCERS
    provider = PersistentStreamProvider(
        SqliteAdapterFactory(str(folder / "streams.db")), StreamProviderOptions(total_queues=1)
    )
    silo = Silo(SiloOptions(gateway_port=None), grains=[Producer, Consumer],
                stream_providers={"p": provider})
    await silo.start()
    try:
        # Warm-up: the same two consumers on the same stream, PRODUCERS * 100 events in step.
        warm = PRODUCERS * 100
        TALLIES["fast"], TALLIES["slow"] = Tally(warm), Tally(warm)
        GATE["slow"] = asyncio.Event()
        GATE["slow"].set()
        for key in ("fast", "slow"):
            await silo.get_grain(Consumer, key).subscribe()
        await publish(silo, warm, first=1000)
        async with asyncio.timeout(TIMEOUT):
            await asyncio.gather(TALLIES["fast"].done, TALLIES["slow"].done)
        gc.collect()
        start = rss_mib()
        samples: list[float] = [start]

        async def sampler() -> None:
            while True:
                samples.append(rss_mib())
                await asyncio.sleep(SAMPLE_EVERY)

        task = asyncio.get_running_loop().create_task(sampler())
        fast, slow = Tally(n), Tally(n)
        TALLIES["fast"], TALLIES["slow"] = fast, slow
        GATE["slow"] = asyncio.Event()
        t0 = time.perf_counter()
        progress(f"publishing {n:,} events; the slow consumer waits after its first one")
        async with asyncio.timeout(TIMEOUT):
            await publish(silo, n)
            await fast.done
        t_apart = time.perf_counter() - t0
        apart = max(samples)
        agent = next(iter(provider.agents.values()))
        alive, cached = live_items(), len(agent.cache)
        progress(f"the fast consumer has all {n:,} ({t_apart:.1f} s); the slow one has "
                 f"{slow.count:,}: letting it go")
        GATE["slow"].set()
        async with asyncio.timeout(TIMEOUT):
            await slow.done
        t_caught = time.perf_counter() - t0 - t_apart
        gc.collect()
        await asyncio.sleep(0.2)
        end = rss_mib()
        task.cancel()
        peak = max(samples)
        for who, tally in (("fast", fast), ("slow", slow)):
            if tally.count != n or tally.errors:
                raise RuntimeError(f"{who}: {tally.count} of {n}, {tally.errors} out of order")
        return {"n": n, "start": start, "apart": apart, "peak": peak, "end": end,
                "t_apart": t_apart, "t_caught": t_caught, "alive": alive, "cached": cached}
    finally:
        await silo.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=500_000, help="events between the consumers")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    quiet_logging()
    with tempfile.TemporaryDirectory() as tmp:
        r = asyncio.run(run(args.n, Path(tmp)))
    rows = [
        ("rss_growth_apart", r["apart"] - r["start"], f"peak while {r['n']:,} events apart"),
        ("rss_growth_peak", r["peak"] - r["start"], "peak of the whole run"),
        ("rss_growth_end", r["end"] - r["start"], "after the slow consumer caught up"),
    ]
    if args.json:
        import json
        json.dump([{"name": name, "value": round(v, 1), "unit": "MiB",
                    "baseline": round(r["start"], 1), "bound": BOUND_MIB} for name, v, _ in rows],
                  sys.stdout)
        sys.stdout.write("\n")
        return
    print(f"RSS at start (after warm-up): {r['start']:.1f} MiB; bound: start + {BOUND_MIB:g} MiB")
    for name, v, note in rows:
        ok = "ok" if v <= BOUND_MIB else "MISSED"
        print(f"{name:<18} {v:>7.1f} MiB  ({(r['start'] + v) / r['start']:.2f}x start)  "
              f"<= {BOUND_MIB:g} {ok}   {note}")
    print(f"cache items alive while apart: {r['alive']:,} (the cache holds {r['cached']:,})")
    print(f"fast consumer: {r['n'] / r['t_apart']:,.0f} events/s; slow consumer caught up in "
          f"{r['t_caught']:.1f} s")


if __name__ == "__main__":
    main()
