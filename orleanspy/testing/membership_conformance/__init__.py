"""Conformance suite for membership tables: every clause of ``MembershipTable``.

Subclass ``MembershipTableConformance`` in a test module and implement ``make_table``; pytest
then checks the table contract of ``orleanspy.cluster.membership.table``::

    from orleanspy.testing.membership_conformance import MembershipTableConformance

    class TestMyTable(MembershipTableConformance):
        durable = True  # rows survive close and a new instance on the same storage

        async def make_table(self, tmp_path: Path) -> MembershipTable:
            return MyTable(str(tmp_path / "membership.db"), cluster_id="conformance")

``make_table`` returns a new, unopened table; the suite opens and closes it. For durable
back ends it is called again with the same ``tmp_path`` and must reach the same storage: the
durability clause reopens it, and the shared-storage race runs several instances against one
storage at once. A back end whose instances share nothing (the memory table) sets
``shared_storage = False``. The suite needs pytest and pytest-asyncio.

The suite is one test class assembled from clause groups, one module each: single rows
(``rows``), races between writers (``races``) and open/close/reopen (``lifecycle``), over
the kit they share (``kit``: the fixture, the settings, the sample rows).
"""

from orleanspy.testing.membership_conformance.kit import SILO_A as SILO_A
from orleanspy.testing.membership_conformance.kit import SILO_B as SILO_B
from orleanspy.testing.membership_conformance.kit import SILO_C as SILO_C
from orleanspy.testing.membership_conformance.kit import sample_entry
from orleanspy.testing.membership_conformance.lifecycle import LifecycleClauses
from orleanspy.testing.membership_conformance.races import RaceClauses
from orleanspy.testing.membership_conformance.rows import RowClauses

__all__ = ["MembershipTableConformance", "sample_entry"]


class MembershipTableConformance(RowClauses, RaceClauses, LifecycleClauses):
    """Every clause of the ``MembershipTable`` contract. Subclass and implement ``make_table``."""
