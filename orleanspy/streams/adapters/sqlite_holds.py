"""Outside readers of ``SqliteQueueAdapter`` (a Spark query, a backfill): their holds on
retention, the newest sequence of a queue, and enqueues written at most once.

Tables (next to ``stream_queue`` and ``stream_kept``):

* ``stream_hold``: one row per (queue, reader): ``seq``, the oldest sequence the reader
  still needs, and ``expires``, when the hold lapses (by the adapter's clock). While a hold
  is live, an acknowledgement keeps the rows it deletes (``stream_kept``, also without a
  retention) and trimming stops before ``seq``: the reader counts as a subscriber.
* ``stream_marker``: the markers of ``enqueue_once``, each with when it was written; a
  marker and its rows commit in one transaction, so a retried write finds the marker and
  writes nothing.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

__all__ = ["HOLD_SCHEMA", "enqueue_once", "held_from", "newest_sequence", "release",
           "set_hold"]

HOLD_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS stream_hold ("
    " queue TEXT NOT NULL, reader TEXT NOT NULL, seq INTEGER NOT NULL,"
    " expires REAL NOT NULL, PRIMARY KEY (queue, reader))",
    "CREATE TABLE IF NOT EXISTS stream_marker (marker TEXT PRIMARY KEY, at REAL NOT NULL)",
)


def held_from(conn: sqlite3.Connection, queue: str, now: float) -> int | None:
    """The oldest sequence a live hold on ``queue`` still needs; None without one."""
    row = conn.execute("SELECT min(seq) FROM stream_hold WHERE queue = ? AND expires >= ?",
                       (queue, now)).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def set_hold(conn: sqlite3.Connection, queue: str, reader: str, seq: int, now: float,
             seconds: float) -> float | None:
    """Hold ``queue``'s rows from ``seq`` on for ``reader``, for ``seconds`` from ``now`` (a
    hold never moves back). Returns when the previous hold lapsed, if it had, else None."""
    row = conn.execute("SELECT expires FROM stream_hold WHERE queue = ? AND reader = ?",
                       (queue, reader)).fetchone()
    conn.execute(
        "INSERT INTO stream_hold (queue, reader, seq, expires) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(queue, reader) DO UPDATE SET seq = max(seq, excluded.seq), "
        "expires = excluded.expires", (queue, reader, seq, now + seconds))
    return float(row[0]) if row is not None and row[0] < now else None


def release(conn: sqlite3.Connection, reader: str, queues: list[str]) -> None:
    """Drop ``reader``'s holds on ``queues``."""
    conn.executemany("DELETE FROM stream_hold WHERE queue = ? AND reader = ?",
                     [(queue, reader) for queue in queues])


def newest_sequence(conn: sqlite3.Connection, queue: str) -> int:
    """The sequence of the newest container ``queue`` ever had (0: none): kept, queued, or
    gone (the queue's trimmed mark)."""
    row = conn.execute(
        "SELECT max(s) FROM (SELECT max(seq) AS s FROM stream_queue WHERE queue = ? "
        "UNION ALL SELECT max(seq) FROM stream_kept WHERE queue = ? "
        "UNION ALL SELECT seq FROM stream_trimmed WHERE queue = ?)",
        (queue, queue, queue)).fetchone()
    return 0 if row is None or row[0] is None else int(row[0])


def enqueue_once(conn: sqlite3.Connection, marker: str, now: float, rows: list[Any],
                 forget_before: float) -> bool:
    """Write ``marker`` and the rows (queue, namespace, key, events, size each) in this
    transaction, unless the marker is there already (then nothing: False). Markers written
    before ``forget_before`` are deleted."""
    if conn.execute("INSERT OR IGNORE INTO stream_marker (marker, at) VALUES (?, ?)",
                    (marker, now)).rowcount == 0:
        return False
    conn.executemany(
        "INSERT INTO stream_queue (queue, namespace, key, events, size, at) "
        "VALUES (?, ?, ?, ?, ?, ?)", [(*row, now) for row in rows])
    conn.execute("DELETE FROM stream_marker WHERE at < ?", (forget_before,))
    return True
