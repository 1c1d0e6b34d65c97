"""GrainStorage: the contract every state storage provider keeps (etag-checked)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from orleanspy.grains.state import StoredState
from orleanspy.ids import GrainId

__all__ = ["GrainStorage", "StoredState"]


class GrainStorage(ABC):
    """Stores one msgpack blob per (grain id, state name), with optimistic concurrency.

    Guarantees every provider keeps (tested by ``orleanspy.testing.conformance``):

    * ``read`` of a record never written (or cleared) returns None.
    * ``write(..., etag=None)`` creates the record; it raises ``InconsistentStateError`` if a
      record already exists. ``write(..., etag=E)`` replaces the record only if its current
      etag is E, else raises ``InconsistentStateError`` (carrying both etags). Each successful
      write returns a new etag, different from every earlier one for that record.
    * ``clear(..., etag)`` removes the record under the same etag rule; clearing a record that
      does not exist with ``etag=None`` succeeds.
    * ``close`` releases resources; it is idempotent.
    """

    __slots__ = ()

    @abstractmethod
    async def read(self, grain_id: GrainId, state_name: str) -> StoredState | None: ...

    @abstractmethod
    async def write(
        self, grain_id: GrainId, state_name: str, data: bytes, etag: str | None
    ) -> str: ...

    @abstractmethod
    async def clear(self, grain_id: GrainId, state_name: str, etag: str | None) -> None: ...

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Prepare the provider (create tables, connect). Called once by the silo."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Idempotent."""
