"""The silo's figures in Prometheus text format: a prometheus-client collector that reads
``Silo.statistics()`` at each scrape (nothing is counted twice, nothing runs between scrapes).

Names (all prefixed ``orleanspy_``; labels in braces):

- ``silo_up`` (1 while active), ``silo_uptime_seconds``
- ``activations{type}``, ``grain_calls_total{type, method}``,
  ``grain_call_errors_total{type, method}``, ``grain_call_seconds{type, method}`` (histogram
  of timed turns: in each second every call up to a method's first 1,024 on the silo, then
  one in 32),
  ``gateway_connections``, ``gateway_requests``, ``grains_collected_total``,
  ``reminders_fired_total``, ``reminders`` (the reminders the silo fires),
  ``event_loop_lag_seconds`` (the last measured lag)
- with a Spark session: ``spark_jobs{state}`` (running, queued) and
  ``spark_jobs_finished_total{outcome}`` (succeeded, failed, cancelled, timed_out)
- per stream queue ``{provider, queue}``: ``stream_cache_items``, ``stream_cache_capacity``,
  ``stream_cache_under_pressure``, ``stream_pull_period_seconds``,
  ``stream_read_total``, ``stream_delivered_total``, ``stream_filtered_total``,
  ``stream_acknowledged_total``,
  ``stream_delivery_failures_total``, ``stream_subscriptions``, ``stream_spilled``
- ``stream_queue_max_lag{provider, queue}`` and
  ``stream_queue_max_backlog_age_seconds{provider, queue}``: the furthest a subscription of
  the queue is behind and its oldest backlog
- ``stream_subscription_lag{provider, queue, stream, subscription, consumer}``: queue
  positions behind (the backlog), ``stream_subscription_backlog_age_seconds{...}`` (same
  labels): how long ago its oldest undelivered cached event was written; for at most
  ``MAX_SUBSCRIPTION_SERIES`` subscriptions of the silo, the furthest behind, and
  ``stream_subscription_series_omitted`` counts the others
- per provider ``{provider}``: ``stream_publish_seconds`` (histogram: from a publish to the
  queue's acknowledgement, sampled after the first 1,024 of each second),
  ``stream_delivery_latency_seconds`` (histogram: from the queue's write of a delivery's
  oldest event to the consumer's return)
- on a clustered silo, from its membership view and the stream-queue leases (no peer is
  asked): ``cluster_silo_status{peer, status}`` (1 per row of the table),
  ``cluster_silo_last_seen_timestamp_seconds{peer}``,
  ``cluster_silo_declared_dead_timestamp_seconds{peer, declared_by}``,
  ``cluster_silo_suspicions{peer}``, and ``stream_queue_unowned_seconds{provider, queue,
  last_owner}`` for each queue whose lease is missing, expired or held by a silo that is not
  active
- and prometheus-client's ``process_*`` figures (CPU seconds, resident memory, open fds).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from orleanspy._util.histogram import Histogram, cumulative
from orleanspy.runtime.call_stats import MethodStats, method_label
from orleanspy.runtime.silo import Silo
from silo.dashboard.prober import StreamProber

__all__ = ["MAX_SUBSCRIPTION_SERIES", "SiloCollector", "metrics_text", "registry_for"]

P = "orleanspy_"
#: the membership rows and unowned queues a clustered silo reports (``silo.dashboard.health``)
Health = Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]]]]
#: subscriptions of one silo that get their own lag and backlog-age series; past it, only
#: the furthest behind (the per-queue maxima and the omitted count cover the rest)
MAX_SUBSCRIPTION_SERIES: Final = 200


class SiloCollector(Collector):
    """Turns one silo's statistics into metric families at each scrape."""

    def __init__(self, silo: Silo, health: Health | None = None) -> None:
        self.silo = silo
        self.health = health

    def collect(self) -> Iterator[Metric]:
        silo = self.silo
        stats = silo.statistics()
        labels = ["silo", "cluster"]
        who = [stats.name, stats.cluster_id]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(P + name, doc, labels=labels)
            g.add_metric(who, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(P + name, doc, labels=labels)
            c.add_metric(who, value)
            return c

        yield gauge("silo_up", "1 while the silo is active", float(stats.status == "active"))
        yield gauge("silo_uptime_seconds", "seconds since the silo started", stats.uptime)
        acts = GaugeMetricFamily(P + "activations", "grain activations by grain type",
                                 labels=[*labels, "type"])
        for type_name, count in sorted(stats.activations_by_type.items()):
            acts.add_metric([*who, type_name], count)
        yield acts
        yield from _call_metrics(silo.call_statistics.types, [*labels, "type", "method"], who)
        yield gauge("gateway_connections", "open client connections",
                    stats.gateway_connections)
        yield gauge("gateway_requests", "client requests in flight on this silo",
                    stats.gateway_requests)
        yield counter("grains_collected", "activations collected for being idle",
                      stats.collected)
        yield counter("reminders_fired", "reminder ticks delivered", stats.reminders_fired)
        service = silo.reminders
        yield gauge("reminders", "reminders this silo fires",
                    float(getattr(service, "count", 0) or 0))
        spark = stats.extensions.get("spark")
        if spark is not None:
            yield from _spark_metrics(spark, labels, who)
        yield gauge("event_loop_lag_seconds", "how late the event loop ran a timer, last "
                    "measured", silo.loop_lag)
        yield from _stream_metrics(stats.streams, labels, who)
        yield from _stream_latency(silo, [*labels, "provider"], who)
        if self.health is not None:
            yield from _cluster_metrics(*self.health(), labels, who)
        prober = silo.lifecycle.component(StreamProber)
        if prober is not None:
            yield from _probe_metrics(prober, [*labels, "provider"], [*who, prober.provider])


def _spark_metrics(spark: Any, labels: list[str], who: list[str]) -> Iterator[Metric]:
    jobs = GaugeMetricFamily(P + "spark_jobs", "Spark jobs in flight by state",
                             labels=[*labels, "state"])
    jobs.add_metric([*who, "running"], spark.jobs_running)
    jobs.add_metric([*who, "queued"], spark.jobs_queued)
    yield jobs
    done = CounterMetricFamily(P + "spark_jobs_finished", "Spark jobs finished by outcome",
                               labels=[*labels, "outcome"])
    for outcome in ("succeeded", "failed", "cancelled", "timed_out"):
        done.add_metric([*who, outcome], getattr(spark, f"jobs_{outcome}"))
    yield done


def _call_metrics(types: dict[str, dict[str, MethodStats]], labels: list[str],
                  who: list[str]) -> Iterator[Metric]:
    calls = CounterMetricFamily(P + "grain_calls", "grain method calls", labels=labels)
    errors = CounterMetricFamily(P + "grain_call_errors", "grain method calls that raised",
                                 labels=labels)
    seconds = HistogramMetricFamily(P + "grain_call_seconds",
                                    "time of a grain method's turn, start to end (timed calls)",
                                    labels=labels)
    for type_name, methods in sorted(types.items()):
        for method, stats in sorted(methods.items()):
            key = [*who, type_name, method_label(method)]
            calls.add_metric(key, stats.calls)
            errors.add_metric(key, stats.errors)
            seconds.add_metric(key, cumulative(stats.buckets), sum_value=stats.seconds)
    yield calls
    yield errors
    yield seconds


def _stream_latency(silo: Silo, labels: list[str], who: list[str]) -> Iterator[Metric]:
    families = {
        "publish_latency": HistogramMetricFamily(
            P + "stream_publish_seconds", "time from a publish to the queue's acknowledgement",
            labels=labels),
        "delivery_latency": HistogramMetricFamily(
            P + "stream_delivery_latency_seconds",
            "time from the queue's write of an event to its consumer's return", labels=labels),
    }
    for name, provider in sorted(silo.stream_providers.items()):
        for attr, family in families.items():
            hist = getattr(provider, attr, None)
            if isinstance(hist, Histogram):
                family.add_metric([*who, name], cumulative(hist.buckets),
                                  sum_value=hist.seconds)
    yield from families.values()


def _probe_metrics(prober: StreamProber, labels: list[str], key: list[str]) -> Iterator[Metric]:
    for name, doc, hist in (
        ("probe_subscribe_seconds", "time a probe's subscription took", prober.subscribe),
        ("probe_delivery_seconds", "time a probe event took from publish to its handler",
         prober.delivery),
    ):
        family = HistogramMetricFamily(P + name, doc, labels=labels)
        family.add_metric(key, hist.buckets(), sum_value=hist.total)
        yield family
    failures = CounterMetricFamily(P + "probe_failures", "probes that failed or were lost",
                                   labels=labels)
    failures.add_metric(key, prober.failures)
    yield failures


def _stream_metrics(streams: dict[str, list[Any]], labels: list[str],
                    who: list[str]) -> Iterator[Metric]:
    q_labels = [*labels, "provider", "queue"]
    gauges = {
        "stream_cache_items": ("containers in the queue's cache", "cache_size"),
        "stream_cache_capacity": ("the cache's bound", "cache_max"),
        "stream_cache_under_pressure": ("1 while the cache is under pressure",
                                        "under_pressure"),
        "stream_pull_period_seconds": ("the agent's current pull period", "pull_period"),
        "stream_subscriptions": ("subscriptions the agent serves", "subscriptions"),
        "stream_spilled": ("subscriptions served from the queue", "spilled"),
    }
    counters = {
        "stream_read": ("containers read from the queue", "read"),
        "stream_delivered": ("events delivered", "delivered"),
        "stream_filtered": ("events a subscription's filter did not match", "filtered"),
        "stream_acknowledged": ("containers acknowledged to the queue", "acknowledged"),
        "stream_delivery_failures": ("failed delivery attempts", "failures"),
    }
    families: dict[str, Any] = {
        name: GaugeMetricFamily(P + name, doc, labels=q_labels)
        for name, (doc, _) in gauges.items()
    }
    families.update({
        name: CounterMetricFamily(P + name, doc, labels=q_labels)
        for name, (doc, _) in counters.items()
    })
    for provider, agents in sorted(streams.items()):
        for agent in agents:
            key = [*who, provider, str(agent.queue)]
            for name, (_, attr) in (*gauges.items(), *counters.items()):
                families[name].add_metric(key, float(getattr(agent, attr)))
    yield from families.values()
    yield from _subscription_metrics(streams, q_labels, who)


def _subscription_metrics(streams: dict[str, list[Any]], q_labels: list[str],
                          who: list[str], cap: int | None = None) -> Iterator[Metric]:
    """Per queue the furthest lag and oldest backlog age; per (stream, subscription) its lag
    and backlog age, for at most ``cap`` subscriptions of the silo (the furthest behind:
    a silo with many streams keeps a bounded number of series), with the count left out."""
    cap = MAX_SUBSCRIPTION_SERIES if cap is None else cap
    max_lag = GaugeMetricFamily(P + "stream_queue_max_lag", "the furthest a subscription of "
                                "the queue is behind, in queue positions", labels=q_labels)
    max_age = GaugeMetricFamily(P + "stream_queue_max_backlog_age_seconds", "how long ago "
                                "the oldest undelivered cached event of a subscription of "
                                "the queue was written", labels=q_labels)
    s_labels = [*q_labels, "stream", "subscription", "consumer"]
    lag = GaugeMetricFamily(P + "stream_subscription_lag",
                            "queue positions a subscription is behind", labels=s_labels)
    age = GaugeMetricFamily(P + "stream_subscription_backlog_age_seconds",
                            "how long ago a subscription's oldest undelivered cached event "
                            "was written", labels=s_labels)
    rows: list[tuple[list[str], Any]] = []
    for provider, agents in sorted(streams.items()):
        for agent in agents:
            key = [*who, provider, str(agent.queue)]
            max_lag.add_metric(key, agent.max_lag)
            ages = [s.age for s in agent.subs if s.age is not None]
            if ages:
                max_age.add_metric(key, max(ages))
            rows.extend((key, s) for s in agent.subs)
    rows.sort(key=lambda r: (-r[1].lag, -(r[1].age or 0.0), r[0], r[1].stream,
                             r[1].subscription))
    for key, s in rows[:cap]:
        labels = [*key, s.stream, s.subscription, s.consumer]
        lag.add_metric(labels, s.lag)
        if s.age is not None:
            age.add_metric(labels, s.age)
    omitted = GaugeMetricFamily(P + "stream_subscription_series_omitted",
                                "subscriptions of the silo without lag series (over the cap "
                                f"of {cap}: only the furthest behind have them)",
                                labels=q_labels[:-2])
    omitted.add_metric(who, max(0, len(rows) - cap))
    yield from (max_lag, max_age, lag, age, omitted)


def _cluster_metrics(silos: list[dict[str, Any]], unowned: list[dict[str, Any]],
                     labels: list[str], who: list[str]) -> Iterator[Metric]:
    """Every row of the membership table as this silo sees it, and the queues nobody
    holds (``silo.dashboard.health``)."""
    peer = [*labels, "peer"]
    status = GaugeMetricFamily(P + "cluster_silo_status", "1 for each silo of the "
                               "membership table, labelled with its status",
                               labels=[*peer, "status"])
    seen = GaugeMetricFamily(P + "cluster_silo_last_seen_timestamp_seconds",
                             "when the silo last wrote I-am-alive (epoch)", labels=peer)
    dead = GaugeMetricFamily(P + "cluster_silo_declared_dead_timestamp_seconds",
                             "when the silo was declared dead (epoch)",
                             labels=[*peer, "declared_by"])
    suspected = GaugeMetricFamily(P + "cluster_silo_suspicions", "fresh suspect votes "
                                  "against a silo that is neither stopped nor dead", labels=peer)
    for row in silos:
        key = [*who, row["silo"]]
        status.add_metric([*key, row["status"]], 1.0)
        if row["last_seen"]:
            seen.add_metric(key, row["last_seen"])
        if row["declared_dead_at"]:
            dead.add_metric([*key, " ".join(row["declared_dead_by"])],
                            row["declared_dead_at"])
        suspected.add_metric(key, float(len(row["suspected_by"])))
    q_labels = [*labels, "provider", "queue", "last_owner"]
    queues = GaugeMetricFamily(P + "stream_queue_unowned_seconds", "how long a queue has "
                               "had no live owner (only queues without one)", labels=q_labels)
    for q in unowned:
        queues.add_metric([*who, q["provider"], q["queue"], q["last_owner"] or ""],
                          q["for_seconds"] or 0.0)
    yield from (status, seen, dead, suspected, queues)


def registry_for(silo: Silo, health: Health | None = None) -> CollectorRegistry:
    """A registry of its own (never the process-global one): several silos in one process
    each export their own figures. ``health`` gives the membership rows and unowned queues
    of a clustered silo (read before each scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SiloCollector(silo, health))
    ProcessCollector(registry=registry)
    return registry


def metrics_text(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
