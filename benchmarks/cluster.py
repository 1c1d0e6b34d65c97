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

``client_to_remote_grain_100_in_flight``: a third process runs a ``ClusterClient`` whose only
gateway is silo A's, with 100 calls in flight to the grains that live on silo B (activated
there before A joins the calls: A hosts none of them, checked at the end), so every call is
forwarded by A. Baseline in the same run, through the same processes: a two-hop coalescing
echo, client -> ``_common.CoalescingRelay`` in silo A's process -> the coalescing echo in
silo B's. Target 0.8x. With it, the CPU time each of the three processes (client, gateway
silo A, callee silo B) spends per call, ours and the baseline's (``/proc/<pid>/stat`` utime +
stime around ``FORWARDED_CALLS`` calls, the least of ``--trials``), printed after the table
(``--json``: in the row's note).

Reproduce a figure on an idle machine (load about 1), rows interleaved within the run::

    for i in 1 2 3; do .venv/bin/python benchmarks/cluster.py; done
    .venv/bin/python benchmarks/cluster.py --only forwarded   # the forwarded-call row alone
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
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
    CoalescingRelay,
    EchoClient,
    EchoServer,
    Figure,
    progress,
    quiet_logging,
    report,
    run_callers,
)

from orleanspy import ClusterClient, Grain, Silo, SiloOptions, grain_type

CALLERS = 100
#: Calls measured for the gateway silo's CPU time per forwarded call.
FORWARDED_CALLS = 20_000
MIN_RATE = 20_000.0


@grain_type("BenchTarget")
class Target(Grain):
    def __init__(self) -> None:
        self.count = 0

    async def increment(self) -> int:
        self.count += 1
        return self.count


