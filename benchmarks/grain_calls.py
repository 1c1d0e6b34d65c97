"""Grain-call benchmarks: orleanspy against hand-written asyncio baselines, in one run.

Usage::

    .venv/bin/python benchmarks/grain_calls.py            # table for humans
    .venv/bin/python benchmarks/grain_calls.py --json     # one JSON list on stdout
    .venv/bin/python benchmarks/grain_calls.py --runs 3   # three whole runs: ratio per run
    .venv/bin/python benchmarks/grain_calls.py --profile remote   # pyinstrument, our side

Figures (each: best of ``--trials`` for orleanspy and for its baseline, trials interleaved
so that machine noise hits both sides alike; see docs/benchmarks.md). With the figures the
script prints how to reproduce them: the command, the Python, the tree, the load average
when the run started and the trial settings (on stderr with ``--json``). The targets are
for three runs (``--runs 3``) on an otherwise idle machine:

1. ``local_sequential``: one caller awaiting ``ref.increment()`` on one grain of an
   in-process silo, vs one ``BareActor`` (asyncio.Queue + worker task).
2. ``local_concurrent_100x100``: 100 callers, caller i calling grain i, vs 100 BareActors.
3. ``activation_rate``: first calls to 10,000 new grains, one sequential caller, vs creating
   a BareActor (queue + task) per key and calling it once.
4. ``client_to_silo``: a ClusterClient with 100 calls in flight to a silo in another
   process over loopback, vs an asyncio-streams TCP echo server (same framing, msgpack
   decode/encode) in another process and a client matching responses by id.
   ``client_to_silo_vs_coalescing_echo``: the same calls against an echo that reads each
   chunk once and writes the frames of one loop pass together (``CoalescingEchoServer``).
5. ``suspending_1`` / ``suspending_100`` / ``suspending_10000``: a method that awaits once
   (``asyncio.sleep(0)``, as a method that writes state or calls another grain does) with 1,
   100 and 10,000 concurrent callers, each on its own grain, vs BareActors whose method
   awaits the same way.
6. ``get_grain_per_call``: ``silo.get_grain(Counter, key).increment()`` with the reference
   made for every call, one sequential caller, vs ``LockedActor``: the caller runs the
   method under the actor's ``asyncio.Lock`` (the one-turn-at-a-time ceiling in asyncio).
   ``local_sequential_vs_lock`` is figure 1 against the same ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from _common import (
    BareActor,
    CoalescingEchoClient,
    CoalescingEchoServer,
    EchoClient,
    EchoServer,
    Figure,
    LockedActor,
    progress,
    quiet_logging,
    report,
    run_callers,
)

from orleanspy import ClusterClient, Grain, Silo, SiloOptions, grain_type

# A trial: run the workload ``count`` times (per caller) and return its rate.
Trial = Callable[[int], Awaitable[float]]

CALLERS = 100
ACTIVATIONS = 10_000


@grain_type("BenchCounter")
class Counter(Grain):
    def __init__(self) -> None:
        self.count = 0

    async def increment(self) -> int:
        self.count += 1
        return self.count

    async def bump(self) -> int:
        await asyncio.sleep(0)
        self.count += 1
        return self.count


def _silo_options(gateway_port: int | None = None) -> SiloOptions:
    return SiloOptions(gateway_port=gateway_port, collection_quantum=3600.0)


# -- measurement ----------------------------------------------------------------------------
async def calibrate(trial: Trial, ncalls_per_count: int, seconds: float) -> int:
    """Warm up and return the count that makes one trial last about ``seconds``. The
    warm-up call of every caller comes first and is not timed: it activates orleanspy's
    grains (the baselines' actors exist already), so no trial counts activations."""
    await trial(1)
    count = max(1, 200 // ncalls_per_count)
    while True:
        rate = await trial(count)
        elapsed = count * ncalls_per_count / rate
        if elapsed >= 0.25:
            break
        count *= 4
    return max(1, int(count * seconds / elapsed))


async def compare(
    ours: Trial, base: Trial, *, ncallers: int, seconds: float, trials: int
) -> tuple[float, float]:
    """Best rate of each side over ``trials`` interleaved trials (after warm-up). The side
    that goes first alternates (ours, base, base, ours, ours, base, ...): neither side
    always runs right after the warm-up, a collection or the other's trial."""
    n_ours = await calibrate(ours, ncallers, seconds)
    n_base = await calibrate(base, ncallers, seconds)
    best_ours = best_base = 0.0
    for i in range(trials):
        if i % 2 == 0:
            best_ours = max(best_ours, await ours(n_ours))
            best_base = max(best_base, await base(n_base))
        else:
            best_base = max(best_base, await base(n_base))
            best_ours = max(best_ours, await ours(n_ours))
    return best_ours, best_base


# -- figures 1 and 2: local calls ---------------------------------------------------------------
async def local_calls(silo: Silo, ncallers: int, seconds: float, trials: int) -> Figure:
    refs = [silo.get_grain(Counter, f"local-{ncallers}-{i}") for i in range(ncallers)]
    ours_calls = [r.increment for r in refs]
    actors = [BareActor() for _ in range(ncallers)]
    base_calls = [partial(a.call, "increment") for a in actors]
    try:
        ours, base = await compare(
            partial(run_callers, ours_calls),
            partial(run_callers, base_calls),
            ncallers=ncallers, seconds=seconds, trials=trials,
        )
    finally:
        for a in actors:
            a.stop()
    if ncallers == 1:
        return Figure("local_sequential", ours, "calls/s", base, 1.0)
    return Figure(f"local_concurrent_{ncallers}x{ncallers}", ours, "calls/s", base, 1.0)


# -- figures 5 and 6: suspending methods, references per call, the lock ceiling ----------------
async def suspending_calls(silo: Silo, ncallers: int, seconds: float, trials: int) -> Figure:
    refs = [silo.get_grain(Counter, f"bump-{ncallers}-{i}") for i in range(ncallers)]
    actors = [BareActor() for _ in range(ncallers)]
    try:
        ours, base = await compare(
            partial(run_callers, [r.bump for r in refs]),
            partial(run_callers, [partial(a.call, "bump") for a in actors]),
            ncallers=ncallers, seconds=seconds, trials=trials,
        )
    finally:
        for a in actors:
            a.stop()
    target = 1.0 if ncallers <= CALLERS else 0.8
    return Figure(f"suspending_{ncallers}", ours, "calls/s", base, target,
                  f"{ncallers} callers, each on its own grain; the method awaits once")


async def lock_ceiling(silo: Silo, seconds: float, trials: int) -> list[Figure]:
    locked = LockedActor()
    ref = silo.get_grain(Counter, "cached")

    async def per_call() -> int:
        return int(await silo.get_grain(Counter, "per-call").increment())

    ours_per_call, base = await compare(
        partial(run_callers, [per_call]), partial(run_callers, [locked.increment]),
        ncallers=1, seconds=seconds, trials=trials,
    )
    ours_cached, base2 = await compare(
        partial(run_callers, [ref.increment]), partial(run_callers, [locked.increment]),
        ncallers=1, seconds=seconds, trials=trials,
    )
    return [
        Figure("get_grain_per_call", ours_per_call, "calls/s", base, 0.25,
               "reference made per call; baseline: the caller runs the method under a lock"),
        Figure("local_sequential_vs_lock", ours_cached, "calls/s", max(base, base2), 0.25,
               "bound method kept; baseline: the caller runs the method under a lock"),
    ]


# -- figure 3: activations ------------------------------------------------------------------
def _key_slices(n: int, callers: int, tag: str) -> list[list[str]]:
    return [[f"{tag}-{k}" for k in range(j, n, callers)] for j in range(callers)]


async def activation_trial_ours(n: int, callers: int, profiler: Any = None) -> float:
    silo = Silo(_silo_options(), grains=[Counter])
    await silo.start()
    try:
        slices = _key_slices(n, callers, "act")
        get_grain = silo.get_grain

        async def caller(keys: list[str]) -> None:
            for k in keys:
                await get_grain(Counter, k).increment()

        if profiler is not None:
            profiler.start()
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(s) for s in slices))
        rate = n / (time.perf_counter() - t0)
        if profiler is not None:
            profiler.stop()
        assert len(silo.catalog) == n, len(silo.catalog)
        return rate
    finally:
        await silo.stop()


