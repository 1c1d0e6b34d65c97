"""SqliteDatabase: a database its owner dropped without closing it closes its connection."""

from __future__ import annotations

import pytest


async def test_a_database_dropped_without_close_closes_its_connection(tmp_path) -> None:
    """An owner that forgot ``close``: the connection is closed when the database is
    collected, not left to the collector (which warns, from Python 3.13, in whatever code
    runs then)."""
    import gc
    import sys

    from orleanspy._util.sqlite import SqliteDatabase

    seen: list[object] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: seen.append(unraisable.exc_value)
    try:
        db = SqliteDatabase(str(tmp_path / "dropped.db"))
        await db.execute("CREATE TABLE t (a)")
        conn = db._conn
        assert conn is not None
        worker = db._executor
        del db
        # The worker thread may still hold the last reference (its finished work item), so
        # the database may be dropped there: wait for that thread to end before touching
        # the connection, which is never used from two threads at once.
        worker.shutdown(wait=True)
        gc.collect()
        with pytest.raises(Exception, match="closed"):
            conn.execute("SELECT 1")
    finally:
        sys.unraisablehook = previous
    assert seen == []
