"""Stream queue balancers: the static split and the assigner-backed balancer."""

from __future__ import annotations

import pytest

from orleanspy.streams import AssignedQueueBalancer, HashRingQueueMapper, StaticQueueBalancer
from orleanspy.streams.balancing import DEFAULT_ASSIGNER, EvenSplitAssigner, moved

QUEUES = HashRingQueueMapper(total_queues=8, provider="p").all_queues()


def test_static_balancer_alone_owns_every_queue():
    assert StaticQueueBalancer().my_queues(QUEUES, "a") == QUEUES


def test_static_balancer_splits_by_index_and_count():
    split = [StaticQueueBalancer(i, 3).my_queues(QUEUES, "x") for i in range(3)]

    assert sorted(q for part in split for q in part) == QUEUES
    assert [len(part) for part in split] == [3, 3, 2]


@pytest.mark.parametrize(("index", "count"), [(0, 0), (3, 3), (-1, 2)])
def test_static_balancer_rejects_an_index_outside_the_count(index, count):
    with pytest.raises(ValueError, match="0 <= index < count"):
        StaticQueueBalancer(index, count)


def test_assigned_balancer_alone_owns_every_queue_with_the_default_assigner():
    balancer = AssignedQueueBalancer()

    assert balancer.assigner is DEFAULT_ASSIGNER
    assert balancer.my_queues(QUEUES, "a") == QUEUES


def test_assigned_balancer_partitions_the_queues_between_the_active_silos():
    silos = ["a", "b", "c"]
    balancers = {s: AssignedQueueBalancer(silos=silos) for s in silos}

    owned = {s: b.my_queues(QUEUES, s) for s, b in balancers.items()}

    assert sorted(q for mine in owned.values() for q in mine) == QUEUES
    assert sorted(len(mine) for mine in owned.values()) == [2, 3, 3]


def test_assigned_balancer_moves_only_the_joiners_share_on_a_join():
    balancer = AssignedQueueBalancer(silos=["a", "b"])
    balancer.my_queues(QUEUES, "a")
    before = balancer.assignment()

    balancer.set_active_silos(["a", "b", "c"])
    mine = balancer.my_queues(QUEUES, "c")

    assert len(mine) == 2  # 8 queues on 3 silos: 3, 3, 2; the joiner takes the 2
    assert moved(before, balancer.assignment()) == 2


def test_assigned_balancer_starts_from_an_adopted_assignment():
    balancer = AssignedQueueBalancer(silos=["a", "b"])
    balancer.set_assignment(dict.fromkeys(QUEUES, "b"))

    assert balancer.my_queues(QUEUES, "b") == QUEUES[:4]  # keeps 4, releases the last 4
    assert balancer.my_queues(QUEUES, "a") == QUEUES[4:]


def test_assigned_balancer_runs_a_stateless_assigner():
    balancer = AssignedQueueBalancer(EvenSplitAssigner(), silos=["a", "b"])

    assert len(balancer.my_queues(QUEUES, "a")) == 4