def _options(membership: str, gateway: bool = False) -> SiloOptions:
    return SiloOptions(
        membership=membership, port=0, gateway_port=0 if gateway else None,
        cluster_id="bench",
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
        print(json.dumps({"echo_port": echo.port, "tuned_port": tuned.port,
                          "pid": os.getpid()}), flush=True)
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


async def drive_a(membership: str, seconds: float, trials: int, profile: bool,
                  only: str | None) -> None:
    """Silo A: join, read B's echo ports from stdin (B is ready), measure the cross-silo rows
    (unless ``only`` is "forwarded"), print JSON; then serve as the gateway silo of the
    forwarded-call row (its gateway, and a relay to B's coalescing echo) until stdin closes."""
    quiet_logging()
    async with Silo(_options(membership, gateway=True), grains=[Target]) as silo:
        assert silo.cluster is not None and silo.gateway is not None
        await silo.cluster.wait_for_view(lambda s: len(s.active_silos) == 2, 30)
        line = await asyncio.to_thread(sys.stdin.readline)
        ports = json.loads(line)
        echo_port, tuned_port = int(ports["echo_port"]), int(ports["tuned_port"])
        refs = [silo.get_grain(Target, i) for i in range(CALLERS)]
        for r in refs:
            await r.increment()  # warm the directory cache
        b_address = silo.cluster.directory.cache.get(refs[0].grain_id)
        assert b_address is not None and b_address != silo.address, "targets must be on B"
        results: dict[str, Any] = {}
        if only != "forwarded":
            results = await _cross_silo_rows(refs, echo_port, tuned_port, seconds, trials,
                                             profile)
        relay = CoalescingRelay(tuned_port)
        await relay.start()
        print(json.dumps(results), flush=True)
        print(json.dumps({"gateway": silo.gateway.address, "relay_port": relay.port,
                          "pid": os.getpid()}), flush=True)
        profiler = _profiler() if profile else None
        if profiler is not None:
            profiler.start()
        await asyncio.to_thread(sys.stdin.read)
        if profiler is not None:
            profiler.stop()
            sys.stderr.write("\n=== silo A (gateway) ===\n")
            sys.stderr.write(profiler.output_text(unicode=False, color=False))
        hosted = sum(1 for g in silo.catalog.activations if g.type_name == "BenchTarget")
        print(json.dumps({"targets_on_gateway_silo": hosted}), flush=True)
        await relay.close()


async def _cross_silo_rows(refs: list[Any], echo_port: int, tuned_port: int, seconds: float,
                           trials: int, profile: bool) -> dict[str, Any]:
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
    return results


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` in seconds (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive_client(gateway: str, relay_port: int, pids: list[int], seconds: float,
                       trials: int) -> None:
    """The client of the forwarded-call row: 100 calls in flight through silo A (``pids[0]``)
    to B's grains (``pids[1]``), against the two-hop echo through A's relay; print JSON
    (the rates, and the CPU time per call of each of the three processes)."""
    quiet_logging()
    async with ClusterClient(gateways=[gateway], cluster_id="bench") as client:
        refs = [client.get_grain(Target, i) for i in range(CALLERS)]
        for r in refs:
            await r.increment()
        tuned = CoalescingEchoClient()
        await tuned.connect(relay_port)
        try:
            tuned_calls = [partial(tuned.call, "BenchTarget", i, "increment")
                           for i in range(CALLERS)]
            ours = partial(run_callers, [r.increment for r in refs])
            base = partial(run_callers, tuned_calls)
            rates = await _best(ours, base, CALLERS, seconds, trials)
            per_caller = FORWARDED_CALLS // CALLERS
            who = {"client": os.getpid(), "gateway": pids[0], "callee": pids[1]}
            cpu = {f"{side}_{name}": float("inf")
                   for side in ("ours", "relay") for name in who}
            for _ in range(trials):  # the least of the trials: the others ran beside noise
                for side, fn in (("ours", ours), ("relay", base)):
                    before = {name: _cpu_seconds(pid) for name, pid in who.items()}
                    await fn(per_caller)
                    for name, pid in who.items():
                        used = (_cpu_seconds(pid) - before[name]) / (per_caller * CALLERS)
                        cpu[f"{side}_{name}"] = min(cpu[f"{side}_{name}"], used)
        finally:
            await tuned.close()
    print(json.dumps({"forwarded": rates, "cpu": cpu}), flush=True)


# -- the benchmark process ------------------------------------------------------------------
def _child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def _json_line(proc: subprocess.Popen[str], who: str) -> Any:
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{who} ended early (exit {proc.poll()})")
        if line.startswith("{"):
            return json.loads(line)


def _stop(proc: subprocess.Popen[str] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def run(args: argparse.Namespace) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="orleanspy-bench-") as tmp:
        membership = f"sqlite:{Path(tmp) / 'membership.db'}"
        extra = ["--profile"] if args.profile else []
        timing = ["--seconds", str(args.seconds), "--trials", str(args.trials)]
        progress("starting silo B (targets + echo servers) ...")
        b = _child("--serve", "b", "--membership", membership, *extra)
        a: subprocess.Popen[str] | None = None
        c: subprocess.Popen[str] | None = None
        try:
            _json_line(b, "silo B")
            progress("starting silo A; A calls B's grains and B's echo servers ...")
            a = _child("--serve", "a", "--membership", membership, *timing,
                       *(["--only", args.only] if args.only else []), *extra)
            ports = _json_line(b, "silo B")  # B saw A join and activated its grains
            assert a.stdin is not None
            a.stdin.write(json.dumps(ports) + "\n")
            a.stdin.flush()
            results = _json_line(a, "silo A")
            serving = _json_line(a, "silo A")
            progress("a client calls B's grains through A's gateway, and the relay ...")
            c = _child("--serve", "client", "--gateway", serving["gateway"], "--relay-port",
                       str(serving["relay_port"]), "--pids",
                       f"{serving['pid']},{ports['pid']}", *timing)
            forwarded = _json_line(c, "the client")
            c.wait(timeout=60)
            assert a.stdin is not None
            a.stdin.close()
            hosted = _json_line(a, "silo A")["targets_on_gateway_silo"]
            if hosted:
                raise RuntimeError(f"{hosted} target grains were activated on the gateway "
                                   "silo: the forwarded-call row measured local calls")
        finally:
            for proc in (c, a, b):
                _stop(proc)
    figures = []
    if "sequential" in results:
        seq, flight = results["sequential"], results["in_flight"]
        figures += [
            Figure("cross_silo_sequential", seq[0], "calls/s", seq[1], 0.5,
                   "one caller in silo A, grain in silo B; baseline: echo, 1 in flight"),
            Figure("cross_silo_100_in_flight", flight[0], "calls/s", flight[1], 0.5,
                   f"100 callers in A, 100 grains in B; baseline: echo, 100 in flight; "
                   f"absolute target >= {MIN_RATE:,.0f} calls/s: "
                   + ("ok" if flight[0] >= MIN_RATE else "MISSED")),
            Figure("cross_silo_100_in_flight_vs_coalescing_echo",
                   results["in_flight_tuned"][0], "calls/s", results["in_flight_tuned"][1],
                   0.8, "as above; baseline: an echo that reads each chunk once and writes "
                   "the frames of one loop pass with one write"),
        ]
    rates, cpu = forwarded["forwarded"], forwarded["cpu"]
    figures.append(Figure(
        "client_to_remote_grain_100_in_flight", rates[0], "calls/s", rates[1], 0.8,
        "a client, 100 in flight, through gateway silo A to grains on silo B; baseline: "
        "client -> coalescing relay in A -> coalescing echo in B; CPU per call (us), "
        "ours/baseline: " + ", ".join(
            f"{name} {cpu['ours_' + name] * 1e6:.1f}/{cpu['relay_' + name] * 1e6:.1f}"
            for name in ("client", "gateway", "callee")),
    ))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON list, nothing else")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="target duration of one trial (default 2.0)")
    parser.add_argument("--trials", type=int, default=3, help="trials per side (best is kept)")
    parser.add_argument("--profile", action="store_true",
                        help="profile both silos with pyinstrument (stderr)")
    parser.add_argument("--only", choices=["forwarded"],
                        help="measure only the forwarded-call row")
    parser.add_argument("--serve", choices=["a", "b", "client"], help=argparse.SUPPRESS)
    parser.add_argument("--membership", help=argparse.SUPPRESS)
    parser.add_argument("--gateway", help=argparse.SUPPRESS)
    parser.add_argument("--relay-port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve == "b":
        asyncio.run(serve_b(args.membership, args.profile))
        return
    if args.serve == "a":
        asyncio.run(drive_a(args.membership, args.seconds, args.trials, args.profile,
                            args.only))
        return
    if args.serve == "client":
        asyncio.run(drive_client(args.gateway, args.relay_port,
                                 [int(p) for p in args.pids.split(",")], args.seconds,
                                 args.trials))
        return
    quiet_logging()
    t0 = time.perf_counter()
    figures = run(args)
    progress(f"done in {time.perf_counter() - t0:.0f} s")
    report(figures, args.json)


if __name__ == "__main__":
    main()
