"""The trust boundary of a real silo process, from outside: the files that hold the cluster
key are private and a readable one is refused at start; the operations port cannot take the
descriptors the gateway needs, and holds a connection that is idle or sends its request head
slowly for a bounded time; an undecodable credential is a 401; ``silo stop`` signals only
silo processes. docs/security.md states each bound these tests assert."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import stat
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from silo.dashboard.bounds import HEAD_TIMEOUT, IDLE_TIMEOUT, ops_connection_cap
from silo.run_records import process_start

from . import silo_process
from .silo_process import SiloLauncher, run_cli_to_end

pytestmark = pytest.mark.integration

SECRET = "client-secret"
KEY = "k" * 32
FLOOD = 1200  # idle connections to the operations port
LOW_FDS = 1024  # the silo's soft and hard fd limit under the flood


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


async def test_files_that_hold_the_cluster_key_are_private_and_a_readable_one_is_refused(
    silo_launcher: SiloLauncher, tmp_path: Path,
) -> None:
    data = silo_launcher.data_dir
    cluster = ("--membership", "sqlite:membership.db")
    with umask(0o022):  # the usual umask: files 0644, folders 0755 unless made private
        silo = await silo_launcher.start(*cluster)
        async with silo.client() as client:
            assert await client.get_grain("Counter", "c").add(1) == 1
        membership = data / "membership.db"
        files = [membership, Path(f"{membership}-wal"), Path(f"{membership}-shm")]
        assert [p.exists() for p in files] == [True, True, True]
        assert [mode(p) for p in files] == [0o600] * 3
        assert mode(data) == 0o700  # the silo made its data dir
        assert all(mode(p) & 0o077 == 0 for p in data.glob("*.db*"))
        await silo.terminate()

        # a membership file that others can read: refused at start, with the fix
        membership.chmod(0o644)
        with pytest.raises(AssertionError, match=r"exited with code 2") as e:
            await silo_launcher.start(*cluster)
        assert "mode 0644" in str(e.value) and f"chmod 600 {membership}" in str(e.value)
        assert "--allow-readable-secrets" in str(e.value)
        accepted = await silo_launcher.start(*cluster, "--allow-readable-secrets")
        await accepted.terminate()

        # a key file: refused while group or others can read it, served once it is 0600
        key_file = tmp_path / "cluster.key"
        key_file.write_text(KEY)
        key_file.chmod(0o640)
        with pytest.raises(AssertionError, match=r"exited with code 2") as e:
            await silo_launcher.start("--cluster-key-file", str(key_file))
        assert "mode 0640" in str(e.value) and f"chmod 600 {key_file}" in str(e.value)
        key_file.chmod(0o600)
        keyed = await silo_launcher.start("--cluster-key-file", str(key_file))
        assert keyed.alive


def _limited(limits: tuple[int, int]) -> Any:
    real = silo_process.run_cli

    async def run_cli(*args: str, **kwargs: Any) -> asyncio.subprocess.Process:
        return await real(*args, **kwargs,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, limits))

    return run_cli


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _fd_limits(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no fd limit")


@pytest.fixture
def many_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < FLOOD + 500:
        pytest.skip(f"the test process may open {hard} files; the flood needs {FLOOD + 500}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, FLOOD + 500), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.asynccontextmanager
async def idle_connections(host: str, port: int, count: int) -> AsyncIterator[list[Any]]:
    held: list[Any] = []
    try:
        for _ in range(count):
            try:
                held.append(await asyncio.wait_for(asyncio.open_connection(host, port), 5))
            except (OSError, TimeoutError):  # the silo stopped accepting
                break
        yield held
    finally:
        for _, writer in held:
            writer.close()


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await reader.read(1) == b""
    except ConnectionError:
        return True


async def test_a_flood_of_the_operations_port_leaves_the_gateway_and_healthz_serving(
    silo_launcher: SiloLauncher, monkeypatch: pytest.MonkeyPatch, many_fds: None,
) -> None:
    # A silo that cannot raise its fd limit (hard = soft = 1024): the cap alone protects it.
    monkeypatch.setattr(silo_process, "run_cli", _limited((LOW_FDS, LOW_FDS)))
    silo = await silo_launcher.start("--dashboard-port", "0", secret=SECRET)
    assert _fd_limits(silo.pid) == (LOW_FDS, LOW_FDS)
    host, _, port = silo.dashboard.removeprefix("http://").rpartition(":")
    fds_before = _open_fds(silo.pid)
    began = time.monotonic()
    async with idle_connections(host, int(port), FLOOD) as held:
        assert len(held) == FLOOD
        fds_under_flood = _open_fds(silo.pid)
        async with asyncio.timeout(10):
            async with silo.client() as client:  # a new client, served
                assert await client.get_grain("Counter", "c").add(1) == 1
            async with aiohttp.ClientSession() as http, \
                    http.get(f"{silo.dashboard}/healthz") as r:
                assert r.status == 200
        # the connections still held are closed at the head deadline (no request came)
        survivors = [reader for reader, _ in held[-ops_connection_cap(LOW_FDS):]]
        async with asyncio.timeout(HEAD_TIMEOUT + 10):
            assert all(await asyncio.gather(*map(_closed, survivors)))
    elapsed = time.monotonic() - began
    log = silo.log_text()
    refusals = log.count('"event": "ops_connection_closed"')
    print(f"{FLOOD} idle connections: {fds_under_flood} open descriptors ({fds_before} "
          f"before, cap {ops_connection_cap(LOW_FDS)}); {refusals} refusal lines in "
          f"{elapsed:.1f} s")
    assert fds_under_flood < ops_connection_cap(LOW_FDS) + 200, fds_under_flood
    assert 0 < refusals <= 20 * (elapsed + 1)  # at a bounded rate, the rest counted
    assert '"suppressed"' in log
    assert silo.alive


#: a valid request head that never ends: a slowloris sends it one byte at a time
SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200


async def _drip_until_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             limit: float) -> tuple[float, bytes]:
    """Send ``SLOW_HEAD`` one byte per half second until the server closes the connection:
    the seconds that took, and what the server sent meanwhile."""
    began = time.monotonic()
    got = b""
    async with asyncio.timeout(limit):
        for byte in SLOW_HEAD:
            with contextlib.suppress(ConnectionError):
                writer.write(bytes([byte]))
            try:
                data = await asyncio.wait_for(reader.read(4096), 0.5)
            except TimeoutError:  # still open: the next byte
                continue
            except ConnectionError:
                break
            if not data:
                break
            got += data
        else:
            raise AssertionError("the server read the whole slow head")
    return time.monotonic() - began, got


async def test_the_silo_raises_its_fd_limit_and_a_slow_request_head_is_closed(
    silo_launcher: SiloLauncher, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(silo_process, "run_cli", _limited((LOW_FDS, 4 * LOW_FDS)))
    silo = await silo_launcher.start("--dashboard-port", "0", secret=SECRET)
    assert _fd_limits(silo.pid) == (4 * LOW_FDS, 4 * LOW_FDS)
    host, _, port = silo.dashboard.removeprefix("http://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        elapsed, got = await _drip_until_closed(reader, writer, HEAD_TIMEOUT + 10)
    finally:
        writer.close()
    # closed at the head deadline, without an answer (the head was valid, only slow)
    assert got == b"", got
    assert HEAD_TIMEOUT - 1 < elapsed < HEAD_TIMEOUT + 3, elapsed
    assert "no request head within" in silo.log_text()


async def _open_after_one_request(host: str, port: int, drip: bool) -> float:
    """Seconds a keep-alive connection stays open after its first response, idle or (with
    ``drip``) sending the head of a second request one byte at a time."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        async with asyncio.timeout(5):
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 "), head
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
        answered = time.monotonic()
        if drip:
            _, got = await _drip_until_closed(reader, writer, IDLE_TIMEOUT + 10)
            assert got == b"", got
        else:
            async with asyncio.timeout(IDLE_TIMEOUT + 10):
                assert await _closed(reader)
        return time.monotonic() - answered
    finally:
        writer.close()