async def activation_trial_base(n: int, callers: int) -> float:
    actors: dict[str, BareActor] = {}
    slices = _key_slices(n, callers, "act")

    async def caller(keys: list[str]) -> None:
        for k in keys:
            actor = actors.get(k)
            if actor is None:
                actor = actors[k] = BareActor()
            await actor.call("increment")

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(caller(s) for s in slices))
        return n / (time.perf_counter() - t0)
    finally:
        for a in actors.values():
            a.stop()
        await asyncio.gather(*(a.task for a in actors.values()), return_exceptions=True)


async def activations(n: int, callers: int, trials: int) -> Figure:
    await activation_trial_ours(min(n, 2000), callers)  # warm-up
    await activation_trial_base(min(n, 2000), callers)
    best_ours = best_base = 0.0
    for _ in range(trials):
        best_ours = max(best_ours, await activation_trial_ours(n, callers))
        best_base = max(best_base, await activation_trial_base(n, callers))
    mode = "1 sequential caller" if callers == 1 else f"{callers} concurrent callers"
    return Figure(
        "activation_rate", best_ours, "activations/s", best_base, 0.3,
        f"{n:,} new grains, {mode}",
    )


# -- figure 4: client -> silo over loopback -----------------------------------------------------
class Server:
    """A server in a child process (this script with ``--serve KIND``); stdin EOF stops it."""

    def __init__(self, kind: str, profile: bool = False) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", kind]
        if profile:
            cmd.append("--profile-server")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.stop()
            raise RuntimeError(f"{kind} server did not start (said {line!r})")
        self.port = int(line)

    def stop(self) -> None:
        proc = self.proc
        if proc.poll() is None:
            assert proc.stdin is not None
            with contextlib.suppress(OSError):
                proc.stdin.close()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def remote_calls(seconds: float, trials: int, ncallers: int = CALLERS) -> list[Figure]:
    silo_server = Server("silo")
    echo_server = Server("echo")
    tuned_server = Server("tuned")
    client = ClusterClient(gateways=[f"127.0.0.1:{silo_server.port}"])
    echo = EchoClient()
    tuned = CoalescingEchoClient()
    try:
        await client.connect()
        await echo.connect(echo_server.port)
        await tuned.connect(tuned_server.port)
        ours_calls = [client.get_grain(Counter, i).increment for i in range(ncallers)]
        base_calls = [partial(echo.call, "BenchCounter", i, "increment") for i in range(ncallers)]
        ours, base = await compare(
            partial(run_callers, ours_calls),
            partial(run_callers, base_calls),
            ncallers=ncallers, seconds=seconds, trials=trials,
        )
        tuned_calls = [partial(tuned.call, "BenchCounter", i, "increment")
                       for i in range(ncallers)]
        ours2, base2 = await compare(
            partial(run_callers, ours_calls),
            partial(run_callers, tuned_calls),
            ncallers=ncallers, seconds=seconds, trials=trials,
        )
    finally:
        await client.close()
        await echo.close()
        await tuned.close()
        silo_server.stop()
        echo_server.stop()
        tuned_server.stop()
    return [
        Figure("client_to_silo", ours, "calls/s", base, 0.5,
               f"{ncallers} calls in flight, loopback"),
        Figure("client_to_silo_vs_coalescing_echo", ours2, "calls/s", base2, 0.9,
               "as above; baseline: an echo that reads each chunk once and writes the frames "
               "of one loop pass with one write"),
    ]


