"""The membership suite's lifecycle clauses: rows survive a reopen (durable back ends),
``open`` is idempotent, and a closed table refuses calls.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orleanspy.cluster.membership.entry import SiloStatus
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.testing.membership_conformance.kit import (
    SILO_A,
    T0,
    MembershipTableKit,
    sample_entry,
)

__all__ = ["LifecycleClauses"]


class LifecycleClauses(MembershipTableKit):
    """Open, close and reopen."""

    # -- durability and lifecycle --------------------------------------------------------
    async def test_rows_survive_close_and_reopen(self, tmp_path: Path) -> None:
        if not self.durable:
            pytest.skip("the back end is not durable")
        first = await self.make_table(tmp_path)
        await first.open()
        etag = await self._insert(first, sample_entry(SILO_A))
        await first.update_i_am_alive(SILO_A, T0 + 42.0)
        version = (await first.read_all()).version
        await first.close()

        second = await self.make_table(tmp_path)
        await second.open()
        try:
            data = await second.read_all()
            assert data.version == version
            assert data.rows == ((sample_entry(SILO_A, i_am_alive_time=T0 + 42.0), etag),)
            assert await second.update_row(sample_entry(SILO_A, SiloStatus.DEAD), etag, version)
        finally:
            await second.close()

    async def test_open_is_idempotent(self, table: MembershipTable) -> None:
        await self._insert(table, sample_entry(SILO_A))

        await table.open()

        assert len(await table.read_all()) == 1

    async def test_close_is_idempotent_and_later_calls_raise(
        self, table: MembershipTable
    ) -> None:
        await table.close()
        await table.close()

        with pytest.raises(RuntimeError, match="closed"):
            await table.read_all()
