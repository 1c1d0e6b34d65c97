"""Cluster membership: which silos are in the cluster, and failure detection among them.

``MembershipTable`` (memory, SQLite, Redis, PostgreSQL) holds one versioned row per silo;
``MembershipService`` is a silo's agent over it (join, I-am-alive, probing, votes, leave) and
its consumers' view (``snapshot``, ``updates()``, ``add_listener``). The transport plugs in
through ``Prober`` and ``Gossiper``. See docs/cluster.md, section "Membership".
"""

from orleanspy.cluster.membership.entry import (
    MembershipEntry,
    MembershipTableData,
    SiloStatus,
    SuspectVote,
    TableVersion,
)
from orleanspy.cluster.membership.memory import MemoryMembershipTable
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.prober import Gossiper, Prober
from orleanspy.cluster.membership.service import MembershipService, MembershipStatistics
from orleanspy.cluster.membership.snapshot import MembershipSnapshot, SiloStatusChange
from orleanspy.cluster.membership.sqlite import SqliteMembershipTable
from orleanspy.cluster.membership.table import MembershipTable

__all__ = [
    "Gossiper",
    "MembershipEntry",
    "MembershipOptions",
    "MembershipService",
    "MembershipSnapshot",
    "MembershipStatistics",
    "MembershipTable",
    "MembershipTableData",
    "MemoryMembershipTable",
    "Prober",
    "SiloStatus",
    "SiloStatusChange",
    "SqliteMembershipTable",
    "SuspectVote",
    "TableVersion",
]
