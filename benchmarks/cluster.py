"""Cross-silo grain calls between two silo processes, against a raw TCP msgpack echo.

Usage::

    .venv/bin/python benchmarks/cluster.py            # table for humans
    .venv/bin/python benchmarks/cluster.py --json     # one JSON list on stdout
    .venv/bin/python benchmarks/cluster.py --profile  # pyinstrument of both silos (stderr)

Two child processes form a cluster over a SQLite membership table in a temporary folder:

* silo B hosts the target grains (activated locally at start: prefer-local placement) and an
  asyncio-streams echo server (``_common.EchoServer``: 4-byte length + msgpack, decodes the
  request, answers ``[2, id, True, value]``);
* silo A is the caller: it calls B's grains through the directory and the silo-to-silo
  transport, and runs the echo client (``_common.EchoClient``) against B's echo server, so
  both sides of every ratio cross the same two processes in the same run.

Figures (best of ``--trials``, trials interleaved): ``cross_silo_sequential`` (one caller)
against the echo with one request in flight, and ``cross_silo_100_in_flight`` (100 callers,
caller i calling grain i) against the echo with 100 requests in flight. Targets: the latter
at least 0.5x the echo and at least 20,000 calls/s. ``..._vs_coalescing_echo`` compares the
same 100 callers with a tuned echo (``_common.CoalescingEchoServer``: one read per chunk,
the frames of one loop pass written together), target 0.8x.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

from _common import (
    CoalescingEchoClient,
    CoalescingEchoServer,
    EchoClient,
    EchoServer,
    Figure,
    progress,
    quiet_logging,
    report,
    run_callers,
)

from orleanspy import Grain, Silo, SiloOptions, grain_type

CALLERS = 100
MIN_RATE = 20_000.0


@grain_type("BenchTarget")
class Target(Grain):
    def __init__(self) -> None:
        self.count = 0

    async def increment(self) -> int:
        self.count += 1
        return self.count


def _options(membership: str) -> SiloOptions:
    return SiloOptions(
        membership=membership, port=0, gateway_port=None, cluster_id="bench",
        collection_quantum=3600.0, probe_period=2.0, i_am_alive_period=2.0,
        table_refresh_period=1.0,
    )


def _profiler() -> Any:
    from pyinstrument import Profiler

    return Profiler(interval=0.001, async_mode="disabled")


# -- child processes --------------------------------------------------------------------------
async def serve_b(membership: str, profile: bool) -> None:
    """Silo B: host the targets and the echo server until stdin closes."""
    quiet_logging()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)), daemon=True
    ).start()
    async with Silo(_options(membership), grains=[Target]) as silo:
        print(json.dumps({"started": True}), flush=True)
        assert silo.cluster is not None
        # Activate the targets once A has joined: no view change moves their entries later.
        await silo.cluster.wait_for_view(lambda s: len(s.active_silos) == 2, 30)
        for i in range(CALLERS):
            await silo.get_grain(Target, i).increment()  # placed here (prefer-local)
        echo = EchoServer()
        await echo.start()
        tuned = CoalescingEchoServer()
        await tuned.start()
        print(json.dumps({"echo_port": echo.port, "tuned_port": tuned.port}), flush=True)
        profiler = _profiler() if profile else None
        if profiler is not None:
            profiler.start()
        await done.wait()
        if profiler is not None:
            profiler.stop()
            sys.stderr.write("\n=== silo B (callee) ===\n")
            sys.stderr.write(profiler.output_text(unicode=False, color=False))
        await echo.close()
        await tuned.close()


async def _best(ours: Any, base: Any, ncallers: int, seconds: float,
                trials: int) -> tuple[float, float]:
    async def count_for(fn: Any) -> int:
        count = max(1, 200 // ncallers)
        while True:
            rate = await fn(count)
            elapsed = count * ncallers / rate
            if elapsed >= 0.25:
                return max(1, int(count * seconds / elapsed))
            count *= 4

    n_ours, n_base = await count_for(ours), await count_for(base)
    best_ours = best_base = 0.0
    for _ in range(trials):
        best_ours = max(best_ours, await ours(n_ours))
        best_base = max(best_base, await base(n_base))
    return best_ours, best_base


async def drive_a(membership: str, seconds: float, trials: int, profile: bool) -> None:
    """Silo A: join, read B's echo port from stdin (B is ready), measure, print JSON."""
    quiet_logging()
    async with Silo(_options(membership), grains=[Target]) as silo:
        assert silo.cluster is not None
        await silo.cluster.wait_for_view(lambda s: len(s.active_silos) == 2, 30)
        line = await asyncio.to_thread(sys.stdin.readline)
        ports = json.loads(line)
        echo_port, tuned_port = int(ports["echo_port"]), int(ports["tuned_port"])
        refs = [silo.get_grain(Target, i) for i in range(CALLERS)]
        for r in refs:
            await r.increment()  # warm the directory cache
        b_address = silo.cluster.directory.cache.get(refs[0].grain_id)
        assert b_address is not None and b_address != silo.address, "targets must be on B"
        echo = EchoClient()
        await echo.connect(echo_port)
        tuned = CoalescingEchoClient()
        await tuned.connect(tuned_port)
        results: dict[str, Any] = {}
        try:
            profiler = _profiler() if profile else None
            if profiler is not None:
                profiler.start()
            for name, n in (("sequential", 1), ("in_flight", CALLERS)):
                ours_calls = [r.increment for r in refs[:n]]
                base_calls = [partial(echo.call, "BenchTarget", i, "increment")
                              for i in range(n)]
                results[name] = await _best(
                    partial(run_callers, ours_calls), partial(run_callers, base_calls),
                    n, seconds, trials,
                )
            tuned_calls = [partial(tuned.call, "BenchTarget", i, "increment")
                           for i in range(CALLERS)]
            results["in_flight_tuned"] = await _best(
                partial(run_callers, [r.increment for r in refs]),
                partial(run_callers, tuned_calls), CALLERS, seconds, trials,
            )
            if profiler is not None:
                profiler.stop()
                sys.stderr.write("\n=== silo A (caller) ===\n")
                sys.stderr.write(profiler.output_text(unicode=False, color=False))
        finally:
            await echo.close()
            await tuned.close()
        print(json.dumps(results), flush=True)


