"""Group commit for ``SqliteQueueAdapter``: the inserts of every producer and the deletes
of every receiver of one database file, committed together in one transaction by one flusher
task, in a few multi-row statements (see ``orleanspy.streams.adapters.sqlite`` for why)."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Final

from orleanspy._util.futures import settle
from orleanspy._util.sqlite import SqliteDatabase
from orleanspy.messaging.codec import pack_array
from orleanspy.streams.adapters.base import COALESCE_MAX
from orleanspy.streams.adapters.sqlite_holds import held_from
from orleanspy.streams.adapters.sqlite_kept import archive, mark_gone, trim
from orleanspy.streams.ids import StreamId

__all__ = ["COLUMNS", "GroupCommit"]

# When the row was written, in seconds since the epoch by the adapter's clock: read once per
# commit and bound after each row's columns (plain ``?`` placeholders only: Python 3.12 warns
# on numbered ones bound from a sequence).
COLUMNS: Final = 5  # queue, namespace, key, events, size
_MAX_CHUNK: Final = 256  # rows per statement: 5 * 256 parameters, far below SQLite's limit


@functools.cache
def _insert_sql(n: int) -> str:
    values = ", ".join(["(?, ?, ?, ?, ?, ?)"] * n)
    return f"INSERT INTO stream_queue (queue, namespace, key, events, size, at) VALUES {values}"


@functools.cache
def _delete_sql(n: int) -> str:
    return f"DELETE FROM stream_queue WHERE queue = ? AND seq IN ({', '.join(['?'] * n)})"


def _write(conn: sqlite3.Connection, inserts: list[Any], deletes: dict[str, list[int]],
           now: float, keep: tuple[float, int] | None) -> None:
    """Insert rows (flat parameters, in order, written ``now``) and delete seqs, in a few
    statements; with ``keep`` (retention seconds, count), or while a reader holds the queue
    (``sqlite_holds``), the deleted rows are kept (``sqlite_kept``) and the queue's kept
    rows trimmed (never from the oldest held row on)."""
    start, end = 0, len(inserts)
    while start < end:
        n = min(_MAX_CHUNK, 1 << (((end - start) // COLUMNS).bit_length() - 1))
        stop = start + n * COLUMNS
        params: list[Any] = []
        for row in range(start, stop, COLUMNS):  # each row's columns, then its write time
            params += inserts[row : row + COLUMNS]
            params.append(now)
        conn.execute(_insert_sql(n), params)
        start = stop
    for queue, seqs in deletes.items():
        held = held_from(conn, queue, now)
        kept = keep if keep is not None or held is None else (0.0, 0)
        for first in range(0, len(seqs), _MAX_CHUNK):
            chunk = seqs[first : first + _MAX_CHUNK]
            n = len(chunk)
            size = n if n & (n - 1) == 0 else 1 << n.bit_length()  # pad: repeat the last seq
            params = [queue, *chunk, *[chunk[-1]] * (size - n)]
            if kept is None:
                mark_gone(conn, size, params)
            else:
                archive(conn, size, now, params)
            conn.execute(_delete_sql(size), params)
        if kept is not None:
            trim(conn, queue, now, *kept, held)


class GroupCommit:
    """Pending inserts and deletes of one database, committed together by one flusher task."""

    __slots__ = (
        "_db",
        "_deletes",
        "_flusher",
        "_inserts",
        "_now",
        "_open",
        "_waiters",
        "commits",
        "deleted",
        "inserted",
        "keep",
    )

    def __init__(self, db: SqliteDatabase, now: Callable[[], float] = time.time) -> None:
        self._db = db
        self._now = now  # the adapter's clock: the write and acknowledgement times
        #: (seconds, count) acknowledged rows are retained for; None: deleted at once
        self.keep: tuple[float, int] | None = None
        self._inserts: list[Any] = []  # flattened rows: COLUMNS values each
        #: (queue, stream) -> where its row of single events is in ``_inserts`` (its events
        #: value is a list of encoded events until the round is taken)
        self._open: dict[tuple[str, StreamId], int] = {}
        self._deletes: dict[str, list[int]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self.commits = self.inserted = self.deleted = 0

    def insert(
        self, row: tuple[str, str, bytes, bytes, int], stream_id: StreamId | None = None
    ) -> asyncio.Future[None]:
        """Add a row (of ``stream_id``); the future resolves once it is committed. Single
        events of the stream added later go to a row after it (order)."""
        if stream_id is not None and self._open:
            at = self._open.pop((row[0], stream_id), None)
            if at is not None:  # close the stream's row of single events: encode it now
                payload = pack_array(self._inserts[at + 3])
                self._inserts[at + 3] = payload
                self._inserts[at + 4] = len(payload)
        self._inserts += row
        return self._committed()

    def insert_event(
        self, queue: str, stream_id: StreamId, namespace: str, key: bytes, event: bytes
    ) -> asyncio.Future[None]:
        """Add one encoded event of ``stream_id``; events of one stream added before the next
        commit share one row (one container). The future resolves once it is committed."""
        at = self._open.get((queue, stream_id))
        if at is not None and len(self._inserts[at + 3]) < COALESCE_MAX:
            self._inserts[at + 3].append(event)
        else:
            self._open[(queue, stream_id)] = len(self._inserts)
            self._inserts += (queue, namespace, key, [event], 0)
        return self._committed()

    def _take(self) -> list[Any]:
        """The rows of this round, each row of single events encoded as one list."""
        inserts = self._inserts
        for at in self._open.values():
            payload = pack_array(inserts[at + 3])
            inserts[at + 3] = payload
            inserts[at + 4] = len(payload)
        self._open = {}
        self._inserts = []
        return inserts

    def delete(self, queue: str, seqs: list[int]) -> asyncio.Future[None]:
        """Add seqs of ``queue`` to delete; the future resolves once that is committed."""
        self._deletes.setdefault(queue, []).extend(seqs)
        return self._committed()

    def _committed(self) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name=f"flush {self._db.path}")
        return waiter

    async def wait_idle(self) -> None:
        """Wait until everything submitted so far is committed (or failed)."""
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        waiters: list[asyncio.Future[None]] = []
        try:
            while self._waiters:
                inserts, deletes, waiters = self._take(), self._deletes, self._waiters
                self._deletes, self._waiters = {}, []
                try:
                    await self._db.transaction(_write, inserts, deletes, self._now(),
                                               self.keep)
                except Exception as exc:  # loop boundary: fail this round's callers, go on
                    settle(waiters, exc)
                    continue
                self.commits += 1
                self.inserted += len(inserts) // COLUMNS
                self.deleted += sum(map(len, deletes.values()))
                settle(waiters)
            waiters = []
        except BaseException:
            for waiter in (*waiters, *self._waiters):
                waiter.cancel()
            self._inserts, self._deletes, self._waiters, self._open = [], {}, [], {}
            raise
        finally:
            self._flusher = None
