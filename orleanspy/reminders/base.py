"""ReminderTable: the contract every durable reminder table keeps."""

from __future__ import annotations

from abc import ABC, abstractmethod

from orleanspy.grains.host import ReminderEntry
from orleanspy.ids import GrainId

__all__ = ["ReminderEntry", "ReminderTable"]


class ReminderTable(ABC):
    """Durable rows keyed by (grain id, reminder name).

    Guarantees every provider keeps (tested by ``orleanspy.testing.conformance``):

    * ``upsert`` inserts or replaces the row and returns its new etag (different from every
      earlier etag of that row); the stored entry carries that etag.
    * ``read_row`` returns the row or None; ``read_rows(grain_id)`` returns that grain's rows;
      ``read_all`` returns every row. Grain keys round-trip exactly (``1`` is not ``"1"``).
    * ``remove(grain_id, name, etag)`` deletes the row only if its etag matches and returns
      whether it deleted; ``etag=None`` deletes whatever is there.
    * Rows survive ``close`` and a new instance on the same location (durable providers).
    """

    __slots__ = ()

    @abstractmethod
    async def read_all(self) -> list[ReminderEntry]: ...

    @abstractmethod
    async def read_rows(self, grain_id: GrainId) -> list[ReminderEntry]: ...

    @abstractmethod
    async def read_row(self, grain_id: GrainId, name: str) -> ReminderEntry | None: ...

    @abstractmethod
    async def upsert(self, entry: ReminderEntry) -> str: ...

    @abstractmethod
    async def remove(self, grain_id: GrainId, name: str, etag: str | None) -> bool: ...

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Prepare the table (create schema, connect). Called once by the silo."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Idempotent."""
