"""Membership building blocks: votes, the monitoring graph, snapshots, options, row encoding."""

from __future__ import annotations

import asyncio
import dataclasses
from types import MappingProxyType

import msgpack
import pytest

from orleanspy.cluster.membership import (
    MembershipEntry,
    MembershipOptions,
    MembershipSnapshot,
    MembershipTableData,
    SiloStatus,
    SuspectVote,
    TableVersion,
)
from orleanspy.cluster.membership.entry import decode_entry, encode_entry
from orleanspy.cluster.membership.monitoring import monitored_silos
from orleanspy.cluster.membership.snapshot import SnapshotPublisher
from orleanspy.cluster.membership.voting import add_vote, fresh_votes, is_stale, votes_required
from orleanspy.errors import ConfigurationError, MembershipError
from orleanspy.ids import SiloAddress

WAIT = 5.0
ACTIVE, DEAD = SiloStatus.ACTIVE, SiloStatus.DEAD


def silo(n: int) -> SiloAddress:
    return SiloAddress("10.0.0.1", 11000 + n, 1)


def entry(n: int, status: SiloStatus = ACTIVE, alive: float = 1000.0) -> MembershipEntry:
    return MembershipEntry(silo=silo(n), status=status, i_am_alive_time=alive)


# -- votes -------------------------------------------------------------------------------


def test_voting_fresh_votes_drops_votes_older_than_the_expiration() -> None:
    votes = (SuspectVote(silo(1), 100.0), SuspectVote(silo(2), 150.0))

    assert fresh_votes(votes, now=200.0, expiration=60.0) == (SuspectVote(silo(2), 150.0),)
    assert fresh_votes(votes, now=200.0, expiration=100.0) == votes
    assert fresh_votes((), now=200.0, expiration=1.0) == ()


def test_voting_fresh_votes_measure_from_the_newest_vote_when_it_is_ahead_of_now() -> None:
    # The second voter's clock runs 50 s ahead: the first vote stays fresh relative to it.
    votes = (SuspectVote(silo(1), 100.0), SuspectVote(silo(2), 250.0))

    assert fresh_votes(votes, now=200.0, expiration=150.0) == votes
    assert fresh_votes(votes, now=200.0, expiration=149.0) == (SuspectVote(silo(2), 250.0),)


def test_voting_add_vote_replaces_the_voters_earlier_vote_and_drops_expired_ones() -> None:
    votes = (SuspectVote(silo(1), 10.0), SuspectVote(silo(2), 90.0), SuspectVote(silo(3), 95.0))

    result = add_vote(votes, silo(2), 100.0, expiration=50.0)

    assert result == (SuspectVote(silo(3), 95.0), SuspectVote(silo(2), 100.0))


@pytest.mark.parametrize(
    ("active", "required"), [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2), (10, 2)]
)
def test_voting_votes_required_is_a_majority_of_small_clusters(active: int, required: int) -> None:
    entries = [entry(n) for n in range(active)]
    entries.append(entry(99, DEAD))
    entries.append(entry(98, SiloStatus.JOINING))

    assert votes_required(entries, 1000.0, votes=2, i_am_alive_expiration=90.0) == required


def test_voting_votes_required_does_not_count_stale_silos() -> None:
    entries = [entry(1), entry(2), entry(3, alive=0.0), entry(4, alive=0.0)]

    assert votes_required(entries, 1000.0, votes=2, i_am_alive_expiration=90.0) == 1
    assert votes_required(entries, 1000.0, votes=3, i_am_alive_expiration=2000.0) == 2


def test_voting_is_stale_after_the_expiration() -> None:
    assert not is_stale(entry(1, alive=1000.0), 1090.0, 90.0)
    assert is_stale(entry(1, alive=1000.0), 1090.5, 90.0)


# -- monitoring --------------------------------------------------------------------------


def test_monitoring_small_cluster_monitors_every_other_silo() -> None:
    silos = [silo(n) for n in range(4)]

    assert set(monitored_silos(silos[0], silos, 3)) == set(silos[1:])
    assert monitored_silos(silos[0], [silos[0]], 3) == ()


def test_monitoring_each_silo_monitors_count_others_and_is_monitored() -> None:
    silos = [silo(n) for n in range(40)]
    in_degree = dict.fromkeys(silos, 0)

    for me in silos:
        chosen = monitored_silos(me, silos, 3)
        assert len(chosen) == 3
        assert len(set(chosen)) == 3
        assert me not in chosen
        for target in chosen:
            in_degree[target] += 1

    assert min(in_degree.values()) >= 1
    assert max(in_degree.values()) <= 8


def test_monitoring_is_the_same_in_every_process_and_order() -> None:
    silos = [silo(n) for n in range(10)]

    first = monitored_silos(silos[3], silos, 3)
    second = monitored_silos(silos[3], list(reversed(silos)), 3)

    assert first == second == monitored_silos(silos[3], silos, 3)


def test_monitoring_a_join_changes_few_monitored_sets() -> None:
    silos = [silo(n) for n in range(30)]
    before = {me: set(monitored_silos(me, silos, 3)) for me in silos}
    joined = [*silos, silo(100)]

    changed = sum(before[me] != set(monitored_silos(me, joined, 3)) for me in silos)

    assert changed <= 6


# -- snapshots ---------------------------------------------------------------------------


def snapshot(version: int, *entries: MembershipEntry) -> MembershipSnapshot:
    return MembershipSnapshot(version, MappingProxyType({e.silo: e for e in entries}))


