"""Queue leases: which silo may pull which stream queue right now (exclusive ownership).

The lease-based balancer (``orleanspy.streams.balancer.LeaseQueueBalancer``) computes each
silo's target set of queues from the active silos; a silo starts a queue's pulling agent only
once it holds the queue's lease, and gives the lease up only after the agent stopped
(deliveries finished, acknowledgements committed). So at most one silo pulls a queue at any
moment, and a planned move hands the queue over without duplicates.

A lease is a row ``(queue, owner, expiry)``. ``acquire`` takes it if it is free, expired, held
by this owner already, or held by a silo that membership has declared dead (no need to wait
for the expiry after a crash). Owners renew their leases periodically and release them on
shutdown. Expiry times are wall-clock seconds (``time.time()``): the SQLite store is shared by
the processes of one host, which read the same clock (as the membership table's I-am-alive
times are).

Stores: ``MemoryQueueLeaseStore`` (silos of one process sharing a ``MemoryMembershipTable``)
and ``SqliteQueueLeaseStore`` (table ``stream_leases`` in the membership table's SQLite file).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, Final, final

from orleanspy._util.sqlite import SqliteDatabase

__all__ = ["Lease", "MemoryQueueLeaseStore", "QueueLeaseStore", "SqliteQueueLeaseStore"]


@dataclass(frozen=True, slots=True)
class Lease:
    """``owner`` (a silo address as text) holds ``queue`` until ``expiry`` (``time.time()``)."""

    queue: str
    owner: str
    expiry: float


class QueueLeaseStore(ABC):
    """Leases of stream queues, shared by the silos of one cluster.

    Every operation is atomic with respect to the other silos (one transaction).
    """

    __slots__ = ()

    @abstractmethod
    async def read_all(self) -> dict[str, Lease]:
        """Every lease (expired ones too), keyed by queue."""

    @abstractmethod
    async def acquire(
        self, queue: str, owner: str, duration: float, dead: Collection[str] = ()
    ) -> bool:
        """Take ``queue`` for ``owner`` until now + ``duration`` if it is free, expired, held
        by ``owner`` or by a silo in ``dead``. True if ``owner`` holds it afterwards."""

    @abstractmethod
    async def renew(self, owner: str, queues: Iterable[str], duration: float) -> set[str]:
        """Extend ``owner``'s leases on ``queues``; return the queues it still holds (a lease
        taken over by another silo after it expired is not renewed)."""

    @abstractmethod
    async def release(self, owner: str, queues: Iterable[str]) -> None:
        """Give up ``owner``'s leases on ``queues`` (others' leases are left alone)."""

    def fence(self, owner: str) -> Any:
        """What a queue adapter on the same store can check ``owner``'s lease with when it
        acknowledges (so that an owner paused past its lease cannot delete what the next
        owner still needs); None if this store offers none."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources. Idempotent."""


@final
class MemoryQueueLeaseStore(QueueLeaseStore):
    """Leases in a dict, for silos of one process. ``clock`` defaults to ``time.time``."""

    __slots__ = ("_clock", "_leases")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._leases: dict[str, Lease] = {}
        self._clock = clock

    async def read_all(self) -> dict[str, Lease]:
        return dict(self._leases)

    async def acquire(
        self, queue: str, owner: str, duration: float, dead: Collection[str] = ()
    ) -> bool:
        now = self._clock()
        held = self._leases.get(queue)
        if held is None or held.owner == owner or held.expiry < now or held.owner in dead:
            self._leases[queue] = Lease(queue, owner, now + duration)
            return True
        return False

    async def renew(self, owner: str, queues: Iterable[str], duration: float) -> set[str]:
        expiry = self._clock() + duration
        kept = set()
        for queue in queues:
            held = self._leases.get(queue)
            if held is not None and held.owner == owner:
                self._leases[queue] = Lease(queue, owner, expiry)
                kept.add(queue)
        return kept

    async def release(self, owner: str, queues: Iterable[str]) -> None:
        for queue in queues:
            held = self._leases.get(queue)
            if held is not None and held.owner == owner:
                del self._leases[queue]


