"""Queue balancing: pure algorithms that decide which silo pulls which stream queue.

Each ``QueueAssigner`` maps (queues, active silos, previous assignment) to a new assignment;
the runtime (membership, leases, settling time, pulling manager) applies it. docs/cluster.md,
"Queue balancers", compares them; benchmarks/balancers.py measures them.

=======================  ========  ==========  =====================================
assigner                 balanced  stateless   moves on a join or leave
=======================  ========  ==========  =====================================
FixedSplitAssigner       exact     yes         most queues
ConsistentRingAssigner   no        yes         the changed arcs (minimal), idle silos
EvenSplitAssigner        exact     yes         1.0-7x the minimum
StickyAssigner (default) exact     no          the minimum
BoundedLoadAssigner      1+eps     yes         grows as eps shrinks
=======================  ========  ==========  =====================================
"""

from __future__ import annotations

from typing import Final

from orleanspy.streams.balancing.base import Assignment, QueueAssigner
from orleanspy.streams.balancing.bounded import BoundedLoadAssigner, load_cap
from orleanspy.streams.balancing.even import EvenSplitAssigner
from orleanspy.streams.balancing.fixed import FixedSplitAssigner
from orleanspy.streams.balancing.metrics import (
    is_exactly_balanced,
    loads,
    minimum_moves,
    moved,
)
from orleanspy.streams.balancing.ring import ConsistentRingAssigner
from orleanspy.streams.balancing.sticky import StickyAssigner

__all__ = [
    "DEFAULT_ASSIGNER",
    "Assignment",
    "BoundedLoadAssigner",
    "ConsistentRingAssigner",
    "EvenSplitAssigner",
    "FixedSplitAssigner",
    "QueueAssigner",
    "StickyAssigner",
    "is_exactly_balanced",
    "load_cap",
    "loads",
    "minimum_moves",
    "moved",
]

DEFAULT_ASSIGNER: Final[QueueAssigner] = StickyAssigner()
"""The default: exactly balanced and moves only the queues it must (needs the previous
assignment, which the lease store keeps)."""
