"""The membership suite's kit: its sample rows and silos, the table fixture, the settings a
back end declares (``durable``, ``shared_storage``, the race's size), and the insert helper
every clause group uses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from orleanspy.cluster.membership.entry import MembershipEntry, SiloStatus
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.ids import SiloAddress

__all__ = ["SILO_A", "SILO_B", "SILO_C", "T0", "WAIT", "MembershipTableKit", "sample_entry"]

#: Upper bound for anything the suite awaits: a hang fails fast.
WAIT = 20.0
#: The wall time of the sample rows.
T0 = 1_712_345_678.125

SILO_A = SiloAddress("10.0.0.1", 11111, 1)
SILO_B = SiloAddress("10.0.0.2", 11111, 1)
SILO_C = SiloAddress("10.0.0.3", 11112, 7)


def sample_entry(
    silo: SiloAddress, status: SiloStatus = SiloStatus.ACTIVE, **changes: object
) -> MembershipEntry:
    """A row with every field set (votes included), for round-trip checks."""
    entry = MembershipEntry(
        silo=silo,
        status=status,
        silo_name=f"silo-{silo.port}-ü✓",
        host_name=f"host-{silo.host}",
        gateway_port=30000 + silo.port % 100,
        start_time=T0,
        i_am_alive_time=T0 + 0.5,
    )
    if status is SiloStatus.DEAD:  # who declared it, and when, survive the round trip
        entry = dataclasses.replace(entry, declared_dead_at=T0 + 1.5, declared_dead_by=(
            SiloAddress("10.0.0.9", 11111, 7), silo))
    return dataclasses.replace(entry, **changes)  # type: ignore[arg-type]


class MembershipTableKit:
    """What every clause group of the suite shares. Subclass ``MembershipTableConformance``,
    not this."""

    pytestmark = pytest.mark.asyncio

    #: Rows survive ``close`` and a new instance made by ``make_table(tmp_path)``.
    durable = False
    #: Instances made by ``make_table(tmp_path)`` share rows (races across instances run).
    shared_storage = False
    #: Writers in the cross-instance race, and rounds each of them tries.
    race_instances = 4
    race_rounds = 15

    async def make_table(self, tmp_path: Path) -> MembershipTable:
        """Return a new, unopened table (``tmp_path`` is a fresh directory for files)."""
        raise NotImplementedError("implement make_table(tmp_path) in the test class")

    @pytest_asyncio.fixture
    async def table(self, tmp_path: Path) -> AsyncIterator[MembershipTable]:
        provider = await self.make_table(tmp_path)
        await provider.open()
        try:
            yield provider
        finally:
            await provider.close()

    async def _insert(self, table: MembershipTable, entry: MembershipEntry) -> str:
        version = (await table.read_all()).version
        assert await table.insert_row(entry, version)
        row = (await table.read_row(entry.silo)).get(entry.silo)
        assert row is not None
        return row[1]
