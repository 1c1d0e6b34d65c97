"""Real silo processes for the integration tests (``python -m silo silo start ...``).

A silo is started from the repository root with ``--app tests.integration.app``, a free gateway
port (bind to port 0, release) and its data dir in the test's tmp_path. It is ready when it
prints ``orleanspy silo ready gateway=HOST:PORT`` on stdout; its log (JSON lines on stderr)
goes to a file that failure messages quote. ``terminate`` sends SIGTERM, then SIGKILL after a
timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from orleanspy import ClusterClient

__all__ = [
    "REPO_ROOT",
    "SiloLauncher",
    "SiloProcess",
    "free_port",
    "poll_until",
    "run_cli",
    "run_cli_to_end",
]

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[2]
APP_MODULE = "tests.integration.app"
READY_PREFIX = b"orleanspy silo ready gateway="
CLUSTER_PREFIX = b"orleanspy silo cluster silo="
DASHBOARD_PREFIX = b"orleanspy silo dashboard "
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env() -> dict[str, str]:
    """The test's environment without ORLEANSPY_* variables that would change the silo."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORLEANSPY_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


class SiloProcess:
    """One running ``orleanspy silo start`` process."""

    def __init__(
        self, proc: asyncio.subprocess.Process, log_path: Path, secret: str | None
    ) -> None:
        self.proc = proc
        self.log_path = log_path
        self.secret = secret
        self.gateway = ""
        self.dashboard = ""  # http://host:port of the operations endpoints, if served
        self.silo_address = ""  # host:port@generation of a clustered silo

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    @property
    def gateway_host_port(self) -> tuple[str, int]:
        host, _, port = self.gateway.rpartition(":")
        return host, int(port)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def client(self, **kwargs: Any) -> ClusterClient:
        kwargs.setdefault("secret", self.secret)
        kwargs.setdefault("response_timeout", 10.0)
        return ClusterClient(gateways=[self.gateway], **kwargs)

    async def wait_ready(self, timeout: float) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    line = await stdout.readline()
                    if not line:
                        code = await self.proc.wait()
                        raise AssertionError(
                            f"silo exited with code {code} before it was ready; log:\n"
                            + self.log_text()
                        )
                    if line.startswith(DASHBOARD_PREFIX):
                        self.dashboard = line[len(DASHBOARD_PREFIX):].decode().strip()
                    if line.startswith(CLUSTER_PREFIX):
                        self.silo_address = line[len(CLUSTER_PREFIX):].decode().strip()
                    if line.startswith(READY_PREFIX):
                        self.gateway = line[len(READY_PREFIX):].decode().strip()
                        return
        except TimeoutError:
            await self.kill()
            raise AssertionError(
                f"silo not ready after {timeout} s; log:\n{self.log_text()}"
            ) from None

    async def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        async with asyncio.timeout(timeout):
            return await self.proc.wait()

    async def terminate(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM (graceful stop); SIGKILL if it has not exited after ``timeout``."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
        try:
            return await self.wait_exit(timeout)
        except TimeoutError:
            await self.kill()
            raise AssertionError(
                f"silo ignored SIGTERM for {timeout} s; killed it. Log:\n{self.log_text()}"
            ) from None

    async def kill(self) -> int:
        """SIGKILL: no shutdown code runs."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        return await self.wait_exit()


_SHARED_FLAGS = ("--membership", "--storage", "--reminders")


class SiloLauncher:
    """Starts silo processes sharing one data dir; ``close`` stops the ones still running."""

    def __init__(self, data_dir: Path, log_dir: Path) -> None:
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.processes: list[SiloProcess] = []
        self._started = 0  # numbers the log files (silos may start concurrently)

    def shared(self, url: str) -> str:
        """``url`` with a relative SQLite path made absolute under the launcher's data dir:
        the silos of a cluster must name one file (a silo refuses a relative one)."""
        if url.startswith("sqlite:") and not os.path.isabs(url.removeprefix("sqlite:")):
            return f"sqlite:{self.data_dir / url.removeprefix('sqlite:')}"
        return url

    async def start(
        self, *extra_args: str, secret: str | None = None, timeout: float = START_TIMEOUT,
        app: str = APP_MODULE,
    ) -> SiloProcess:
        """Start a silo with ``extra_args``; the SQLite paths of ``--membership``,
        ``--storage`` and ``--reminders`` are taken as relative to the data dir (``shared``)."""
        extra_args = tuple(
            self.shared(arg) if i and extra_args[i - 1] in _SHARED_FLAGS else arg
            for i, arg in enumerate(extra_args)
        )
        args: list[str] = [
            "--app", app,
            "--gateway-port", str(free_port()),
            "--port", str(free_port()),
            "--data-dir", str(self.data_dir),
            "--log-format", "json",
            "--shutdown-timeout", "5",
            *extra_args,
        ]
        if secret is not None:
            args += ["--secret", secret]
        log_path = self.log_dir / f"silo-{self._started}.log"
        self._started += 1
        with log_path.open("ab") as log_file:
            proc = await run_cli("silo", "start", *args, stdout=asyncio.subprocess.PIPE,
                                 stderr=log_file)
        silo = SiloProcess(proc, log_path, secret)
        self.processes.append(silo)
        await silo.wait_ready(timeout)
        return silo

    async def close(self) -> None:
        errors = []
        for silo in self.processes:
            if silo.alive:
                try:
                    await silo.terminate()
                except AssertionError as exc:
                    errors.append(str(exc))
        if errors:
            raise AssertionError("\n".join(errors))


async def run_cli(*args: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """Start ``python -m silo ARGS`` in the repository root."""
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "silo", *args, cwd=REPO_ROOT, env=child_env(), **kwargs
    )


async def run_cli_to_end(*args: str, timeout: float = 15.0) -> tuple[int, str, str]:
    """Run ``python -m silo ARGS`` to completion: (exit code, stdout, stderr)."""
    proc = await run_cli(
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        async with asyncio.timeout(timeout):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def poll_until(
    probe: Callable[[], Awaitable[T]],
    predicate: Callable[[T], bool],
    *,
    timeout: float,
    interval: float = 0.1,
) -> T:
    """Call ``await probe()`` every ``interval`` s until ``predicate(result)``; for state in
    another process there is no event to await. Raises AssertionError with the last result."""
    last: T | None = None
    try:
        async with asyncio.timeout(timeout):
            while True:
                last = await probe()
                if predicate(last):
                    return last
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"condition not met within {timeout} s; last: {last!r}") from None


def _proc_status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def rss(pid: int) -> int:
    """Process ``pid``'s resident memory now, in bytes."""
    return _proc_status(pid, "VmRSS:")


def peak_rss(pid: int) -> int:
    """Process ``pid``'s peak resident memory so far, in bytes."""
    return _proc_status(pid, "VmHWM:")
