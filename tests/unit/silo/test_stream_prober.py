"""The stream prober measures, like a customer, how long subscribing and delivery take: its
delivery figure rises when a consumer of the silo is slowed (here one that holds the event
loop in its handler), and a probe over the bound is logged at warning."""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orleanspy import Grain, Silo, SiloOptions
from orleanspy.streams import PersistentStreamProvider, StreamProviderOptions
from orleanspy.streams.adapters import MemoryAdapterFactory
from silo.dashboard.metrics import metrics_text, registry_for
from silo.dashboard.prober import install_prober

SLOW = 0.02  # seconds the slow consumer holds the loop per event


class Hog(Grain):
    """A slowed consumer: each event holds the event loop (a blocking handler)."""

    async def join(self) -> None:
        async def on_next(item: Any, token: Any) -> None:
            time.sleep(SLOW)  # noqa: ASYNC251 - the fault under test: a blocking handler

        await self.get_stream_provider("s").get_stream("load", "k").subscribe(on_next)


async def feed(provider: Any, stop: asyncio.Event) -> None:
    """Events for the slowed consumer, faster than it takes them: it always has a backlog."""
    stream = provider.get_stream("load", "k")
    i = 0
    while not stop.is_set():
        await stream.on_next_batch(range(i, i + 5))
        i += 5
        await asyncio.sleep(SLOW)


@pytest.mark.timing
async def test_the_probes_delivery_figure_moves_when_a_consumer_is_slowed() -> None:
    provider = PersistentStreamProvider(MemoryAdapterFactory(),
                                        StreamProviderOptions(total_queues=1, pull_period=0.01))
    silo = Silo(SiloOptions(gateway_port=None, shutdown_timeout=5.0), grains=[Hog],
                stream_providers={"s": provider})
    prober = install_prober(silo, "s", period=3600.0, bound=1.0)  # probes on demand here
    await silo.start()
    try:
        quiet = [(await prober.probe_once())[1] for _ in range(5)]
        await silo.get_grain(Hog, "h").join()
        stop = asyncio.Event()
        feeder = asyncio.ensure_future(feed(provider, stop))
        try:
            slowed = [(await prober.probe_once())[1] for _ in range(5)]
        finally:
            stop.set()
            await feeder
        text = metrics_text(registry_for(silo)).decode()
    finally:
        await silo.stop()

    assert statistics.median(quiet) < SLOW / 4, quiet
    # the probes wait behind the slowed consumer's deliveries (5 events, 5 x SLOW, each):
    # some behind a whole one, the mean well above the quiet probes
    assert max(slowed) > 4 * SLOW, slowed
    assert statistics.mean(slowed) > max(SLOW, 10 * statistics.median(quiet)), slowed
    families = {f.name: f for f in text_string_to_metric_families(text)}
    delivery = families["orleanspy_probe_delivery_seconds"]
    count = next(s.value for s in delivery.samples if s.name.endswith("_count"))
    total = next(s.value for s in delivery.samples if s.name.endswith("_sum"))
    assert count >= 10 and total >= sum(slowed)  # 10 here, and the prober's own first one
    within = next(s.value for s in delivery.samples
                  if s.name.endswith("_bucket") and s.labels["le"] == "0.01")
    # each probe measured over 10 ms is counted above that bucket (how many of the slowed
    # probes wait behind a delivery depends on where in the hog's cycle each one lands)
    above = sum(1 for s in slowed if s > 0.01)
    assert above >= 1 and within <= count - above
    assert "orleanspy_probe_subscribe_seconds" in families


async def test_a_silo_without_the_probed_provider_refuses_to_start() -> None:
    silo = Silo(SiloOptions(gateway_port=None))
    install_prober(silo, "nope", period=1.0)
    try:
        await asyncio.wait_for(silo.start(), 10)
    except ValueError as exc:
        assert "nope" in str(exc)
    else:  # pragma: no cover - the assertion below explains
        await silo.stop()
        raise AssertionError("the silo started without the probed provider")
