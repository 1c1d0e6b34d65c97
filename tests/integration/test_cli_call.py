"""``orleanspy call`` against a running silo process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from .silo_process import SiloLauncher, free_port, run_cli_to_end

pytestmark = pytest.mark.integration


async def test_call_prints_result_errors_and_exit_codes(silo_launcher: SiloLauncher) -> None:
    silo = await silo_launcher.start(secret="s3cret")
    gw = ["--gateway", silo.gateway, "--secret", "s3cret"]
    # independent calls, run concurrently to keep the test short on a loaded machine
    (add, echo, info, raised, unknown, no_secret, unreachable, two, typo_type,
     typo_method, wrong_type, too_many) = await asyncio.gather(
        run_cli_to_end("call", *gw, "Counter", "alice", "add", "5"),
        run_cli_to_end(
            "call", *gw, "Counter", "7", "echo", "1", "hello", '"2"', '{"a": [null, true]}'
        ),
        run_cli_to_end("call", *gw, "--key-type", "str", "Counter", "7", "info"),
        run_cli_to_end("call", *gw, "Counter", "bob", "fail_value", "bad"),
        run_cli_to_end("call", *gw, "Nope", "alice", "get"),
        run_cli_to_end("call", "--gateway", silo.gateway, "Counter", "a", "get"),
        run_cli_to_end("call", "--gateway", f"127.0.0.1:{free_port()}", "Counter", "a", "get"),
        # several gateways: one that answers serves the call
        run_cli_to_end("call", "--gateway", f"127.0.0.1:{free_port()}", *gw, "Counter",
                       "carol", "add", "3"),
        run_cli_to_end("call", *gw, "Countr", "dan", "get"),
        run_cli_to_end("call", *gw, "Counter", "dan", "ad", "1"),
        run_cli_to_end("call", *gw, "Counter", "eve", "add", "five"),
        run_cli_to_end("call", *gw, "Counter", "eve", "add", "1", "2"),
    )
    assert add == (0, "5\n", "")

    assert echo[0] == 0
    assert json.loads(echo[1]) == [1, "hello", "2", {"a": [None, True]}]

    assert info[0] == 0
    assert json.loads(info[1])["pid"] == silo.pid

    assert raised == (1, "", "error: ValueError: bad\n")

    assert unknown[0] == 1
    assert unknown[2].startswith("error: MessageRejectedError: unknown grain type 'Nope'")

    assert no_secret[0] == 2
    assert "wrong or missing secret" in no_secret[2]
    assert "Traceback" not in no_secret[2]

    assert unreachable[0] == 2
    assert unreachable[2].startswith("error: cannot reach the silo gateway at 127.0.0.1:")

    assert two == (0, "3\n", "")

    assert typo_type[0] == 1 and "did you mean 'Counter'?" in typo_type[2]
    assert typo_method[0] == 1 and "did you mean 'add'?" in typo_method[2]

    # The arguments are checked against the method's signature before it runs.
    assert wrong_type[0] == 1
    assert "argument 'n' must be int, got str 'five'" in wrong_type[2]
    assert "Counter.add(n: int) -> int" in wrong_type[2]
    assert too_many[0] == 1 and "too many positional arguments" in too_many[2]


async def test_console_script_calls_the_silo(silo_launcher: SiloLauncher) -> None:
    script = Path(sys.executable).parent / "orleanspy"
    if not script.exists():
        pytest.skip("the orleanspy console script is not installed next to this Python")
    silo = await silo_launcher.start()
    proc = await asyncio.create_subprocess_exec(
        str(script), "call", "--gateway", silo.gateway, "Counter", "dora", "add", "2",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(15):
        out, err = await proc.communicate()
    assert (proc.returncode, out, err) == (0, b"2\n", b"")
