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
        del db
        gc.collect()
        with pytest.raises(Exception, match="closed"):
            conn.execute("SELECT 1")
    finally:
        sys.unraisablehook = previous
    assert seen == []
