"""Retention and time travel for ``SqliteQueueAdapter``: what an acknowledgement keeps, what
trimming drops, and ``read_range`` over both the kept and the unacknowledged rows.

Tables (next to ``stream_queue``):

* ``stream_kept``: acknowledged rows still retained, with the columns of ``stream_queue`` and
  ``acked`` (when the acknowledgement was committed, by the adapter's clock). A retaining
  acknowledgement moves a row here in the same transaction as its delete.
* ``stream_trimmed``: per queue, the newest ``seq`` and ``at`` of any row that is gone
  (acknowledged without retention, or trimmed). Everything of the queue after that ``seq``
  is still in one of the two tables: a replay from a point after the mark has no gap, a
  replay from a point at or before it is refused (``ReplayUnavailableError``).

Trimming drops a prefix (in ``seq`` order) of a queue's kept rows, never a row in the middle,
so the mark stays exact; it runs with the acknowledgements of the queue (nothing is trimmed
while nothing is acknowledged).
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any, Final

from orleanspy.errors import ReplayUnavailableError
from orleanspy.streams.tokens import SequenceToken

__all__ = ["KEPT_SCHEMA", "archive", "mark_gone", "read_range", "read_rows", "trim"]

KEPT_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS stream_kept ("
    " seq INTEGER PRIMARY KEY,"
    " queue TEXT NOT NULL,"
    " namespace TEXT NOT NULL,"
    " key BLOB NOT NULL,"
    " events BLOB NOT NULL,"
    " size INTEGER NOT NULL,"
    " at REAL NOT NULL,"
    " acked REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS stream_kept_by_queue ON stream_kept (queue, seq)",
    "CREATE TABLE IF NOT EXISTS stream_trimmed ("
    " queue TEXT PRIMARY KEY, seq INTEGER NOT NULL, at REAL NOT NULL)",
)
_COLUMNS: Final = "seq, namespace, key, events, size, at"
_UPSERT: Final = (
    " ON CONFLICT(queue) DO UPDATE SET seq = max(seq, excluded.seq), at = max(at, excluded.at)"
)
_TRIM_PAGE: Final = 512


@functools.cache
def _archive_sql(n: int) -> str:
    return ("INSERT OR IGNORE INTO stream_kept "
            "(seq, queue, namespace, key, events, size, at, acked) "
            "SELECT seq, queue, namespace, key, events, size, at, ? FROM stream_queue "
            f"WHERE queue = ? AND seq IN ({', '.join(['?'] * n)})")


@functools.cache
def _mark_sql(n: int) -> str:
    return ("INSERT INTO stream_trimmed (queue, seq, at) SELECT queue, max(seq), max(at) "
            f"FROM stream_queue WHERE queue = ? AND seq IN ({', '.join(['?'] * n)}) "
            "GROUP BY queue" + _UPSERT)


def archive(conn: sqlite3.Connection, n: int, now: float, params: list[Any]) -> None:
    """Copy the rows ``params`` (queue, then ``n`` seqs) to ``stream_kept``, acked ``now``."""
    conn.execute(_archive_sql(n), [now, *params])


def mark_gone(conn: sqlite3.Connection, n: int, params: list[Any]) -> None:
    """The rows ``params`` (queue, then ``n`` seqs) are about to go: move the queue's mark."""
    conn.execute(_mark_sql(n), params)


def trim(conn: sqlite3.Connection, queue: str, now: float, seconds: float, count: int,
         held: int | None = None) -> None:
    """Drop the oldest kept rows of ``queue`` that neither retention keeps: acknowledged more
    than ``seconds`` ago, not among the newest ``count`` and before ``held`` (the oldest
    sequence a reader's hold needs, ``sqlite_holds``)."""
    count_from: int | None = None  # rows from this seq on are kept by the count
    if count:
        row = conn.execute("SELECT seq FROM stream_kept WHERE queue = ? ORDER BY seq DESC "
                           "LIMIT 1 OFFSET ?", (queue, count - 1)).fetchone()
        if row is None:
            return  # fewer than ``count`` kept
        count_from = row[0]
    cutoff = now - seconds
    while True:
        last = None
        page = conn.execute("SELECT seq, acked FROM stream_kept WHERE queue = ? ORDER BY seq "
                            "LIMIT ?", (queue, _TRIM_PAGE)).fetchall()
        for seq, acked in page:
            if ((seconds and acked >= cutoff) or (count_from is not None and seq >= count_from)
                    or (held is not None and seq >= held)):
                break
            last = seq
        if last is None:
            return
        conn.execute("INSERT INTO stream_trimmed (queue, seq, at) SELECT queue, max(seq), "
                     "max(at) FROM stream_kept WHERE queue = ? AND seq <= ? GROUP BY queue"
                     + _UPSERT, (queue, last))
        conn.execute("DELETE FROM stream_kept WHERE queue = ? AND seq <= ?", (queue, last))
        if last != page[-1][0] or len(page) < _TRIM_PAGE:
            return


def read_rows(conn: sqlite3.Connection, queue: str, seq: int, max_count: int,
              stream: tuple[str, bytes] | None) -> list[Any]:
    """Rows of ``queue`` (of ``stream`` = (namespace, packed key) only, if given) from
    ``seq`` on, kept and unacknowledged alike, in ``seq`` order."""
    where = "queue = ? AND seq >= ?" + ("" if stream is None else
                                        " AND namespace = ? AND key = ?")
    args: list[Any] = [queue, seq] if stream is None else [queue, seq, *stream]
    sql = (f"SELECT {_COLUMNS} FROM stream_kept WHERE {where} UNION ALL "
           f"SELECT {_COLUMNS} FROM stream_queue WHERE {where} ORDER BY seq LIMIT ?")
    return conn.execute(sql, [*args, *args, max_count]).fetchall()



def read_range(conn: sqlite3.Connection, queue: str, start: SequenceToken | float,
               max_count: int, stream: tuple[str, bytes] | None) -> list[Any]:
    """``QueueAdapter.read_range`` in one transaction: refuse a start at or before the
    queue's mark, else the rows from it on."""
    mark = conn.execute("SELECT seq, at FROM stream_trimmed WHERE queue = ?",
                        (queue,)).fetchone()
    if mark is not None and (start.sequence <= mark[0] if isinstance(start, SequenceToken)
                             else start <= mark[1]):
        oldest = conn.execute(
            "SELECT seq, at FROM (SELECT seq, at FROM stream_kept WHERE queue = ? UNION ALL "
            "SELECT seq, at FROM stream_queue WHERE queue = ?) ORDER BY seq LIMIT 1",
            (queue, queue)).fetchone()
        token = SequenceToken(oldest[0] if oldest else mark[0] + 1)
        at = float(oldest[1]) if oldest else float(mark[1])
        raise ReplayUnavailableError.beyond_retention(queue, start, token, at)
    if isinstance(start, SequenceToken):
        seq = start.sequence
    else:
        row = conn.execute(
            "SELECT min(s) FROM (SELECT min(seq) AS s FROM stream_kept WHERE queue = ? AND "
            "at >= ? UNION ALL SELECT min(seq) FROM stream_queue WHERE queue = ? AND "
            "at >= ?)", (queue, float(start), queue, float(start))).fetchone()
        if row[0] is None:
            return []
        seq = row[0]
    return read_rows(conn, queue, seq, max_count, stream)
