"""A built-in stream prober, as a customer would probe the service: every ``period`` it
subscribes a probe grain to a stream of one provider, publishes one marked event, and
measures how long the subscription took and how long the event took to arrive; then it
unsubscribes. The figures are histograms in ``/metrics``; a probe over ``bound`` (or one
that fails) is logged at warning.

Metrics (labels ``silo``, ``cluster``, ``provider``):
``orleanspy_probe_subscribe_seconds`` and ``orleanspy_probe_delivery_seconds``
(histograms), ``orleanspy_probe_failures_total``.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Final

from orleanspy import ConfigurationError, Grain, grain_type
from orleanspy.grains.interface import runtime_grain
from orleanspy.logging import get_logger
from orleanspy.runtime.silo import Silo

__all__ = ["BUCKETS", "PROBE_NAMESPACE", "ProbeConsumer", "StreamProber", "install_prober"]

PROBE_NAMESPACE: Final = "orleanspy-probe"
BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                  10.0)


@dataclass
class Histogram:
    """Cumulative counts per bucket upper bound (Prometheus' layout), plus sum and count."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))
    total: float = 0.0
    n: int = 0
    last: float = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1
        self.total += value
        self.n += 1
        self.last = value

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*BUCKETS, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


@runtime_grain
@grain_type("orleanspy.StreamProbe")
class ProbeConsumer(Grain):
    """The prober's consumer: hands each probe event back to the silo's prober."""

    async def subscribe(self, provider: str, key: str) -> str:
        stream = self.get_stream_provider(provider).get_stream(PROBE_NAMESPACE, key)
        handle = await stream.subscribe(self._on_probe)
        return str(handle.sub_id)

    async def unsubscribe(self, provider: str, key: str) -> None:
        stream = self.get_stream_provider(provider).get_stream(PROBE_NAMESPACE, key)
        for handle in await stream.get_subscriptions():
            await handle.unsubscribe()

    async def _on_probe(self, item: Any, token: Any) -> None:
        prober = self.silo.lifecycle.component(StreamProber)
        if prober is not None:
            prober.arrived(item)


class StreamProber:
    """Probes one stream provider of one silo (a lifecycle participant)."""

    def __init__(self, silo: Silo, provider: str, period: float = 10.0,
                 bound: float = 5.0) -> None:
        if period <= 0 or bound <= 0:
            raise ConfigurationError("the prober's period and bound must be > 0 seconds")
        self.silo = silo
        self.provider = provider
        self.period = period
        self.bound = bound
        self.subscribe = Histogram()
        self.delivery = Histogram()
        self.failures = 0
        self._waiting: dict[int, asyncio.Future[float]] = {}
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._one_at_a_time = asyncio.Lock()  # probes share the probe grain and stream
        self.log = get_logger(__name__, silo=silo.name, provider=provider)

    def report(self) -> dict[str, Any]:
        """The prober's figures as plain values (the cluster view's prober panel)."""
        d, sub = self.delivery, self.subscribe
        return {"provider": self.provider, "period": self.period, "bound": self.bound,
                "probes": d.n, "failures": self.failures,
                "last_subscribe_seconds": sub.last if sub.n else None,
                "last_delivery_seconds": d.last if d.n else None,
                "mean_delivery_seconds": d.total / d.n if d.n else None}

    async def start(self) -> None:
        if self.provider not in self.silo.stream_providers:
            raise ConfigurationError(
                f"--stream-prober {self.provider}: the silo has no such stream provider "
                f"(it has {sorted(self.silo.stream_providers) or 'none'})")
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for waiter in self._waiting.values():
            waiter.cancel()

    def arrived(self, item: Any) -> None:
        if isinstance(item, dict):
            waiter = self._waiting.get(item.get("probe"))  # type: ignore[arg-type]
            if waiter is not None and not waiter.done():
                waiter.set_result(time.perf_counter())

    async def _run(self) -> None:
        while True:
            try:
                await self.probe_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # loop boundary: count, log, go on
                self.failures += 1
                self.log.warning("stream_probe_failed", error=repr(exc))
            await asyncio.sleep(self.period)

    async def probe_once(self) -> tuple[float, float]:
        """One probe: (subscribe seconds, delivery seconds). A probe whose event has not
        arrived within ``4 * bound + 1`` seconds is lost (counted, logged, raised)."""
        async with self._one_at_a_time:
            return await self._probe()

    async def _probe(self) -> tuple[float, float]:
        silo = self.silo
        key = str(silo.name)
        consumer = silo.get_grain(ProbeConsumer, key)
        probe = next(self._ids)
        waiter: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting[probe] = waiter
        try:
            t0 = time.perf_counter()
            await consumer.subscribe(self.provider, key)
            subscribed = time.perf_counter() - t0
            stream = silo.stream_providers[self.provider].get_stream(PROBE_NAMESPACE, key)
            sent = time.perf_counter()
            await stream.on_next({"probe": probe})
            patience = 4 * self.bound + 1
            try:
                async with asyncio.timeout(patience):
                    arrived = await waiter
            except TimeoutError:
                self.log.warning("stream_probe_lost", probe=probe, waited=patience)
                raise
            delivered = arrived - sent
        finally:
            self._waiting.pop(probe, None)
            try:
                await consumer.unsubscribe(self.provider, key)
            except Exception as exc:
                self.log.warning("stream_probe_unsubscribe_failed", error=repr(exc))
        self.subscribe.observe(subscribed)
        self.delivery.observe(delivered)
        if subscribed > self.bound or delivered > self.bound:
            self.log.warning("stream_probe_slow", subscribe_seconds=round(subscribed, 4),
                             delivery_seconds=round(delivered, 4), bound=self.bound)
        return subscribed, delivered


def install_prober(silo: Silo, provider: str, period: float = 10.0,
                   bound: float = 5.0) -> StreamProber:
    """Probe ``provider`` of ``silo`` while it runs (register before the silo starts)."""
    from orleanspy._util.lifecycle import SiloStage

    prober = StreamProber(silo, provider, period, bound)
    silo.register_grain_class(ProbeConsumer)
    silo.lifecycle.set_component(StreamProber, prober)
    silo.lifecycle.subscribe("stream-prober", SiloStage.ACTIVE + 100,  # probes an active silo
                             on_start=prober.start, on_stop=prober.stop,
                             statistics=prober.report)
    return prober
