"""PostgresQueueLeaseStore: stream-queue leases of a cluster in PostgreSQL.

Table ``stream_leases`` (in the URL's schema): (cluster id, queue) -> owner, expiry, epoch.
Taking, renewing and releasing are one statement each, so a check-then-take is atomic across
every silo of every host. The epoch of a queue grows by one each time the lease passes to
another owner and is never reset (a released lease keeps its row, with no owner), so two
holders of one queue are told apart even when the same silo takes a queue back. Expiry times
are wall-clock seconds from the caller's clock, as with the SQLite and Redis stores.

``fence(owner)`` gives a PostgreSQL queue adapter on the same database what it needs to
delete acknowledged rows only while the queue's lease is ``owner``'s, in the statement that
deletes them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import final

from orleanspy._util.postgres import PostgresClient
from orleanspy.streams.leases import Lease, QueueLeaseStore

__all__ = ["PostgresLeaseFence", "PostgresQueueLeaseStore"]

MIGRATIONS = (
    """
    CREATE TABLE stream_leases (
        cluster_id TEXT NOT NULL,
        queue      TEXT NOT NULL,
        owner      TEXT NOT NULL,
        expiry     DOUBLE PRECISION NOT NULL,
        epoch      BIGINT NOT NULL,
        PRIMARY KEY (cluster_id, queue)
    )
    """,
)

_READ_ALL = ("SELECT queue, owner, expiry FROM stream_leases "
             "WHERE cluster_id = $1 AND owner <> ''")
_ACQUIRE = """
INSERT INTO stream_leases AS l (cluster_id, queue, owner, expiry, epoch)
VALUES ($1, $2, $3, $4, 1)
ON CONFLICT (cluster_id, queue) DO UPDATE SET owner = excluded.owner, expiry = excluded.expiry,
    epoch = l.epoch + CASE WHEN l.owner = excluded.owner THEN 0 ELSE 1 END
WHERE l.owner = excluded.owner OR l.owner = '' OR l.expiry < $5 OR l.owner = ANY($6::text[])
RETURNING epoch
"""
_RENEW = ("UPDATE stream_leases SET expiry = $3 WHERE cluster_id = $1 AND owner = $2 "
          "AND queue = ANY($4::text[]) RETURNING queue")
_RELEASE = ("UPDATE stream_leases SET owner = '', expiry = 0 WHERE cluster_id = $1 "
            "AND owner = $2 AND queue = ANY($3::text[])")


@dataclass(frozen=True, slots=True)
class PostgresLeaseFence:
    """``owner``'s leases of cluster ``cluster_id`` in table ``stream_leases`` of ``schema``
    on the database ``dsn``: a PostgreSQL queue adapter on the same database and schema
    deletes acknowledged rows only while the queue's lease names ``owner``."""

    dsn: str
    schema: str
    cluster_id: str
    owner: str


@final
class PostgresQueueLeaseStore(QueueLeaseStore):
    """Leases of cluster ``cluster_id`` in the PostgreSQL database of ``url``."""

    def __init__(self, url: str, cluster_id: str = "dev", *,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = PostgresClient(url, "leases", MIGRATIONS, max_size=4)
        self.cluster_id = cluster_id
        self._clock = clock

    def __repr__(self) -> str:
        return f"PostgresQueueLeaseStore({self.client!r}, cluster_id={self.cluster_id!r})"

    async def read_all(self) -> dict[str, Lease]:
        rows = await self.client.run("read leases",
                                     lambda c: c.fetch(_READ_ALL, self.cluster_id))
        return {str(q): Lease(str(q), str(o), float(e)) for q, o, e in rows}

    async def epoch(self, queue: str) -> int:
        """How many times ``queue``'s lease passed to another owner (0: never taken)."""
        value = await self.client.run("read a lease epoch", lambda c: c.fetchval(
            "SELECT epoch FROM stream_leases WHERE cluster_id = $1 AND queue = $2",
            self.cluster_id, queue))
        return int(value or 0)

    async def acquire(
        self, queue: str, owner: str, duration: float, dead: Collection[str] = ()
    ) -> bool:
        now = self._clock()
        epoch = await self.client.run("take a lease", lambda c: c.fetchval(
            _ACQUIRE, self.cluster_id, queue, owner, now + float(duration), now, list(dead)))
        return epoch is not None

    async def renew(self, owner: str, queues: Iterable[str], duration: float) -> set[str]:
        wanted = list(queues)
        if not wanted:
            return set()
        expiry = self._clock() + float(duration)
        rows = await self.client.run("renew leases", lambda c: c.fetch(
            _RENEW, self.cluster_id, owner, expiry, wanted))
        return {str(row[0]) for row in rows}

    async def release(self, owner: str, queues: Iterable[str]) -> None:
        wanted = list(queues)
        if wanted:
            await self.client.run("release leases", lambda c: c.execute(
                _RELEASE, self.cluster_id, owner, wanted))

    def fence(self, owner: str) -> PostgresLeaseFence:
        return PostgresLeaseFence(self.client.dsn, self.client.schema, self.cluster_id, owner)

    async def close(self) -> None:
        await self.client.close()
