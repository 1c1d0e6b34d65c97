"""The membership suite's race clauses: concurrent writers at one table version, in one
instance and across instances on shared storage; exactly one write wins per version.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from orleanspy.cluster.membership.entry import SiloStatus, SuspectVote
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.ids import SiloAddress
from orleanspy.testing.membership_conformance.kit import (
    SILO_A,
    SILO_B,
    SILO_C,
    T0,
    WAIT,
    MembershipTableKit,
    sample_entry,
)

__all__ = ["RaceClauses"]


class RaceClauses(MembershipTableKit):
    """Concurrent writers: exactly one wins per version."""

    # -- concurrency ---------------------------------------------------------------------
    async def test_concurrent_inserts_at_one_version_exactly_one_wins(
        self, table: MembershipTable
    ) -> None:
        version = (await table.read_all()).version
        silos = [SiloAddress("10.0.1.1", 11111 + i, 1) for i in range(6)]

        async with asyncio.timeout(WAIT):
            results = await asyncio.gather(
                *(table.insert_row(sample_entry(silo), version) for silo in silos)
            )

        assert results.count(True) == 1, results
        data = await table.read_all()
        assert [e.silo for e in data.entries()] == [silos[results.index(True)]]
        assert data.version.version == version.version + 1

    async def test_concurrent_updates_of_one_row_exactly_one_wins(
        self, table: MembershipTable
    ) -> None:
        etag = await self._insert(table, sample_entry(SILO_A))
        version = (await table.read_all()).version
        voters = [SiloAddress("10.0.1.1", 11111 + i, 1) for i in range(6)]
        entries = [
            sample_entry(SILO_A, suspect_votes=(SuspectVote(voter, T0),)) for voter in voters
        ]

        async with asyncio.timeout(WAIT):
            results = await asyncio.gather(
                *(table.update_row(entry, etag, version) for entry in entries)
            )

        assert results.count(True) == 1, results
        row = (await table.read_row(SILO_A)).get(SILO_A)
        assert row is not None
        assert row[0] == entries[results.index(True)]

    async def test_concurrent_updates_of_different_rows_at_one_version_exactly_one_wins(
        self, table: MembershipTable
    ) -> None:
        etags = {silo: await self._insert(table, sample_entry(silo)) for silo in (SILO_A, SILO_B,
                                                                                 SILO_C)}
        version = (await table.read_all()).version

        async with asyncio.timeout(WAIT):
            results = await asyncio.gather(
                *(
                    table.update_row(sample_entry(silo, SiloStatus.DEAD), etag, version)
                    for silo, etag in etags.items()
                )
            )

        assert results.count(True) == 1, results
        dead = [e.silo for e in (await table.read_all()).entries() if e.status is SiloStatus.DEAD]
        assert dead == [list(etags)[results.index(True)]]

    async def test_racing_writers_win_exactly_once_per_version(
        self, table: MembershipTable
    ) -> None:
        await self._insert(table, sample_entry(SILO_A))
        start = (await table.read_all()).version.version
        wins = await self._race([table] * 5, rounds=10)

        await self._check_race(table, wins, start)

    async def test_instances_on_shared_storage_win_exactly_once_per_version(
        self, tmp_path: Path, table: MembershipTable
    ) -> None:
        if not self.shared_storage:
            pytest.skip("instances of this back end share no storage")
        await self._insert(table, sample_entry(SILO_A))
        start = (await table.read_all()).version.version
        peers = [await self.make_table(tmp_path) for _ in range(self.race_instances)]
        try:
            for peer in peers:
                await peer.open()
            wins = await self._race(peers, rounds=self.race_rounds)
        finally:
            for peer in peers:
                await peer.close()

        await self._check_race(table, wins, start)

    async def _race(self, tables: list[MembershipTable], rounds: int) -> list[int]:
        """Each writer reads, yields, and tries to add its vote to SILO_A's row, ``rounds``
        times; returns the versions the successful writes were based on."""
        wins: list[int] = []

        async def writer(table: MembershipTable, n: int) -> None:
            voter = SiloAddress("10.0.2.1", 20000 + n, 1)
            for i in range(rounds):
                data = await table.read_all()
                row = data.get(SILO_A)
                assert row is not None
                entry = dataclasses.replace(
                    row[0], suspect_votes=(SuspectVote(voter, T0 + i),)
                )
                await asyncio.sleep(0)
                if await table.update_row(entry, row[1], data.version):
                    wins.append(data.version.version)

        async with asyncio.timeout(WAIT * 3):
            await asyncio.gather(*(writer(t, n) for n, t in enumerate(tables)))
        return wins

    async def _check_race(self, table: MembershipTable, wins: list[int], start: int) -> None:
        end = (await table.read_all()).version.version
        assert sorted(wins) == list(range(start, end)), "one winner per version, no gaps"
        assert wins, "somebody won"
