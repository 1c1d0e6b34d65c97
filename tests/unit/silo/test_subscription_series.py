"""The per-subscription lag series of ``/metrics`` are bounded: past the cap only the
furthest-behind subscriptions have series, the per-queue maxima cover every subscription,
and the omitted count says how many were left out. Subscriptions that share an id on two
streams (every stream's implicit subscription of a consumer type has the same one) are two
series."""

from __future__ import annotations

from typing import Any

from orleanspy.streams.pulling.reporting import AgentStatistics, SubscriptionFigures
from silo.dashboard.metrics import MAX_SUBSCRIPTION_SERIES, _subscription_metrics


def agent(queue: str, subs: list[SubscriptionFigures]) -> AgentStatistics:
    return AgentStatistics(
        queue=queue, cache_size=0, cache_max=10, under_pressure=False, pull_period=0.1,
        read=0, delivered=0, acknowledged=0, failures=0, streams=len(subs),
        subscriptions=len(subs), subs=tuple(subs))


def samples(families: list[Any], name: str) -> dict[tuple[str, ...], float]:
    (family,) = [f for f in families if f.name == "orleanspy_" + name]
    return {tuple(s.labels.values()): s.value for s in family.samples}


def test_the_furthest_behind_get_series_up_to_the_cap_and_the_rest_are_counted() -> None:
    implicit = "implicit:Counter"
    q0 = agent("s-0", [
        SubscriptionFigures("a/1", implicit, "Counter/1", lag=31, age=2.5),
        SubscriptionFigures("a/2", implicit, "Counter/2", lag=0),
        *(SubscriptionFigures(f"b/{i}", implicit, f"Counter/b{i}", lag=i) for i in range(5)),
    ])
    q1 = agent("s-1", [SubscriptionFigures("c/1", "sub-x", "Other/c", lag=7, age=1.0)])
    cap = 3
    families = list(_subscription_metrics({"p": [q0, q1]}, ["silo", "cluster", "provider",
                                                             "queue"], ["S", "C"], cap=cap))
    lag = samples(families, "stream_subscription_lag")
    assert lag == {("S", "C", "p", "s-0", "a/1", implicit, "Counter/1"): 31,
                   ("S", "C", "p", "s-1", "c/1", "sub-x", "Other/c"): 7,
                   ("S", "C", "p", "s-0", "b/4", implicit, "Counter/b4"): 4}
    age = samples(families, "stream_subscription_backlog_age_seconds")
    assert age == {("S", "C", "p", "s-0", "a/1", implicit, "Counter/1"): 2.5,
                   ("S", "C", "p", "s-1", "c/1", "sub-x", "Other/c"): 1.0}
    assert samples(families, "stream_queue_max_lag") == {
        ("S", "C", "p", "s-0"): 31, ("S", "C", "p", "s-1"): 7}
    assert samples(families, "stream_subscription_series_omitted") == {("S", "C"): 8 - cap}

    families = list(_subscription_metrics({"p": [q0, q1]}, ["silo", "cluster", "provider",
                                                             "queue"], ["S", "C"]))
    assert len(samples(families, "stream_subscription_lag")) == 8 <= MAX_SUBSCRIPTION_SERIES
    assert samples(families, "stream_subscription_series_omitted") == {("S", "C"): 0}
