"""A silo, a ClusterClient and a stream run on one ``FakeClock``: no component waits in real
time. The client publishes through the gateway; the silo's pulling agents read the queue
(memory, or SQLite on its database thread) and deliver to an implicit consumer grain and,
through the client's stream receiver, to a handler in the client, which fails once: the
agent backs off and delivers again. Every timer and sleep the runtime starts comes from the
clock, so time moves only when the test advances it.

The guard: while the silo and the client run, the event loop's ``call_later`` / ``call_at``
fail the test for any timer with a delay (``asyncio.sleep(d)``, ``asyncio.timeout(d)`` and
``asyncio.wait(timeout=d)`` all come down to them). The one timer allowed is the silo's
event-loop lag sampler, which measures the loop itself and which nothing waits for.
"""

from __future__ import annotations

import asyncio
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orleanspy import ClusterClient, Grain, Silo, SiloOptions
from orleanspy.client.options import ClientOptions
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory, SqliteAdapterFactory
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.provider import implicit_subscription
from orleanspy.testing import FakeClock

WAIT = 30.0  # real seconds: only a bound for a broken test; nothing here waits for time
RECEIVED: dict[str, list[int]] = {}


@implicit_subscription("ticks")
class TickCounter(Grain):
    async def on_next(self, item: int, token: Any) -> None:
        RECEIVED.setdefault(str(self.key), []).append(item)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _is_lag_sampler(callback: Callable[..., Any]) -> bool:
    return getattr(callback, "__name__", "") == "_sample_lag"


@contextmanager
def no_real_timers(loop: asyncio.AbstractEventLoop) -> Iterator[list[str]]:
    """Record every timer with a delay started on ``loop`` (its stack), but the lag sampler."""
    offenders: list[str] = []
    call_later, call_at = loop.call_later, loop.call_at

    def guarded_later(delay: float, callback: Callable[..., Any], *args: Any,
                      **kwargs: Any) -> asyncio.TimerHandle:
        if delay > 0 and not _is_lag_sampler(callback):
            offenders.append(f"call_later({delay}) {callback!r}\n"
                             + "".join(traceback.format_stack(limit=12)))
        return call_later(delay, callback, *args, **kwargs)

    def guarded_at(when: float, callback: Callable[..., Any], *args: Any,
                   **kwargs: Any) -> asyncio.TimerHandle:
        if when > loop.time() and not _is_lag_sampler(callback):
            offenders.append(f"call_at(+{when - loop.time():.3f}) {callback!r}\n"
                             + "".join(traceback.format_stack(limit=12)))
        return call_at(when, callback, *args, **kwargs)

    loop.call_later = guarded_later  # type: ignore[method-assign,assignment]
    loop.call_at = guarded_at  # type: ignore[method-assign,assignment]
    try:
        yield offenders
    finally:
        del loop.call_later, loop.call_at  # the class's methods again


async def advance_until(clock: FakeClock, done: Callable[[], bool], *, step: float = 0.01,
                        within: float = 60.0) -> None:
    """Move fake time in ``step``s until ``done()``; fail past ``within`` fake seconds."""
    start = clock.monotonic()
    while not done():
        assert clock.monotonic() - start <= within, f"not done within {within:g} fake s"
        await clock.run_for(step)


@pytest.mark.parametrize("adapter", ["memory", "sqlite"])
async def test_a_silo_a_client_and_a_stream_run_on_a_fake_clock_without_real_waits(
    adapter: str, tmp_path: Path
) -> None:
    RECEIVED.clear()
    clock = FakeClock()
    port = free_port()
    factory: QueueAdapterFactory = (
        MemoryAdapterFactory() if adapter == "memory"
        else SqliteAdapterFactory(str(tmp_path / "queues.db")))
    provider = PersistentStreamProvider(
        factory,
        StreamProviderOptions(total_queues=2, pull_period=0.1, delivery_backoff=5.0,
                              max_delivery_backoff=10.0, max_delivery_time=60.0),
    )
    silo = Silo(SiloOptions(gateway_port=port, collection_quantum=3600.0),
                grains=[TickCounter], stream_providers={"s": provider}, clock=clock)
    client = ClusterClient(ClientOptions(gateways=(f"127.0.0.1:{port}",), response_timeout=5.0),
                           clock=clock)
    got: list[int] = []
    failed_once: list[int] = []

    async def on_next(item: int, token: Any) -> None:
        if item == 3 and not failed_once:
            failed_once.append(item)
            raise RuntimeError("once")  # the agent backs off (fake time) and retries
        got.append(item)

    wall0, fake0 = time.monotonic(), clock.monotonic()
    async with asyncio.timeout(WAIT):  # (started before the guard: the test's own bound)
        with no_real_timers(asyncio.get_running_loop()) as offenders:
            await silo.start()
            try:
                await client.connect()
                stream = client.get_stream_provider("s").get_stream("ticks", "a", int)
                handle = await stream.subscribe(on_next)
                for i in range(10):
                    await stream.on_next(i)
                await advance_until(
                    clock, lambda: len(got) == 10 and len(RECEIVED.get("a", ())) == 10,
                    step=0.05)
                await handle.unsubscribe()
                await client.close()
            finally:
                await silo.stop()
    wall, fake = time.monotonic() - wall0, clock.monotonic() - fake0

    assert not offenders, "a component waited in real time:\n" + "\n".join(offenders)
    assert got == list(range(10))  # in order; the failed one retried after its back-off
    assert failed_once == [3]
    assert RECEIVED["a"] == list(range(10))
    assert fake >= 4.5  # the back-off (5 s, jitter 10 %) passed in fake time ...
    assert wall < fake  # ... and nothing waited for it in real time
