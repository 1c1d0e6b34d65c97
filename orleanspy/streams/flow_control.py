"""Flow control (3, 4): which subscriptions gate a queue's cache, one policy per strategy.

``FlowStrategy`` names the strategy a user configures; ``FlowPolicy`` is what the pulling agent
and its deliveries ask: does a subscription gate the cache, may a laggard be spilled to the
queue, is a tagged group complete, when does a stuck member stop gating. The agent holds one
policy per namespace and never compares strategy names.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, final

__all__ = ["FlowPolicy", "FlowStrategy", "MaxFlowPolicy", "MinFlowPolicy", "TaggedFlowPolicy",
           "flow_policy"]


class FlowStrategy(StrEnum):
    """``min``: the slowest consumer gates; ``max``: the fastest gates (laggards are told
    what they missed); ``tagged``: only the members of one tagged group gate."""

    MIN = "min"
    MAX = "max"
    TAGGED = "tagged"


class FlowPolicy:
    """What one strategy decides for the subscriptions of a namespace."""

    __slots__ = ()

    strategy: ClassVar[FlowStrategy]
    #: A gating laggard may leave the cache and read its stream from the queue.
    spills: ClassVar[bool] = False
    #: Cursors re-seat on the oldest cached item and report the gap when they fall behind.
    max_mode: ClassVar[bool] = False
    #: Seconds a gating member may go without progress before it stops gating (None: never).
    revoke_after: float | None = None
    #: Deliveries wait until enough members subscribed.
    waits_for_members: bool = False

    def is_member(self, tag: str | None) -> bool:
        """Does a subscription with ``tag`` belong to the gating group?"""
        return False

    def gates(self, member: bool) -> bool:
        """Does a subscription's cursor hold the cache's purge back?"""
        return member

    def group_ready(self, members: int) -> bool:
        """May deliveries start with ``members`` of the group subscribed?"""
        return True


@final
class MinFlowPolicy(FlowPolicy):
    __slots__ = ()
    strategy = FlowStrategy.MIN
    spills = True

    def gates(self, member: bool) -> bool:
        return True


@final
class MaxFlowPolicy(FlowPolicy):
    __slots__ = ()
    strategy = FlowStrategy.MAX
    max_mode = True


@final
class TaggedFlowPolicy(FlowPolicy):
    __slots__ = ("group", "min_members", "revoke_after", "waits_for_members")
    strategy = FlowStrategy.TAGGED

    def __init__(self, group: str | None, min_members: int, timeout: float | None) -> None:
        self.group = group
        self.min_members = min_members
        self.revoke_after = timeout
        self.waits_for_members = min_members > 1

    def is_member(self, tag: str | None) -> bool:
        return tag is not None and tag == self.group

    def group_ready(self, members: int) -> bool:
        return members >= self.min_members


_MIN = MinFlowPolicy()
_MAX = MaxFlowPolicy()


def flow_policy(
    strategy: FlowStrategy, group: str | None = None, min_members: int = 1,
    timeout: float | None = None,
) -> FlowPolicy:
    """The policy of ``strategy`` (tagged: for ``group``)."""
    if strategy is FlowStrategy.MIN:
        return _MIN
    if strategy is FlowStrategy.MAX:
        return _MAX
    return TaggedFlowPolicy(group, min_members, timeout)