async def test_a_keep_alive_connection_is_closed_after_the_idle_timeout(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--dashboard-port", "0", secret=SECRET)
    host, _, port = silo.dashboard.removeprefix("http://").rpartition(":")
    idle, dripping = await asyncio.gather(
        _open_after_one_request(host, int(port), drip=False),
        _open_after_one_request(host, int(port), drip=True),
    )
    # the head of a second request has no deadline of its own: the idle timeout bounds it
    assert IDLE_TIMEOUT - 1 < idle < IDLE_TIMEOUT + 3, idle
    assert IDLE_TIMEOUT - 1 < dripping < IDLE_TIMEOUT + 3, dripping
    assert silo.alive


async def test_an_authorization_header_that_is_not_utf8_is_refused_with_401(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--dashboard-port", "0", secret=SECRET)
    host, _, port = silo.dashboard.removeprefix("http://").rpartition(":")
    for header in (b"Bearer \xff\xfe", b"\xc3\x28", b"Bearer " + SECRET.encode() + b"\xff"):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + header
                     + b"\r\nConnection: close\r\n\r\n")
        async with asyncio.timeout(5):
            status = (await reader.readline()).split()[1]
        writer.close()
        assert status == b"401", header
    assert '"level": "error"' not in silo.log_text()


async def test_silo_stop_signals_no_process_that_is_not_the_silo_of_its_record(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    run = data / "run"
    run.mkdir(parents=True)
    bystander = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)")
    try:
        pid = bystander.pid
        # no start time, and the right start time of a process that is not a silo
        for started in (None, process_start(pid)):
            (run / f"{pid}.json").write_text(json.dumps({
                "pid": pid, "silo": "127.0.0.1:11111@1", "gateway": "127.0.0.1:30000",
                "cluster": "dev", "dashboard": None, "started": started}))
            code, _, err = await run_cli_to_end("silo", "stop", "--all", "--data-dir",
                                                str(data))
            assert code == 2 and "no silo started by `orleanspy silo start` runs" in err
            assert bystander.returncode is None
            assert not (run / f"{pid}.json").exists()  # stale: removed
    finally:
        with contextlib.suppress(ProcessLookupError):
            bystander.kill()
        await bystander.wait()
