"""What an authenticated client can cost a real silo: a frame decodes within a stated multiple
of its size, a flood of one-way calls is held back at the gateway, and error replies do not
show where the silo's files lie.

Bounds stated by these tests (docs/security.md):

* ``RSS_RATIO`` (44): a frame of n bytes raises the silo's peak RSS by at most 44 n over its
  RSS before: decoding peaks within ``PEAK_RATIO`` (40) n, the objects it decodes to within
  ``DECODE_RATIO`` (32) n, and its bytes (the read buffer, the frame, the body) take at most
  4 n more. Beyond the decode bound the connection is closed with a logged reason and the
  silo goes on serving.
* ``FLOOD_RSS_BOUND`` (24 MiB): the growth of the silo's peak RSS under a flood of 200,000
  one-way calls to a slow grain (the flood client's sends block); meanwhile another client's
  p99 latency stays within twice its unloaded p99, taken as at least ``P99_FLOOR`` (5 ms)
  once the flood is held back and ``BUSY_FLOOR`` (50 ms) while the flood client still
  fills its socket buffers.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient, RemoteGrainError, SiloUnavailableError
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import PEAK_RATIO, Codec

from .silo_process import REPO_ROOT, SiloLauncher, SiloProcess, child_env

pytestmark = pytest.mark.integration

APP = "tests.integration.bounds_app"
SECRET = "client-secret"
FRAME = 1 << 19  # about the size of each shape's frame
RSS_RATIO = PEAK_RATIO + 4
FLOOD = 200_000
FLOOD_RSS_BOUND = 24 * 1024 * 1024
P99_FLOOR = 0.005
#: While the flood client still sends (until its socket buffers fill) it competes for the
#: machine's CPU with both processes: a looser floor for that phase.
BUSY_FLOOR = 0.05
SAMPLES = 400

#: Each shape: the value sent as one argument, and whether the silo must refuse it (beyond
#: the bound) or serve it (within it).
SHAPES: dict[str, tuple[Any, bool]] = {
    "empty arrays": ([[]] * FRAME, True),
    "empty maps": ([{}] * FRAME, True),
    "nested empties": ([[[]]] * (FRAME // 2), True),
    "empty sets (ext)": ([set()] * (FRAME // 3), True),
    "decimals (ext)": ([Decimal(0)] * (FRAME // 3), True),
    "short strings": (["ab"] * (FRAME // 3), False),
    "small ints": ([300] * (FRAME // 3), False),
    "floats": ([1.5] * (FRAME // 9), False),
    "pairs (ext tuples)": ([(1, 2)] * (FRAME // 6), False),
}


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key}")


def rss(pid: int) -> int:
    return _status(pid, "VmRSS:")


def peak_rss(pid: int) -> int:
    return _status(pid, "VmHWM:")


async def latencies(client: ClusterClient, n: int) -> list[float]:
    grain: Any = client.get_grain("Quick", "q")
    out = []
    for i in range(n):
        t = time.perf_counter()
        assert await grain.ping(i) == i
        out.append(time.perf_counter() - t)
    return out


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


async def test_a_frame_decodes_within_its_bound_or_closes_its_connection(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--app", APP, secret=SECRET)
    async with silo.client() as steady:
        await latencies(steady, 20)
        before = rss(silo.pid)
        multiples: dict[str, float] = {}
        for name, (value, refused) in SHAPES.items():
            async with silo.client() as client:
                grain: Any = client.get_grain("Quick", name)
                if refused:
                    with pytest.raises(SiloUnavailableError):
                        await grain.take(value)
                else:
                    assert await grain.take(value) == 0, name
            size = len(Codec().packb([[value], None]))
            multiples[name] = (peak_rss(silo.pid) - before) / size
            await latencies(steady, 5)  # the silo serves others all along
    assert silo.alive
    print("peak RSS growth / frame size:", {k: round(v, 1) for k, v in multiples.items()})
    assert max(multiples.values()) <= RSS_RATIO, multiples
    log = silo.log_text()
    refusals = [line for line in log.splitlines()
                if '"connection_protocol_error"' in line and "decodes to more than" in line]
    assert len(refusals) == sum(refused for _, refused in SHAPES.values()), log[-3000:]


_FLOOD_SCRIPT = """
import asyncio, sys
from orleanspy import ClusterClient