async def serve(kind: str, profile: bool) -> None:
    """Child-process side of figure 4: print the port, serve until stdin closes."""
    quiet_logging()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)), daemon=True
    ).start()
    profiler = _profiler() if profile else None
    if kind == "silo":
        silo = Silo(_silo_options(gateway_port=0), grains=[Counter])
        await silo.start()
        print(silo.gateway.port, flush=True)
        if profiler is not None:
            profiler.start()
        await done.wait()
        if profiler is not None:
            profiler.stop()
        await silo.stop()
    else:
        server: Any = EchoServer() if kind == "echo" else CoalescingEchoServer()
        await server.start()
        print(server.port, flush=True)
        await done.wait()
        await server.close()
    if profiler is not None:
        sys.stderr.write("\n=== silo process (gateway side) ===\n")
        sys.stderr.write(profiler.output_text(unicode=False, color=False))


# -- profiling our side ---------------------------------------------------------------------
def _profiler() -> Any:
    try:
        from pyinstrument import Profiler
    except ImportError:  # pragma: no cover - dev dependency
        sys.exit("--profile needs pyinstrument (pip install pyinstrument)")
    return Profiler(interval=0.001, async_mode="disabled")


async def profile(which: str, seconds: float, callers: int) -> None:
    """Run only orleanspy's side of one figure under pyinstrument; report on stderr."""
    profiler = _profiler()
    if which in ("local", "concurrent"):
        n = 1 if which == "local" else CALLERS
        async with Silo(_silo_options(), grains=[Counter]) as silo:
            calls = [silo.get_grain(Counter, i).increment for i in range(n)]
            count = await calibrate(partial(run_callers, calls), n, seconds)
            profiler.start()
            rate = await run_callers(calls, count)
            profiler.stop()
    elif which == "activation":
        await activation_trial_ours(2000, callers)
        rate = await activation_trial_ours(ACTIVATIONS, callers, profiler)
    else:
        server = Server("silo", profile=True)
        client = ClusterClient(gateways=[f"127.0.0.1:{server.port}"])
        try:
            await client.connect()
            calls = [client.get_grain(Counter, i).increment for i in range(CALLERS)]
            count = await calibrate(partial(run_callers, calls), CALLERS, seconds)
            profiler.start()
            rate = await run_callers(calls, count)
            profiler.stop()
        finally:
            await client.close()
            server.stop()  # the silo process prints its own profile to stderr
    sys.stderr.write(f"\n=== {which}: {rate:,.0f} per second (benchmark process) ===\n")
    sys.stderr.write(profiler.output_text(unicode=False, color=False))


