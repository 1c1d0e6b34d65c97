"""The bank demo: start a real silo process, drive it through a client, restart it.

Run with ``make run`` (or ``python -m examples.bank.run``). It prints what happens and
exits 0 when every check holds. The client side imports the grain interfaces
(``examples.bank.interfaces``), never the grains: the silo process hosts those.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

from examples.bank.interfaces import IAccount, InsufficientFundsError, ITransfers
from orleanspy import ClusterClient
from silo.startup import configure_logging

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_silo(data_dir: str, port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "silo", "silo", "start",
        "--app", "examples.bank.grains",
        "--gateway-port", str(port),
        "--data-dir", data_dir,
        "--log-level", "warning",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        while True:
            line = await proc.stdout.readline()
            if not line:
                raise RuntimeError("the silo exited before it was ready")
            if b"ready" in line:
                break
    print(f"  silo pid {proc.pid} listening on 127.0.0.1:{port} (state in {data_dir})")
    return proc


async def stop_silo(proc: asyncio.subprocess.Process) -> int:
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(30):
        code = await proc.wait()
    print(f"  silo stopped with SIGTERM, exit code {code}")
    return code


async def main() -> int:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="orleanspy-bank-") as data_dir:
        print("1. starting a silo process")
        silo = await start_silo(data_dir, port)
        async with ClusterClient(gateways=[f"127.0.0.1:{port}"]) as client:
            alice = client.get_grain(IAccount, "alice")
            bob = client.get_grain(IAccount, "bob")
            transfers = client.get_grain(ITransfers, 0)
            print("2. deposits")
            print("  alice ->", await alice.deposit(100))
            print("  bob   ->", await bob.deposit(20))
            print("3. 50 concurrent transfers of 1 from alice to bob")
            await asyncio.gather(*(transfers.transfer("alice", "bob", 1) for _ in range(50)))
            a, b = await alice.balance(), await bob.balance()
            print(f"  alice = {a}, bob = {b}")
            assert (a, b) == (50, 70), (a, b)
            print("4. a transfer that overdraws raises the grain's own exception type")
            try:
                await transfers.transfer("bob", "alice", 1000)
            except InsufficientFundsError as exc:
                print(f"  InsufficientFundsError: {exc}")
            else:
                raise AssertionError("the overdraft was accepted")
        code = await stop_silo(silo)
        assert code == 0
        print("5. restarting the silo on the same data: balances come back from SQLite")
        silo = await start_silo(data_dir, port)
        async with ClusterClient(gateways=[f"127.0.0.1:{port}"]) as client:
            a = await client.get_grain(IAccount, "alice").balance()
            b = await client.get_grain(IAccount, "bob").balance()
            history = await client.get_grain(IAccount, "bob").history()
            print(f"  alice = {a}, bob = {b}, bob's history has {len(history)} entries")
            assert (a, b) == (50, 70), (a, b)
        code = await stop_silo(silo)
        assert code == 0
    print("done: every check held")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    configure_logging("console", "warning")
    sys.exit(asyncio.run(main()))
