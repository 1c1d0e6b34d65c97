"""MemoryMembershipTable: the membership table of one process (tests, single-process clusters)."""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import Any, final

from orleanspy.cluster.membership.entry import (
    MembershipEntry,
    MembershipTableData,
    TableVersion,
)
from orleanspy.cluster.membership.table import MembershipTable
from orleanspy.ids import SiloAddress

__all__ = ["MemoryMembershipTable"]


def _etag() -> str:
    return uuid.uuid4().hex


@final
class MemoryMembershipTable(MembershipTable):
    """Rows in a dict. Share one instance between the silos of one process.

    Every operation runs without awaiting, so it is atomic with respect to other tasks.
    Entries are immutable, so readers get the stored objects themselves.
    """

    __slots__ = ("__weakref__", "_closed", "_key", "_rows", "_version", "shared")

    def __init__(self) -> None:
        #: Objects the silos sharing this table share with it, by kind (the stream lease
        #: store of an in-memory cluster); they live as long as the table.
        self.shared: dict[str, Any] = {}
        self._rows: dict[SiloAddress, tuple[MembershipEntry, str]] = {}
        self._version = TableVersion(0, _etag())
        self._closed = False
        self._key = os.urandom(32)

    def __repr__(self) -> str:
        return f"MemoryMembershipTable(rows={len(self._rows)}, version={self._version.version})"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _bump(self) -> None:
        self._version = TableVersion(self._version.version + 1, _etag())

    async def read_all(self) -> MembershipTableData:
        self._check_open()
        return MembershipTableData(tuple(self._rows.values()), self._version)

    async def read_row(self, silo: SiloAddress) -> MembershipTableData:
        self._check_open()
        row = self._rows.get(silo)
        return MembershipTableData(() if row is None else (row,), self._version)

    async def insert_row(self, entry: MembershipEntry, table_version: TableVersion) -> bool:
        self._check_open()
        if table_version != self._version or entry.silo in self._rows:
            return False
        self._rows[entry.silo] = (entry, _etag())
        self._bump()
        return True

    async def update_row(
        self, entry: MembershipEntry, etag: str, table_version: TableVersion
    ) -> bool:
        self._check_open()
        row = self._rows.get(entry.silo)
        if row is None or row[1] != etag or table_version != self._version:
            return False
        self._rows[entry.silo] = (entry, _etag())
        self._bump()
        return True

    async def update_i_am_alive(self, silo: SiloAddress, time: float) -> bool:
        self._check_open()
        row = self._rows.get(silo)
        if row is None:
            return False
        entry, etag = row
        self._rows[silo] = (dataclasses.replace(entry, i_am_alive_time=float(time)), etag)
        return True

    async def cleanup_defunct(self, before: float) -> int:
        self._check_open()
        doomed = [
            silo
            for silo, (entry, _) in self._rows.items()
            if entry.status.is_gone and entry.i_am_alive_time < before
        ]
        for silo in doomed:
            del self._rows[silo]
        return len(doomed)

    async def delete_table(self) -> None:
        self._check_open()
        self._rows.clear()
        self._version = TableVersion(0, _etag())

    async def cluster_key(self) -> bytes:
        """A random key made with the table: silos sharing this object share it."""
        return self._key

    async def close(self) -> None:
        self._closed = True