# -- main -----------------------------------------------------------------------------------
async def run(args: argparse.Namespace) -> list[Figure]:
    figures: list[Figure] = []
    only = set(args.only or ("local", "suspending", "activation", "remote"))
    if "local" in only:
        progress("local calls ...")
        async with Silo(_silo_options(), grains=[Counter]) as silo:
            figures.append(await local_calls(silo, 1, args.seconds, args.trials))
            progress("100 callers on 100 grains ...")
            figures.append(await local_calls(silo, CALLERS, args.seconds, args.trials))
    if "suspending" in only:
        async with Silo(_silo_options(), grains=[Counter]) as silo:
            for n in (1, CALLERS, 10_000):
                progress(f"suspending method, {n} callers ...")
                figures.append(await suspending_calls(silo, n, args.seconds, args.trials))
            progress("references per call and the lock ceiling ...")
            figures.extend(await lock_ceiling(silo, args.seconds, args.trials))
    if "activation" in only:
        progress("activations ...")
        figures.append(await activations(ACTIVATIONS, args.activation_callers, args.trials))
    if "remote" in only:
        progress("client -> silo over loopback ...")
        figures.extend(await remote_calls(args.seconds, args.trials))
    return figures


def setup(args: argparse.Namespace, load: tuple[float, float, float]) -> list[str]:
    """How to reproduce the figures: the command, the Python, the tree, the machine's load
    when the run started and the trial settings."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        commit = ""
    lines = [
        "reproduce: " + shlex.join([sys.executable, *sys.argv]) + f"   (in {os.getcwd()})",
        f"python {sys.version.split()[0]} ({sys.executable}); orleanspy "
        f"{commit or 'not a git checkout'} ({root}); {os.cpu_count()} CPUs; load average at "
        f"start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min)",
        f"each figure: the best of {args.trials} trial(s) of about {args.seconds:g} s per side, "
        "the sides interleaved, after a warm-up",
    ]
    if load[0] > 1.5:
        lines.append(f"the machine was busy (load {load[0]:.1f}): ratios move with other "
                     "processes; the targets are for an otherwise idle machine (load about 1) "
                     "and three runs (--runs 3)")
    return lines


def runs(args: argparse.Namespace) -> None:
    """``--runs N``: N whole runs one after another, each a fresh process of this script with
    the same options; every figure's ratio in each run, their median and range."""
    argv = [a for a in sys.argv[1:]]
    i = argv.index("--runs") if "--runs" in argv else -1
    if i >= 0:
        del argv[i:i + 2]
    argv = [a for a in argv if not a.startswith("--runs=") and a != "--json"]
    load = os.getloadavg()
    results: list[list[dict[str, Any]]] = []
    loads: list[float] = []
    for n in range(args.runs):
        loads.append(os.getloadavg()[0])
        progress(f"run {n + 1} of {args.runs} (load {loads[-1]:.2f}) ...")
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), *argv, "--json", "--in-runs"],
            stdout=subprocess.PIPE, text=True, check=True)
        results.append(json.loads(done.stdout))
    lines = [*setup(args, load), "load average (1 min) at the start of each run: "
             + ", ".join(f"{x:.2f}" for x in loads)]
    if args.json:
        json.dump(results, sys.stdout)
        sys.stdout.write("\n")
        for line in lines:
            progress(line)
        return
    names = [f["name"] for f in results[0]]
    w = max(len(n) for n in names)
    print(f"{'figure':<{w}}  " + "  ".join(f"run {n + 1:<3}" for n in range(args.runs))
          + "   median  (min-max)   target")
    for name in names:
        ratios = [f["ratio"] for run in results for f in run if f["name"] == name]
        target = TARGETS.get(name)
        met = "" if target is None else (
            f">= {target:g}x " + ("ok" if min(ratios) >= target else "MISSED"))
        print(f"{name:<{w}}  " + "  ".join(f"{r:>6.2f}x " for r in ratios)
              + f"  {statistics.median(ratios):>6.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
              + f"  {met}")
    for line in lines:
        print(line)


