"""Death votes: which votes are fresh, how a vote is added, how many declare a silo dead.

Pure functions over table rows, shared by the membership service and its tests.

Freshness is measured against ``max(now, newest vote)`` rather than ``now`` alone, as Orleans
does: a voter whose clock runs ahead does not make the others' recent votes look expired.
"""

from __future__ import annotations

from collections.abc import Iterable

from orleanspy.cluster.membership.entry import MembershipEntry, SiloStatus, SuspectVote
from orleanspy.ids import SiloAddress

__all__ = ["add_vote", "fresh_votes", "is_stale", "votes_required"]


def fresh_votes(
    votes: Iterable[SuspectVote], now: float, expiration: float
) -> tuple[SuspectVote, ...]:
    """The votes cast within ``expiration`` seconds of ``max(now, newest vote)``."""
    votes = tuple(votes)
    if not votes:
        return ()
    reference = max(now, max(v.time for v in votes))
    return tuple(v for v in votes if reference - v.time <= expiration)


def add_vote(
    votes: Iterable[SuspectVote], voter: SiloAddress, now: float, *, expiration: float
) -> tuple[SuspectVote, ...]:
    """``votes`` with ``voter``'s vote at ``now`` last: one vote per voter (its older vote is
    replaced), expired votes dropped, so the list never outgrows the cluster."""
    kept = [v for v in fresh_votes(votes, now, expiration) if v.voter != voter]
    return (*kept, SuspectVote(voter, now))


def is_stale(entry: MembershipEntry, now: float, expiration: float) -> bool:
    """True if ``entry``'s I-am-alive time is older than ``expiration`` seconds."""
    return now - entry.i_am_alive_time > expiration


def votes_required(
    entries: Iterable[MembershipEntry], now: float, *, votes: int, i_am_alive_expiration: float
) -> int:
    """Fresh votes that declare a silo dead: ``votes``, or a majority of the active silos with
    a recent I-am-alive when there are fewer than ``2 * votes - 1`` of them (never below 1)."""
    active = sum(
        1
        for e in entries
        if e.status is SiloStatus.ACTIVE and not is_stale(e, now, i_am_alive_expiration)
    )
    return max(1, min(votes, (active + 1) // 2))
