"""Attacks on a real two-silo cluster: each one closes the attacker's connection with a logged
reason, while the silos stay up, a well-behaved client keeps being served without a single
failure, and the memory the attack costs stays bounded.

Memory bound stated by these tests: ``RSS_BOUND`` (32 MiB) of growth over the silo's RSS
before the attacks, for 24 peers each announcing a 16 MiB frame and sending up to 15 MiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from orleanspy import ClusterClient, MessageRejectedError
from orleanspy.cluster.connection import silo_key
from orleanspy.cluster.membership import SiloStatus, SqliteMembershipTable
from orleanspy.cluster.query import query_silo
from orleanspy.ids import GrainId
from orleanspy.messaging.client_identity import client_handshake
from orleanspy.messaging.codec import EXT_DATACLASS, EXT_EXCEPTION
from orleanspy.messaging.frames import PROTOCOL_VERSION

from .silo_process import SiloLauncher, SiloProcess, free_port, poll_until

pytestmark = pytest.mark.integration

APP = "tests.integration.cluster_app"
CLUSTER = "attacked"
SECRET = "client-secret"
HANDSHAKE_TIMEOUT = 1.0
RSS_BOUND = 32 * 1024 * 1024
CLOSE_BOUND = 5.0  # seconds within which the silo must close an attacker's connection
FAST = ("--probe-period", "0.5", "--i-am-alive-period", "0.5", "--table-refresh-period", "0.5")


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def frame(obj: Any) -> bytes:
    data = msgpack.packb(obj)
    return len(data).to_bytes(4, "big") + data


def host_port(address: str) -> tuple[str, int]:
    host, _, rest = address.partition("@")[0].rpartition(":")
    return host, int(rest)


def silo_triple(address: str) -> list[Any]:
    endpoint, _, generation = address.partition("@")
    host, _, port = endpoint.rpartition(":")
    return [host, int(port), int(generation)]


async def closed_by_peer(reader: asyncio.StreamReader, bound: float = CLOSE_BOUND) -> bytes:
    """Everything the silo sends until it closes the connection; fails after ``bound``."""
    received = b""
    async with asyncio.timeout(bound):
        try:
            while data := await reader.read(65536):
                received += data
        except ConnectionError:  # reset or broken pipe: closed with our input unread
            pass
    return received


def read_frames(data: bytes) -> list[Any]:
    out = []
    while len(data) >= 4:
        size = int.from_bytes(data[:4], "big")
        out.append(msgpack.unpackb(data[4 : 4 + size]))
        data = data[4 + size :]
    return out


class Steady:
    """A well-behaved client calling grains spread over both silos until stopped."""

    def __init__(self, client: ClusterClient) -> None:
        self.client = client
        self.calls = 0
        self.failures: list[BaseException] = []
        self._stop = asyncio.Event()
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def wait_calls(self, n: int, timeout: float = 15.0) -> None:
        """Wait until ``n`` more calls have been answered (the attacks ran meanwhile)."""
        target = self.calls + n
        async with asyncio.timeout(timeout), self._progress:
            await self._progress.wait_for(lambda: self.calls >= target or bool(self.failures))

    async def __aenter__(self) -> Steady:
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            grain: Any = self.client.get_grain("SpreadSpot", f"steady-{i % 16}")
            try:
                await grain.hit()
                self.calls += 1
            except Exception as exc:
                self.failures.append(exc)
            async with self._progress:
                self._progress.notify_all()
            i += 1
            await asyncio.sleep(0.005)

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


@contextlib.asynccontextmanager
async def cluster(launcher: SiloLauncher) -> AsyncIterator[list[SiloProcess]]:
    config = launcher.log_dir / "attacked.toml"
    config.write_text(f"handshake_timeout = {HANDSHAKE_TIMEOUT}\nmax_pending_handshakes = 16\n")
    silos = [
        await launcher.start("--membership", "sqlite:membership.db", "--cluster-id", CLUSTER,
                             "--storage", "memory", "--reminders", "memory",
                             "--config", str(config), *FAST, secret=SECRET, app=APP)
        for _ in range(2)
    ]
    table = SqliteMembershipTable(str(launcher.data_dir / "membership.db"), cluster_id=CLUSTER)
    try:
        await poll_until(table.read_all, lambda d: sum(
            e.status is SiloStatus.ACTIVE for e in d.entries()) == 2, timeout=15)
    finally:
        await table.close()
    yield silos


async def announce_huge_frames(host: str, port: int, count: int) -> int:
    """``count`` peers each announce a 16 MiB frame and send up to 15 MiB of it; returns how
    many the silo closed."""
    chunk = b"\0" * (1024 * 1024)

    async def one() -> bool:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write((16 * 1024 * 1024).to_bytes(4, "big"))
            for _ in range(15):
                writer.write(chunk)
                await writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            pass
        try:
            await closed_by_peer(reader)
            return True
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    results = await asyncio.gather(*(one() for _ in range(count)))
    return sum(results)


async def slowloris(host: str, port: int, payload: bytes) -> float:
    """Send ``payload`` one byte every 0.2 s; returns after how long the silo closed it."""
    reader, writer = await asyncio.open_connection(host, port)
    started = time.monotonic()
    try:
        async with asyncio.timeout(CLOSE_BOUND):
            for byte in payload:
                writer.write(bytes([byte]))
                await writer.drain()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.2):
                        if await reader.read(1) == b"":
                            break
            else:
                await closed_by_peer(reader)
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        writer.close()
    return time.monotonic() - started


async def idle_connections(host: str, port: int, count: int) -> None:
    """``count`` connections that send nothing: each is closed by the silo."""
    conns = [await asyncio.open_connection(host, port) for _ in range(count)]
    try:
        for reader, _ in conns:
            await closed_by_peer(reader)
    finally:
        for _, writer in conns:
            writer.close()


async def test_unauthenticated_peers_cost_bounded_time_and_memory(
    silo_launcher: SiloLauncher,
) -> None:
    async with cluster(silo_launcher) as (a, b):
        client = a.client(cluster_id=CLUSTER)
        await client.connect()
        gw_host, gw_port = a.gateway_host_port
        silo_host, silo_port = host_port(a.silo_address)
        baseline = rss(a.pid)
        async with Steady(client) as steady:
            for host, port in ((gw_host, gw_port), (silo_host, silo_port)):
                # idle sockets and a peer that trickles its handshake: closed at the deadline
                await idle_connections(host, port, 20)
                hello = frame(client_handshake(CLUSTER, SECRET))
                took = await slowloris(host, port, hello)
                assert took < HANDSHAKE_TIMEOUT + 1.0
                # huge announced frames before any handshake: closed at the length prefix
                assert await announce_huge_frames(host, port, 24) == 24
            grown = rss(a.pid) - baseline
            assert grown < RSS_BOUND, f"the silo grew by {grown / 2**20:.1f} MiB"
            # a new client still gets in after the flood
            late = a.client(cluster_id=CLUSTER)
            await late.connect()
            assert await late.get_grain("SpreadSpot", "late").hit() == 1
            await late.close()
            await steady.wait_calls(20)
        await client.close()
        assert steady.failures == []
        assert steady.calls > 20
        assert a.alive and b.alive
        log = a.log_text()
        assert '"event": "connection_handshake_timeout"' in log
        assert '"event": "connection_protocol_error"' in log
        assert "before the handshake exceeds the limit" in log


async def test_the_silo_port_refuses_impostors_and_tools_that_write(
    silo_launcher: SiloLauncher,
) -> None:
    async with cluster(silo_launcher) as (a, b):
        client = a.client(cluster_id=CLUSTER)
        await client.connect()
        host, port = host_port(a.silo_address)
        async with Steady(client) as steady:
            # 1. holds the client secret, claims to be silo b, cannot prove the cluster key
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(frame({"v": PROTOCOL_VERSION, "cluster": CLUSTER, "secret": SECRET,
                                "silo": silo_triple(b.silo_address),
                                "to": silo_triple(a.silo_address), "nonce": os.urandom(32)}))
            writer.write(frame({"v": PROTOCOL_VERSION, "proof": os.urandom(32)}))
            challenge, verdict = read_frames(await closed_by_peer(reader))
            writer.close()
            assert isinstance(challenge["challenge"], bytes)
            assert verdict["ok"] is False and "cluster key" in verdict["error"]

            # 2. holds the key (read from the membership file) but claims a silo membership
            #    does not list: refused by the membership check
            membership_file = silo_launcher.data_dir / "membership.db"
            with contextlib.closing(sqlite3.connect(membership_file)) as db, db:
                (cluster_key,) = db.execute(
                    "SELECT key FROM cluster_key WHERE cluster_id = ?", (CLUSTER,)
                ).fetchone()
            key = silo_key(cluster_key)
            reader, writer = await asyncio.open_connection(host, port)
            hello = msgpack.packb({"v": PROTOCOL_VERSION, "cluster": CLUSTER,
                                   "silo": ["127.0.0.1", free_port(), 7],
                                   "to": silo_triple(a.silo_address), "nonce": os.urandom(32)})
            writer.write(len(hello).to_bytes(4, "big") + hello)
            size = int.from_bytes(await reader.readexactly(4), "big")
            challenge_bytes = await reader.readexactly(size)
            transcript = hashlib.sha256(hello + challenge_bytes)
            proof = hmac.digest(key, b"orleanspy/silo/A->B" + transcript.digest(), "sha256")
            writer.write(frame({"v": PROTOCOL_VERSION, "proof": proof}))
            (verdict,) = read_frames(await closed_by_peer(reader))
            writer.close()
            assert verdict["ok"] is False
            assert "not in the membership table" in verdict["error"]

            # 3. a tool connection (client secret) may read status but change nothing
            status = await query_silo(host, port, "status", [], cluster_id=CLUSTER,
                                      secret=SECRET)
            assert status
            with pytest.raises(MessageRejectedError, match="read-only"):
                await query_silo(host, port, "dir", ["unregister", "SpreadSpot/steady-0"],
                                 cluster_id=CLUSTER, secret=SECRET)

            # 4. 200 nested tuple ext values, as a first frame and after a tool's handshake
            nested = msgpack.packb([1])
            for _ in range(200):
                nested = msgpack.packb(msgpack.ExtType(1, nested))
            raw = len(nested).to_bytes(4, "big") + nested
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(raw)
            assert await closed_by_peer(reader) == b""
            writer.close()
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(frame({"v": PROTOCOL_VERSION,
                                "cluster": CLUSTER, "secret": SECRET, "silo": None,
                                "to": None}))
            control = msgpack.packb([3, 1, "status", [msgpack.ExtType(1, nested)]])
            writer.write(len(control).to_bytes(4, "big") + control)
            replies = []
            async with asyncio.timeout(CLOSE_BOUND):
                for _ in range(2):
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    replies.append(msgpack.unpackb(await reader.readexactly(size)))
            writer.close()
            assert replies[0]["ok"] is True
            assert replies[1][:3] == [2, 1, False]  # that one request is refused
            assert "nested" in msgpack.unpackb(replies[1][3])["message"]

            # b was never retired nor declared dead: it keeps answering through a
            table = SqliteMembershipTable(str(silo_launcher.data_dir / "membership.db"),
                                          cluster_id=CLUSTER)
            try:
                data = await table.read_all()
            finally:
                await table.close()
            assert [e.status for e in data.entries()] == [SiloStatus.ACTIVE] * 2
            await steady.wait_calls(20)
        await client.close()
        assert steady.failures == []
        assert steady.calls > 10
        assert a.alive and b.alive
        log = a.log_text()
        assert '"event": "silo_handshake_rejected"' in log
        assert '"event": "silo_tool_operation_refused"' in log


async def test_a_client_cannot_reach_the_runtime_of_a_real_silo(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    config = tmp_path / "streams.toml"
    config.write_text('[streams.s]\nadapter = "memory"\ntotal_queues = 2\npull_period = 0.02\n')
    silo = await silo_launcher.start("--app", "tests.integration.stream_app",
                                     "--config", str(config), secret=SECRET)
    received = silo_launcher.data_dir / "received.txt"
    async with silo.client() as client:
        attempts = [
            (GrainId("NumberSink", "k"), "__orleanspy_stream_deliver__",
             ("forged-sub", [["numbers", "k", 999, None]])),
            (GrainId("NumberSink", "k"), "__orleanspy_stream_error__", ("sub", "boom")),
            (GrainId("Ticker", "t"), "receive_reminder", ("tick", None)),
            (GrainId("orleanspy.PubSubRendezvous", ("s", "numbers", "k")), "producers", ()),
            (GrainId("orleanspy.PubSubRendezvous", ("s", "numbers", "k")),
             "register_producer", (["s", 0, "x"],)),
            (GrainId("orleanspy.PullingAgent", ("s", 0, "127.0.0.1:1@1")), "stop", ()),
        ]
        for gid, method, args in attempts:
            with pytest.raises(MessageRejectedError, match="not callable from a client"):
                await client.call(gid, method, args, None, 5.0)
        # the runtime still delivers: a client's event reaches the implicit subscriber
        await client.get_stream_provider("s").get_stream("numbers", "k").on_next(7)
        await poll_until(lambda: _read(received), lambda text: "k 7\n" in text, timeout=10)
        assert "999" not in _read_now(received)
        assert await client.get_grain("Counter", "c").add(1) == 1
    assert silo.alive
    assert silo.log_text().count('"event": "client_call_refused"') == len(attempts)


async def _read(path: Path) -> str:
    return _read_now(path)


def _read_now(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


async def test_a_peer_cannot_make_a_silo_import_or_build_a_class_it_names(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start(secret=SECRET)
    inspector = GrainId("Inspector", "i")

    def dataclass_ext(name: str) -> msgpack.ExtType:
        return msgpack.ExtType(EXT_DATACLASS, msgpack.packb([name, {"max_workers": 1}]))

    def exception_ext(name: str) -> msgpack.ExtType:
        return msgpack.ExtType(EXT_EXCEPTION, msgpack.packb([name, ["x"], "x"]))

    async with silo.client() as client:
        async def call(method: str, *args: Any) -> Any:
            return await client.call(inspector, method, args, None, 5.0)

        lazy = ("concurrent.futures.process", "multiprocessing.connection")
        assert [await call("imported", m) for m in lazy] == [False, False]
        assert not await call("imported", "xml.dom.minidom")
        for name in ("concurrent.futures:ProcessPoolExecutor", "xml.dom.minidom:Node",
                     "subprocess:Popen", "os:system"):
            assert await call("kind", dataclass_ext(name)) == "builtins.dict"
            assert await call("kind", exception_ext(name)) == "orleanspy.errors.RemoteGrainError"
        assert [await call("imported", m) for m in lazy] == [False, False]
        assert not await call("imported", "xml.dom.minidom")
        # types the application uses still round-trip; built-in exceptions keep their type
        assert await call("kind", exception_ext("builtins:ValueError")) == "builtins.ValueError"
        assert await call("kind", (1, 2)) == "builtins.tuple"
        assert await client.get_grain("Counter", "c").add(1) == 1
    assert silo.alive