async def main() -> None:
    gateway, secret, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    async with ClusterClient(gateways=[gateway], secret=secret) as client:
        grain = client.get_grain("Sluggish", "s")
        print("flood: connected", flush=True)
        for i in range(n):
            await grain.invoke_one_way("poke", i)
            if i % 5000 == 4999:
                print("flood: sent", i + 1, flush=True)
        print("flood: done", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def _flood_line(proc: asyncio.subprocess.Process) -> str:
    """The flood client's next progress line (its log lines skipped)."""
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        if line.startswith(b"flood: "):
            return line.decode().strip()
    raise AssertionError("the flood client exited")


async def _flood_progress(proc: asyncio.subprocess.Process, stall: float) -> str:
    """The flood's last line once it is done, or once it has printed nothing for ``stall``
    seconds (its sends are blocked)."""
    last = ""
    while last != "flood: done":
        try:
            async with asyncio.timeout(stall):
                last = await _flood_line(proc)
        except TimeoutError:
            break
    return last


async def test_a_one_way_flood_is_held_back_at_the_gateway_and_others_keep_their_latency(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--app", APP, secret=SECRET)
    try:
        async with silo.client() as client:
            await latencies(client, 50)
            unloaded = p99(await latencies(client, SAMPLES))
            before = rss(silo.pid)
            flood = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _FLOOD_SCRIPT, silo.gateway, SECRET, str(FLOOD),
                cwd=REPO_ROOT, env=child_env(), stdout=asyncio.subprocess.PIPE,
            )
            try:
                async with asyncio.timeout(15):
                    assert await _flood_line(flood) == "flood: connected"
                busy = p99(await latencies(client, SAMPLES))  # while the flood sends
                last = await _flood_progress(flood, stall=1.5)
                loaded = p99(await latencies(client, SAMPLES))  # while it is held back
                grown = peak_rss(silo.pid) - before
            finally:
                with contextlib.suppress(ProcessLookupError):
                    flood.kill()
                await flood.wait()
    finally:
        await silo.kill()  # 10,000 slow calls queued: no graceful stop to wait for
    print(f"{last}; RSS +{grown / 2**20:.1f} MiB; p99 {unloaded * 1000:.2f} ms unloaded, "
          f"{busy * 1000:.2f} ms while it sends, {loaded * 1000:.2f} ms while held back")
    assert last != "flood: done", "the flood client sent all its calls: nothing held it back"
    assert "gateway_connection_paused" in silo.log_text()
    assert grown < FLOOD_RSS_BOUND, f"the silo grew by {grown / 2**20:.1f} MiB"
    assert busy <= 2 * max(unloaded, BUSY_FLOOR), (
        f"p99 {busy * 1000:.1f} ms while the flood sends, {unloaded * 1000:.1f} ms without"
    )
    assert loaded <= 2 * max(unloaded, P99_FLOOR), (
        f"p99 {loaded * 1000:.1f} ms under the flood, {unloaded * 1000:.1f} ms without"
    )


async def _error_of(silo: SiloProcess) -> RemoteGrainError | ValueError:
    async with silo.client() as client:
        try:
            await client.call(GrainId("Quick", "e"), "fail", ("boom",), None, 5.0)
        except (RemoteGrainError, ValueError) as exc:
            return exc
    raise AssertionError("the call did not fail")


async def test_error_replies_name_files_relative_unless_traceback_paths(
    silo_launcher: SiloLauncher, tmp_path: Path,
) -> None:
    config = tmp_path / "paths.toml"
    config.write_text("traceback_paths = true\n")
    plain = await silo_launcher.start("--app", APP, secret=SECRET)
    with_paths = await silo_launcher.start("--app", APP, "--config", str(config),
                                           secret=SECRET)
    tb = getattr(await _error_of(plain), "remote_traceback", "")
    assert 'File "tests/integration/bounds_app.py", line ' in tb, tb
    assert ", in fail" in tb and "ValueError: boom" in tb
    assert str(REPO_ROOT) not in tb and 'File "/' not in tb, tb
    full = getattr(await _error_of(with_paths), "remote_traceback", "")
    assert f'File "{REPO_ROOT / "tests/integration/bounds_app.py"}", line ' in full, full