_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS stream_leases ("
    " cluster_id TEXT NOT NULL,"
    " queue TEXT NOT NULL,"
    " owner TEXT NOT NULL,"
    " expiry REAL NOT NULL,"
    " PRIMARY KEY (cluster_id, queue)) WITHOUT ROWID"
)
_SELECT_ALL: Final = "SELECT queue, owner, expiry FROM stream_leases WHERE cluster_id = ?"
_SELECT: Final = "SELECT owner, expiry FROM stream_leases WHERE cluster_id = ? AND queue = ?"
_UPSERT: Final = (
    "INSERT INTO stream_leases (cluster_id, queue, owner, expiry) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (cluster_id, queue) DO UPDATE SET owner = excluded.owner, "
    "expiry = excluded.expiry"
)
_RENEW: Final = (
    "UPDATE stream_leases SET expiry = ? WHERE cluster_id = ? AND queue = ? AND owner = ?"
)
_RELEASE: Final = "DELETE FROM stream_leases WHERE cluster_id = ? AND queue = ? AND owner = ?"


def _create(conn: sqlite3.Connection) -> None:
    conn.execute(_SCHEMA)


def _read_all(conn: sqlite3.Connection, cluster_id: str) -> dict[str, Lease]:
    rows = conn.execute(_SELECT_ALL, (cluster_id,)).fetchall()
    return {str(q): Lease(str(q), str(o), float(e)) for q, o, e in rows}


def _acquire(
    conn: sqlite3.Connection, cluster_id: str, queue: str, owner: str, duration: float,
    dead: frozenset[str], now: float,
) -> bool:
    row = conn.execute(_SELECT, (cluster_id, queue)).fetchone()
    if row is not None and row[0] != owner and float(row[1]) >= now and row[0] not in dead:
        return False
    conn.execute(_UPSERT, (cluster_id, queue, owner, now + duration))
    return True


def _renew(
    conn: sqlite3.Connection, cluster_id: str, owner: str, queues: list[str], duration: float,
    now: float,
) -> set[str]:
    expiry = now + duration
    return {
        queue for queue in queues
        if conn.execute(_RENEW, (expiry, cluster_id, queue, owner)).rowcount == 1
    }


def _release(conn: sqlite3.Connection, cluster_id: str, owner: str, queues: list[str]) -> None:
    conn.executemany(_RELEASE, [(cluster_id, queue, owner) for queue in queues])


@final
class SqliteQueueLeaseStore(QueueLeaseStore):
    """Leases of cluster ``cluster_id`` in table ``stream_leases`` of the SQLite file at
    ``path`` (the membership table's file: ``ClusterRuntime.lease_store()`` opens it there).

    Each operation is one ``BEGIN IMMEDIATE`` transaction, so a check-then-take is atomic
    across processes. Keep the file on a local disk (WAL needs shared memory). Expiry times
    are read from ``clock`` (wall seconds, shared by every process; the silo's
    ``clock.time``), ``time.time`` by default.
    """

    __slots__ = ("_clock", "_cluster_id", "_db", "_lock", "_opened")

    def __init__(
        self, path: str, cluster_id: str = "dev", *, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._db = SqliteDatabase(str(path))
        self._cluster_id = cluster_id
        self._opened = False
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"SqliteQueueLeaseStore({self._db.path!r}, cluster_id={self._cluster_id!r})"

    @property
    def path(self) -> str:
        return self._db.path

    async def _open(self) -> None:
        if not self._opened:
            async with self._lock:
                if not self._opened:
                    await self._db.transaction(_create)
                    self._opened = True

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        await self._open()
        return await self._db.transaction(fn, self._cluster_id, *args)

    async def read_all(self) -> dict[str, Lease]:
        result: dict[str, Lease] = await self._run(_read_all)
        return result

    async def acquire(
        self, queue: str, owner: str, duration: float, dead: Collection[str] = ()
    ) -> bool:
        return bool(await self._run(_acquire, queue, owner, float(duration), frozenset(dead),
                                    self._clock()))

    async def renew(self, owner: str, queues: Iterable[str], duration: float) -> set[str]:
        wanted = list(queues)
        if not wanted:
            return set()
        kept: set[str] = await self._run(_renew, owner, wanted, float(duration), self._clock())
        return kept

    async def release(self, owner: str, queues: Iterable[str]) -> None:
        wanted = list(queues)
        if wanted:
            await self._run(_release, owner, wanted)

    async def close(self) -> None:
        await self._db.close()
