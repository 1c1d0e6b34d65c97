"""The examples' client scripts run in a process that cannot import the grains they call.

Each script runs under a ``-c`` wrapper that puts None in ``sys.modules`` for the
implementation modules (any import of them raises ImportError), against a real silo process
that hosts those modules. The scripts reach the grains through their grain interfaces only.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .silo_process import REPO_ROOT, child_env

pytestmark = pytest.mark.integration

BANK_GRAINS = ("examples.bank.grains",)
# The clickstream client needs neither the grains nor Spark: it asks the silo for the report.
CLICKSTREAM_GRAINS = ("examples.clickstream.grains", "pyspark")
WRAPPER = """\
import runpy, sys
blocked, module, *argv = sys.argv[1:]
for name in blocked.split(","):
    sys.modules[name] = None  # importing it now raises ImportError
sys.argv = [module, *argv]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


async def run_blocked(blocked: tuple[str, ...], module: str, *argv: str,
                      timeout: float) -> tuple[int, str, str]:
    """Run ``python -m module argv`` with ``blocked`` modules unimportable; (code, out, err)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRAPPER, ",".join(blocked), module, *argv,
        cwd=REPO_ROOT, env=child_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_example_clients_wrapper_makes_the_grains_unimportable() -> None:
    code, _, err = await run_blocked(BANK_GRAINS, "examples.bank.grains", timeout=30)

    assert code != 0
    assert "ImportError" in err and "examples.bank.grains" in err


async def test_example_clients_bank_runs_without_its_grains() -> None:
    # run.py starts its silo processes itself (they import the grains; the client does not).
    code, out, err = await run_blocked(BANK_GRAINS, "examples.bank.run", timeout=120)

    assert code == 0, err
    assert "InsufficientFundsError: account bob has 70, cannot take 1000" in out
    assert "done: every check held" in out


@contextlib.asynccontextmanager
async def clickstream_host(data_dir: Path, *sizes: str) -> AsyncIterator[str]:
    """A silo process hosting the clickstream pipeline; yields its gateway address."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.clickstream.host", "--gateway-port", "0",
        "--data-dir", str(data_dir), *sizes,
        cwd=REPO_ROOT, env=child_env(), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(60):
            line = (await proc.stdout.readline()).decode()
        assert line.startswith("ready "), line
        yield line.split()[1]
        proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(60):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_example_clients_clickstream_runs_without_its_grains(tmp_path: Path) -> None:
    sizes = ("--queues", "2", "--visitors-per-queue", "5", "--views-per-visitor", "40")
    async with clickstream_host(tmp_path, *sizes) as gateway:
        code, out, err = await run_blocked(
            CLICKSTREAM_GRAINS, "examples.clickstream.client", "--gateway", gateway,
            "--expected", "400", "--timeout", "300", timeout=420,
        )

    assert code == 0, err
    assert "400 page views" in out
    assert "done: Spark's per-page totals equal the real-time counters exactly" in out
