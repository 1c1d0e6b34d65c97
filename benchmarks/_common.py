"""Shared pieces of the benchmarks: figures and their report, timing, and the baselines.

The baselines are what a competent engineer would write by hand with plain asyncio, so a
ratio ``ours / baseline`` says how much the runtime costs (or saves) over the obvious code:

* ``BareActor``: one actor = an ``asyncio.Queue`` + a worker task; a call puts
  ``(method, args, future)`` and awaits the future; the worker runs the method and sets the
  result.
* ``EchoServer`` / ``EchoClient``: an asyncio-streams TCP server and client speaking the
  gateway's framing (4-byte big-endian length + msgpack); the server decodes the request
  list and answers ``[2, id, True, value]``; the client keeps many requests in flight and
  matches responses by id.
* ``CoalescingEchoServer`` / ``CoalescingEchoClient``: the same echo on ``asyncio.Protocol``,
  one read per chunk and the frames of one loop pass written with one write.
* ``CoalescingRelay``: the hop in the middle of a two-hop echo (client -> relay -> echo):
  it splits each chunk into frames, decodes each frame with msgpack to read its ``[kind,
  id]`` (the work a router does to know what it forwards; the echo's frames are small) and
  forwards the frames as bytes, the frames of one loop pass with one write, on one upstream
  connection per client connection (so ids need no rewriting); responses come back the same
  way.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack

__all__ = [
    "BareActor",
    "CoalescingEchoClient",
    "CoalescingEchoServer",
    "CoalescingRelay",
    "EchoClient",
    "EchoServer",
    "Figure",
    "LockedActor",
    "progress",
    "quiet_logging",
    "report",
    "run_callers",
]


# -- figures --------------------------------------------------------------------------------
@dataclass(slots=True)
class Figure:
    """One measured figure: our best value, the baseline's best value, and the target."""

    name: str
    value: float
    unit: str
    baseline: float
    target: float  # minimum acceptable ratio (value / baseline)
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": round(self.value, 1),
            "unit": self.unit,
            "baseline": round(self.baseline, 1),
            "ratio": round(self.ratio, 3),
        }


def report(figures: list[Figure], as_json: bool) -> None:
    """Print the figures: one JSON list on stdout, or a table for humans."""
    if as_json:
        json.dump([f.as_json() for f in figures], sys.stdout)
        sys.stdout.write("\n")
        return
    w = max(len(f.name) for f in figures)
    print(f"{'figure':<{w}}  {'orleanspy':>12}  {'baseline':>12}  {'ratio':>7}  target")
    for f in figures:
        ok = "ok" if f.ratio >= f.target else "MISSED"
        print(
            f"{f.name:<{w}}  {f.value:>12,.0f}  {f.baseline:>12,.0f}  {f.ratio:>6.2f}x"
            f"  >= {f.target:g}x {ok}   ({f.unit})"
        )
        if f.note:
            print(f"  ({f.note})")


def progress(text: str) -> None:
    """Progress for humans, on stderr (stdout stays clean for --json)."""
    print(text, file=sys.stderr, flush=True)


def quiet_logging() -> None:
    """Send structlog output to stderr and keep only warnings (the runtime logs at info)."""
    import structlog

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


# -- timing ---------------------------------------------------------------------------------
async def run_callers(calls: list[Callable[[], Awaitable[Any]]], count: int) -> float:
    """Run one task per callable, each awaiting it ``count`` times; return total calls/s.

    A fixed count (not a deadline) is used because a call that completes without
    suspending never lets another task run: a deadline checked by a sleeping task would
    never fire.
    """

    async def caller(call: Callable[[], Awaitable[Any]]) -> None:
        for _ in range(count):
            await call()

    gc.collect()
    t0 = time.perf_counter()
    if len(calls) == 1:
        await caller(calls[0])
    else:
        await asyncio.gather(*(caller(c) for c in calls))
    elapsed = time.perf_counter() - t0
    return len(calls) * count / elapsed


# -- baseline 1: the bare mailbox ------------------------------------------------------------
class BareActor:
    """An asyncio.Queue and a worker task: the smallest honest actor."""

    __slots__ = ("count", "queue", "task")

    def __init__(self) -> None:
        self.count = 0
        self.queue: asyncio.Queue[tuple[str, tuple[Any, ...], asyncio.Future[Any]]] = (
            asyncio.Queue()
        )
        self.task = asyncio.get_running_loop().create_task(self._work())

    async def increment(self) -> int:
        self.count += 1
        return self.count

    async def bump(self) -> int:
        """Suspends once (as a method that writes state or calls another grain does)."""
        await asyncio.sleep(0)
        self.count += 1
        return self.count

    async def _work(self) -> None:
        get = self.queue.get
        while True:
            method, args, fut = await get()
            try:
                result = await getattr(self, method)(*args)
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(exc)
            else:
                if not fut.done():
                    fut.set_result(result)

    async def call(self, method: str, *args: Any) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((method, args, fut))
        return await fut

    def stop(self) -> None:
        self.task.cancel()


# -- ceiling: the caller runs the method under the actor's lock ---------------------------------
class LockedActor:
    """One turn at a time without a mailbox: the caller itself runs the method while it holds
    the actor's ``asyncio.Lock``. The same guarantee as a mailbox for non-reentrant calls, and
    the cheapest way to get it in asyncio; a ceiling, not a design (no placement, no
    messages, no timeouts)."""

    __slots__ = ("count", "lock")

    def __init__(self) -> None:
        self.count = 0
        self.lock = asyncio.Lock()

    async def increment(self) -> int:
        async with self.lock:
            self.count += 1
            return self.count