# -- the benchmark process ------------------------------------------------------------------
def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def run(args: argparse.Namespace) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="orleanspy-bench-") as tmp:
        membership = f"sqlite:{Path(tmp) / 'membership.db'}"
        extra = ["--profile"] if args.profile else []
        progress("starting silo B (targets + echo server) ...")
        b = _child("--serve", "b", "--membership", membership, *extra)
        a: subprocess.Popen[str] | None = None
        try:
            assert b.stdout is not None
            line = b.stdout.readline()
            if not line.startswith("{"):
                raise RuntimeError(f"silo B did not start (said {line!r})")
            progress("starting silo A; A calls B's grains and B's echo server ...")
            a = _child("--serve", "a", "--membership", membership, "--seconds",
                       str(args.seconds), "--trials", str(args.trials), *extra)
            line = b.stdout.readline()  # B saw A join and activated its grains
            if not line.startswith("{"):
                raise RuntimeError(f"silo B failed (said {line!r})")
            out, _ = a.communicate(line, timeout=600)
            lines = [x for x in out.splitlines() if x.startswith("{")]
            if a.returncode != 0 or not lines:
                raise RuntimeError(f"silo A failed (exit {a.returncode}): {out!r}")
            results = json.loads(lines[-1])
        finally:
            if a is not None and a.poll() is None:
                a.kill()
            if b.poll() is None:
                assert b.stdin is not None
                with contextlib.suppress(OSError):
                    b.stdin.close()
                try:
                    b.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    b.kill()
    seq, flight = results["sequential"], results["in_flight"]
    return [
        Figure("cross_silo_sequential", seq[0], "calls/s", seq[1], 0.5,
               "one caller in silo A, grain in silo B; baseline: echo, 1 in flight"),
        Figure("cross_silo_100_in_flight", flight[0], "calls/s", flight[1], 0.5,
               f"100 callers in A, 100 grains in B; baseline: echo, 100 in flight; "
               f"absolute target >= {MIN_RATE:,.0f} calls/s: "
               + ("ok" if flight[0] >= MIN_RATE else "MISSED")),
        Figure("cross_silo_100_in_flight_vs_coalescing_echo", results["in_flight_tuned"][0],
               "calls/s", results["in_flight_tuned"][1], 0.8,
               "as above; baseline: an echo that reads each chunk once and writes the frames "
               "of one loop pass with one write"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list, nothing else")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="target duration of one trial (default 2.0)")
    parser.add_argument("--trials", type=int, default=3, help="trials per side (best is kept)")
    parser.add_argument("--profile", action="store_true",
                        help="profile both silos with pyinstrument (stderr)")
    parser.add_argument("--serve", choices=["a", "b"], help=argparse.SUPPRESS)
    parser.add_argument("--membership", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "b":
        asyncio.run(serve_b(args.membership, args.profile))
        return
    if args.serve == "a":
        asyncio.run(drive_a(args.membership, args.seconds, args.trials, args.profile))
        return
    quiet_logging()
    t0 = time.perf_counter()
    figures = run(args)
    progress(f"done in {time.perf_counter() - t0:.0f} s")
    report(figures, args.json)


if __name__ == "__main__":
    main()