#: each figure's target ratio, for the summary of ``--runs``
TARGETS: dict[str, float] = {
    "local_sequential": 1.0, "local_concurrent_100x100": 1.0, "suspending_1": 1.0,
    f"suspending_{CALLERS}": 1.0, "suspending_10000": 0.8, "get_grain_per_call": 0.25,
    "local_sequential_vs_lock": 0.25, "activation_rate": 0.3, "client_to_silo": 0.5,
    "client_to_silo_vs_coalescing_echo": 0.9,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list, nothing else")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="target duration of one trial (default 2.0)")
    parser.add_argument("--trials", type=int, default=3, help="trials per side (best is kept)")
    parser.add_argument("--runs", type=int, default=1,
                        help="whole runs, one after another, each in a fresh process: every "
                        "figure's ratio per run, median and range (default 1; the targets "
                        "hold for 3)")
    parser.add_argument("--activation-callers", type=int, default=1,
                        help="concurrent callers for the activation figure (default 1)")
    parser.add_argument("--only", action="append",
                        choices=["local", "suspending", "activation", "remote"],
                        help="run only these figures (repeatable): local = figures 1-2, "
                        "activation = 3, remote = 4, suspending = 5-6 (default: all)")
    parser.add_argument("--profile", choices=["local", "concurrent", "activation", "remote"],
                        help="profile orleanspy's side of one figure instead (stderr)")
    parser.add_argument("--serve", choices=["silo", "echo", "tuned"], help=argparse.SUPPRESS)
    parser.add_argument("--profile-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--in-runs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.profile_server))
        return
    quiet_logging()
    if args.profile:
        asyncio.run(profile(args.profile, args.seconds, args.activation_callers))
        return
    if args.runs > 1:
        runs(args)
        return
    load = os.getloadavg()
    t0 = time.perf_counter()
    figures = asyncio.run(run(args))
    progress(f"done in {time.perf_counter() - t0:.0f} s")
    report(figures, args.json)
    if not args.in_runs:  # (``--runs`` says it once for all its runs)
        for line in setup(args, load):
            (progress if args.json else print)(line)


if __name__ == "__main__":
    main()