# -- baseline 2: TCP echo with the gateway's framing ----------------------------------------
class EchoServer:
    """A streams server: read frames, decode the request, answer [2, id, True, value]."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        transport = writer.transport
        readexactly = reader.readexactly
        write = writer.write
        value = 0
        try:
            while True:
                size = int.from_bytes(await readexactly(4), "big")
                request = msgpack.unpackb(await readexactly(size))
                value += 1
                payload = msgpack.packb([2, request[1], True, value])
                write(len(payload).to_bytes(4, "big") + payload)
                if transport.get_write_buffer_size() > 1 << 16:
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()  # the handler sees EOF and returns
        if self._server is not None:
            await self._server.wait_closed()


class EchoClient:
    """Many requests in flight on one connection, responses matched by id."""

    def __init__(self) -> None:
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self._reader_task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def connect(self, port: int) -> None:
        reader, self._writer = await asyncio.open_connection("127.0.0.1", port)
        self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        readexactly = reader.readexactly
        pending = self._pending
        try:
            while True:
                size = int.from_bytes(await readexactly(4), "big")
                response = msgpack.unpackb(await readexactly(size))
                fut = pending.pop(response[1], None)
                if fut is not None and not fut.done():
                    fut.set_result(response[3])
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            for fut in pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError(f"echo server went away: {exc!r}"))
            pending.clear()

    async def call(self, type_name: str, key: Any, method: str, *args: Any) -> Any:
        """Send a request shaped like a gateway request and await its response."""
        assert self._writer is not None
        corr = next(self._ids)
        payload = msgpack.packb([0, corr, type_name, key, method, list(args), None, 30.0, []])
        fut = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        self._writer.write(len(payload).to_bytes(4, "big") + payload)
        return await fut

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()
            await asyncio.gather(self._reader_task, return_exceptions=True)


# -- baseline 3: a coalescing echo -----------------------------------------------------------
class _Coalescing(asyncio.Protocol):
    """Frames split from each chunk read (one read per chunk, not two per frame) and every
    frame written in one loop pass sent with one ``write``: what a tuned transport does."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._out: list[bytes] = []
        self._flushing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        start, end = 0, len(buf)
        while end - start >= 4:
            size = int.from_bytes(buf[start:start + 4], "big")
            if end - start - 4 < size:
                break
            self.frame(msgpack.unpackb(buf[start + 4:start + 4 + size]))
            start += 4 + size
        del buf[:start]

    def frame(self, obj: Any) -> None:
        raise NotImplementedError

    def send(self, obj: Any) -> None:
        payload = msgpack.packb(obj)
        self._out.append(len(payload).to_bytes(4, "big") + payload)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))


class CoalescingEchoServer:
    """The echo of ``EchoServer`` (decode the request, answer ``[2, id, True, value]``) with
    coalesced reads and writes."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self.value = 0

    async def start(self, port: int = 0) -> None:
        echo = self

        class Conn(_Coalescing):
            def frame(self, obj: Any) -> None:
                echo.value += 1
                self.send([2, obj[1], True, echo.value])

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(Conn, "127.0.0.1", port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


class CoalescingEchoClient(_Coalescing):
    """Requests of one loop pass sent with one write; responses matched by id."""

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)

    async def connect(self, port: int) -> None:
        await asyncio.get_running_loop().create_connection(lambda: self, "127.0.0.1", port)

    def frame(self, obj: Any) -> None:
        fut = self._pending.pop(obj[1], None)
        if fut is not None and not fut.done():
            fut.set_result(obj[3])

    async def call(self, type_name: str, key: Any, method: str, *args: Any) -> Any:
        corr = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        self._pending[corr] = fut
        self.send([0, corr, type_name, key, method, list(args), None, 30.0, []])
        return await fut

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# -- baseline 4: a coalescing relay (the middle of a two-hop echo) -----------------------------
class _RelayHalf(asyncio.Protocol):
    """One side of a relayed connection: frames read here are written to ``peer`` as bytes,
    the frames of one loop pass with one write."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _RelayHalf | None = None
        self._buffer = bytearray()
        self._out: list[bytes] = []
        self._flushing = False
        self._early: list[bytes] = []
        self.frames = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        start, end = 0, len(buf)
        peer = self.peer
        while end - start >= 4:
            size = int.from_bytes(buf[start:start + 4], "big")
            if end - start - 4 < size:
                break
            frame = bytes(buf[start:start + 4 + size])
            header = msgpack.unpackb(memoryview(frame)[4:])  # what the frame is: kind, id
            self.frames += header[0] >= 0
            if peer is None:
                self._early.append(frame)
            else:
                peer.forward(frame)
            start += 4 + size
        del buf[:start]

    def attach(self, peer: _RelayHalf) -> None:
        self.peer = peer
        for frame in self._early:
            peer.forward(frame)
        self._early.clear()

    def forward(self, frame: bytes) -> None:
        self._out.append(frame)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        out, self._out = self._out, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()


class CoalescingRelay:
    """A relay in front of an echo server at ``upstream_port`` (see the module doc)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, port: int = 0) -> None:
        loop = asyncio.get_running_loop()
        relay = self

        def accepted() -> _RelayHalf:
            down = _RelayHalf()
            task = loop.create_task(relay._connect_upstream(down))
            relay._tasks.add(task)
            task.add_done_callback(relay._tasks.discard)
            return down

        self._server = await loop.create_server(accepted, "127.0.0.1", port)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _connect_upstream(self, down: _RelayHalf) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(_RelayHalf, "127.0.0.1", self.upstream_port)
        up.attach(down)
        down.attach(up)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