def test_snapshot_from_table_keys_rows_by_silo() -> None:
    data = MembershipTableData(((entry(1), "e1"), (entry(2, DEAD), "e2")), TableVersion(7, "x"))

    result = MembershipSnapshot.from_table(data)

    assert result.version == 7
    assert result.status_of(silo(2)) is DEAD
    assert result.status_of(silo(3)) is None
    assert result.active_silos == (silo(1),)


def test_snapshot_silos_are_sorted_by_host_port_generation() -> None:
    result = snapshot(1, entry(3), entry(1), entry(2, SiloStatus.JOINING))

    assert result.active_silos == (silo(1), silo(3))
    assert result.silos(ACTIVE, SiloStatus.JOINING) == (silo(1), silo(2), silo(3))


def test_snapshot_changes_since_lists_new_and_changed_silos() -> None:
    before = snapshot(1, entry(1), entry(2))
    after = snapshot(2, entry(1), entry(2, DEAD), entry(3, SiloStatus.JOINING))

    changes = after.changes_since(before)

    assert [(c.silo, c.previous, c.current) for c in changes] == [
        (silo(2), ACTIVE, DEAD),
        (silo(3), None, SiloStatus.JOINING),
    ]
    assert after.changes_since(after) == ()


def test_snapshot_publisher_ignores_older_and_silently_takes_same_version() -> None:
    publisher = SnapshotPublisher()
    newer = snapshot(2, entry(1))

    assert publisher.publish(newer)
    assert not publisher.publish(snapshot(1, entry(2)))
    assert publisher.current is newer
    same = snapshot(2, entry(1, alive=2000.0))
    assert not publisher.publish(same)
    assert publisher.current is same


async def test_snapshot_publisher_updates_yield_increasing_versions_then_end_on_close() -> None:
    publisher = SnapshotPublisher()
    seen: list[int] = []

    async def follow() -> None:
        seen.extend([item.version async for item in publisher.updates()])

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0)
    publisher.publish(snapshot(1))
    await asyncio.sleep(0)
    publisher.publish(snapshot(2))
    publisher.publish(snapshot(3))  # the follower has not run: it skips to 3
    publisher.close()
    async with asyncio.timeout(WAIT):
        await follower

    assert seen == [1, 3]


async def test_snapshot_publisher_updates_start_with_the_current_snapshot() -> None:
    publisher = SnapshotPublisher()
    publisher.publish(snapshot(5))
    publisher.close()

    assert [s.version async for s in publisher.updates()] == [5]


# -- options -----------------------------------------------------------------------------


def test_options_defaults_follow_orleans() -> None:
    options = MembershipOptions()

    assert options.num_probed_silos == 3
    assert options.probe_timeout == 5.0
    assert options.num_missed_probes_limit == 3
    assert options.num_votes_for_death_declaration == 2
    assert options.death_vote_expiration_timeout == 120.0
    assert options.i_am_alive_expiration == 90.0
    assert options.enable_indirect_probes is True


def test_options_fast_detects_a_crash_well_within_5_seconds() -> None:
    options = MembershipOptions.fast()

    # Worst case without an indirect answer: num_missed_probes_limit periods of misses.
    worst = options.probe_period * options.num_missed_probes_limit + options.probe_timeout
    assert worst < 5.0 / 2
    assert MembershipOptions.fast(num_probed_silos=5).num_probed_silos == 5


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("probe_period", 0.0),
        ("probe_timeout", -1.0),
        ("num_probed_silos", 0),
        ("num_votes_for_death_declaration", 1.5),
        ("num_missed_probes_limit", True),
        ("enable_indirect_probes", 1),
        ("i_am_alive_period", None),
        ("defunct_silo_cleanup_period", 0.0),
    ],
)
def test_options_reject_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"MembershipOptions.{field} = "):
        MembershipOptions(**{field: value})  # type: ignore[arg-type]


def test_options_reject_probe_timeout_longer_than_period() -> None:
    with pytest.raises(ConfigurationError, match="probe_timeout"):
        MembershipOptions(probe_period=1.0, probe_timeout=2.0)


def test_options_allow_no_cleanup() -> None:
    assert MembershipOptions(defunct_silo_cleanup_period=None).defunct_silo_cleanup_period is None


# -- row encoding ------------------------------------------------------------------------


def test_entry_encoding_round_trips_and_is_msgpack() -> None:
    original = MembershipEntry(
        silo=SiloAddress("::1", 11111, 1_700_000_000_123),
        status=SiloStatus.SHUTTING_DOWN,
        silo_name="s-ü",
        host_name="h",
        gateway_port=30000,
        start_time=1.5,
        i_am_alive_time=2.25,
        suspect_votes=(SuspectVote(silo(1), 3.0),),
    )

    data = encode_entry(original)

    assert decode_entry(data) == original
    assert isinstance(msgpack.unpackb(data), dict)  # plain msgpack, never a pickle
    assert decode_entry(encode_entry(dataclasses.replace(original, gateway_port=None))) == (
        dataclasses.replace(original, gateway_port=None)
    )


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\x80", b"\x81\xa4silo\x01"])
def test_entry_decoding_malformed_bytes_raises_membership_error(data: bytes) -> None:
    with pytest.raises(MembershipError, match="malformed membership row"):
        decode_entry(data)


# -- package -----------------------------------------------------------------------------


def test_membership_package_all_is_sorted_and_complete() -> None:
    import orleanspy.cluster.membership as membership

    assert list(membership.__all__) == sorted(membership.__all__)
    assert [name for name in membership.__all__ if not hasattr(membership, name)] == []
