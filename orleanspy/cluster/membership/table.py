"""MembershipTable: the contract every membership back end keeps (memory, SQLite, Redis,
PostgreSQL).

The table is the cluster's shared truth about which silos exist and in which status. All
membership writes (a silo joining, changing status, a suspicion vote, a death declaration)
are compare-and-swap operations on two things at once: the row's etag and the version of the
whole table. The table version is what serialises concurrent votes: of several silos that
read version ``v`` and write, exactly one moves the table to ``v + 1``; the others re-read.
I-am-alive heartbeats are the exception: they touch only the timestamp, change neither the
row etag nor the table version, and so never make another silo's pending write fail.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from orleanspy.cluster.membership.entry import MembershipEntry, MembershipTableData, TableVersion
from orleanspy.ids import SiloAddress

__all__ = ["MembershipTable"]


class MembershipTable(ABC):
    """Versioned silo rows of one cluster (the cluster id is the back end's setting).

    Guarantees every back end keeps (checked by
    ``orleanspy.testing.membership_conformance.MembershipTableConformance``):

    * ``read_all`` returns every row with its etag and the table version from one consistent
      snapshot; a new table has no rows and version 0.
    * ``insert_row(entry, v)`` succeeds (True) only if the table is still at version ``v``
      (version number and etag) and has no row for ``entry.silo``; it then stores the row with
      a new etag and moves the table to ``v.version + 1`` with a new etag, atomically.
      Otherwise it changes nothing and returns False.
    * ``update_row(entry, etag, v)`` likewise, but needs an existing row whose etag is
      ``etag``; the row gets a new etag. Etags of a row differ from all its earlier etags.
    * ``update_i_am_alive(silo, time)`` sets only the row's I-am-alive time: the row etag and
      the table version stay as they are. False if there is no such row.
    * ``cleanup_defunct(before)`` deletes the rows with status DEAD or STOPPED whose
      I-am-alive time is older than ``before`` and returns how many; it changes no version.
    * ``delete_table`` removes every row and resets the version to 0 (with a new etag).
    * Every call that returns has been committed: another instance on the same storage (for
      durable back ends, another process) sees it at once. Back-end failures raise
      ``MembershipError``. ``open`` is idempotent and optional (operations open the table);
      ``close`` is idempotent, and operations after it raise ``RuntimeError``.

    ``cluster_key`` is optional: a back end that can keep a secret shared by every silo that
    uses the table returns it (created by the first caller, the same bytes for every caller
    after); the silos of a cluster that names no ``cluster_key`` prove membership with it.
    """

    __slots__ = ()

    @abstractmethod
    async def read_all(self) -> MembershipTableData:
        """Every row and the table version, from one snapshot."""

    @abstractmethod
    async def read_row(self, silo: SiloAddress) -> MembershipTableData:
        """The row of ``silo`` (zero or one row) and the table version."""

    @abstractmethod
    async def insert_row(self, entry: MembershipEntry, table_version: TableVersion) -> bool:
        """Insert ``entry`` if the table is at ``table_version`` and has no row for its silo."""

    @abstractmethod
    async def update_row(
        self, entry: MembershipEntry, etag: str, table_version: TableVersion
    ) -> bool:
        """Replace the row of ``entry.silo`` if its etag is ``etag`` and the table is at
        ``table_version``."""

    @abstractmethod
    async def update_i_am_alive(self, silo: SiloAddress, time: float) -> bool:
        """Set the I-am-alive time of ``silo``'s row (no etag or version change)."""

    @abstractmethod
    async def cleanup_defunct(self, before: float) -> int:
        """Delete DEAD and STOPPED rows whose I-am-alive time is before ``before``; return
        the count."""

    @abstractmethod
    async def delete_table(self) -> None:
        """Remove every row of this cluster and reset the version to 0 (tests, tools)."""

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Prepare the table (create the schema, connect). Idempotent."""

    async def cluster_ids(self) -> list[str] | None:
        """The cluster ids that have rows or a version in this back end's storage (to tell a
        mistyped cluster id from an empty cluster), or None if the back end cannot list them."""
        return None

    async def cluster_key(self) -> bytes | None:
        """The cluster key kept in this table (made by the first caller), or None if this
        back end keeps none (then the silos need ``SiloOptions.cluster_key``)."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Idempotent."""
