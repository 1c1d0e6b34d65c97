"""Silos on two "hosts": two network namespaces joined by a veth pair, made by the test
(``ip netns``; skipped with the reason where the machine does not allow it). Redis runs in
the first namespace; one silo in each, listening on its own address and sharing nothing but
Redis. They form one cluster, and a client in the second namespace reaches grains on both.
Nothing may assume one host: addresses, the handshake's address check, discovery."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .silo_process import REPO_ROOT, child_env, free_port

pytestmark = pytest.mark.integration

A_IP, B_IP = "10.231.0.1", "10.231.0.2"
FAST = ["--probe-period", "0.5", "--i-am-alive-period", "0.5", "--table-refresh-period", "0.5"]
WAIT = 30.0

_CLIENT = """
import asyncio, json, sys
from orleanspy import ClusterClient
from orleanspy.options import ClientOptions

async def main(gateways, url, secret):
    options = ClientOptions(cluster_id="twohosts", gateways=tuple(gateways), secret=secret,
                            membership=url, response_timeout=10.0)
    async with ClusterClient(options) as client:
        await client.wait_gateways(lambda g: len(g) == 2, timeout=20)
        pids = set()
        for i in range(40):
            info = await client.get_grain("Counter", f"two-hosts-{i}").info()
            pids.add(info["pid"])
    print(json.dumps({"pids": sorted(pids)}), flush=True)

asyncio.run(main(sys.argv[1].split(","), sys.argv[2], sys.argv[3]))
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def two_hosts() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make network namespaces")
    tag = uuid.uuid4().hex[:6]
    a, b = f"osa{tag}", f"osb{tag}"
    try:
        _ip("netns", "add", a)
        _ip("netns", "add", b)
        _ip("link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        _ip("link", "set", f"va{tag}", "netns", a)
        _ip("link", "set", f"vb{tag}", "netns", b)
        _ip("-n", a, "addr", "add", f"{A_IP}/24", "dev", f"va{tag}")
        _ip("-n", b, "addr", "add", f"{B_IP}/24", "dev", f"vb{tag}")
        for ns, dev in ((a, f"va{tag}"), (b, f"vb{tag}")):
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, OSError) as exc:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"this machine does not allow network namespaces here: {exc}")
    try:
        yield a, b
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _in(ns: str, *cmd: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], cwd=REPO_ROOT, env=child_env(),
                            text=True, **kwargs)  # type: ignore[call-overload]


async def _redis_up(ns: str, port: int) -> None:
    """Until the namespace's redis-server answers (it takes a moment to listen)."""
    for _ in range(100):
        ping = await asyncio.create_subprocess_exec(
            "ip", "netns", "exec", ns, "redis-cli", "-h", A_IP, "-p", str(port), "ping",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        out, _ = await ping.communicate()
        if out.strip() == b"PONG":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("redis-server in the namespace did not start")


async def _ready(proc: subprocess.Popen[str]) -> str:
    """The gateway a silo prints once it serves."""
    assert proc.stdout is not None
    for _ in range(10):  # a clustered silo first prints its address
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), WAIT)
        if line.startswith("orleanspy silo ready gateway="):
            return line.split("=", 1)[1].strip()
        assert line, "the silo exited before it was ready"
    raise AssertionError("no ready line")


async def test_silos_in_two_network_namespaces_form_one_cluster(
    two_hosts: tuple[str, str], tmp_path: Path
) -> None:
    a, b = two_hosts
    redis_port = free_port()
    url = f"redis://{A_IP}:{redis_port}/0?prefix=twohosts"
    key_file = tmp_path / "cluster.key"
    key_file.write_text("k" * 64)
    key_file.chmod(0o600)  # a key file others can read is refused at start
    procs: list[subprocess.Popen[str]] = []
    logs: list[Any] = []
    try:
        procs.append(_in(a, "redis-server", "--bind", A_IP, "--port", str(redis_port),
                         "--save", "", "--appendonly", "no", "--protected-mode", "no",
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        await _redis_up(a, redis_port)
        gateways = []
        for ns, ip in ((a, A_IP), (b, B_IP)):
            log = (tmp_path / f"{ns}.log").open("w")
            logs.append(log)
            proc = _in(ns, sys.executable, "-m", "silo", "silo", "start",
                       "--app", "tests.integration.app", "--host", ip,
                       "--port", "11111", "--gateway-port", "30000",
                       "--membership", url, "--storage", url, "--reminders", url,
                       "--cluster-id", "twohosts", "--cluster-key-file", str(key_file),
                       "--secret", "two-hosts-secret", "--data-dir", str(tmp_path / ns),
                       "--log-format", "json", *FAST, stdout=subprocess.PIPE, stderr=log)
            procs.append(proc)
            gateways.append(await _ready(proc))
        assert gateways == [f"{A_IP}:30000", f"{B_IP}:30000"]
        client = _in(b, sys.executable, "-c", _CLIENT, gateways[0], url, "two-hosts-secret",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(asyncio.to_thread(client.communicate), WAIT * 2)
        assert client.returncode == 0, err
        result = json.loads(out.strip().splitlines()[-1])
        assert len(result["pids"]) == 2, result  # grains on both hosts, reached from b
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        for proc in procs:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        for log in logs:
            log.close()
