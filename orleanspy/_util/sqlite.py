"""SqliteDatabase: one sqlite3 connection driven from asyncio through one dedicated thread.

Every call runs on the same worker thread (a single-worker ``ThreadPoolExecutor``), in
submission order, so the connection is never shared between threads and calls issued by one
task run one after the other. The database is opened in WAL mode with ``synchronous=NORMAL``:
a committed transaction survives a crash of the process (``kill -9``), not a power loss.

A file the database creates is private to its owner: mode 0600 (SQLite gives its ``-wal``
and ``-shm`` files the mode of the database), in a folder made 0700 when it creates that
folder; ``readable_by_others`` names the files of a database that group or others can read.

A file that cannot be opened, is not a database or is damaged raises ``StorageError`` /
``StorageCorruptionError`` naming the file and the fix, when it is opened and on any later
call that finds the damage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final, TypeVar, TypeVarTuple

from orleanspy.errors import StorageCorruptionError, StorageError

__all__ = ["SqliteDatabase", "check_columns", "readable_by_others", "storage_error"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_BUSY_TIMEOUT_MS = 5000


def _create_private(path: Path) -> None:
    """Create the folder (0700) and the empty database file (0600) if they are missing."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def readable_by_others(path: str) -> list[tuple[str, int]]:
    """The files of the database at ``path`` (itself, ``-wal``, ``-shm``) that exist and
    that group or others may read or write, with their modes."""
    found = []
    for name in (path, f"{path}-wal", f"{path}-shm"):
        try:
            mode = stat.S_IMODE(os.stat(name).st_mode)
        except FileNotFoundError:
            continue
        if mode & 0o077:
            found.append((name, mode))
    return found


class SqliteDatabase:
    """A SQLite database file (or ``":memory:"``) used from asyncio code.

    The connection is opened lazily on the worker thread by the first call (or by ``open``);
    parent directories of ``path`` are created. ``close`` is idempotent; calls made after it
    raise ``RuntimeError``.
    """

    __slots__ = ("_close_future", "_conn", "_executor", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orleanspy-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._close_future: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"SqliteDatabase({self.path!r})"

    @property
    def closed(self) -> bool:
        return self._close_future is not None

    def __del__(self) -> None:
        """A database its owner dropped without ``close`` (nothing can run on it any more):
        close the connection here, not in the garbage collector's dealloc."""
        conn = getattr(self, "_conn", None)
        if conn is not None:
            self._conn = None
            with contextlib.suppress(Exception):  # (the interpreter is shutting down, say)
                conn.close()

    # -- worker-thread side ---------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            if self.path != ":memory:" and not self.path.startswith("file:"):
                _create_private(Path(self.path))
            # (used from the one worker thread only; ``__del__`` may close it from another)
            conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_MS / 1000,
                                   check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise storage_error(self.path, exc) from None
        try:
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            _enable_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # reads the schema
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise storage_error(self.path, exc) from None
            raise
        return conn

    def _call(self, fn: Callable[[sqlite3.Connection, *Ts], T], args: tuple[*Ts]) -> T:
        conn = self._conn
        if conn is None:
            conn = self._conn = self._connect()
        try:
            return fn(conn, *args)
        except sqlite3.DatabaseError as exc:
            if _damaged(exc):
                raise storage_error(self.path, exc) from None
            raise

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @staticmethod
    def _transaction(
        conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts
    ) -> T:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            return fn(conn, *args)

    @staticmethod
    def _snapshot(
        conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts
    ) -> T:
        with conn:
            conn.execute("BEGIN")
            return fn(conn, *args)

    @staticmethod
    def _execute(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> int:
        with conn:
            return conn.execute(sql, params).rowcount

    @staticmethod
    def _executemany(
        conn: sqlite3.Connection, sql: str, seq_of_params: Iterable[Sequence[Any]]
    ) -> int:
        with conn:
            return conn.executemany(sql, seq_of_params).rowcount

    @staticmethod
    def _fetchall(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Any]:
        return conn.execute(sql, params).fetchall()

    @staticmethod
    def _fetchone(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> Any:
        return conn.execute(sql, params).fetchone()

    # -- asyncio side ---------------------------------------------------------------------
    async def run(self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts) -> T:
        """Run ``fn(conn, *args)`` on the database thread and return its result.

        ``fn`` manages its own transaction (``with conn:``); see also ``transaction``.
        """
        if self._close_future is not None:
            raise RuntimeError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, fn, args)

    async def transaction(self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts) -> T:
        """Run ``fn(conn, *args)`` inside one ``BEGIN IMMEDIATE`` transaction.

        It commits if ``fn`` returns and rolls back if it raises. The write lock is taken at
        the start, so a read-check-write sequence in ``fn`` is atomic even against other
        processes using the same file.
        """
        return await self.run(self._transaction, fn, *args)

    async def snapshot(self, fn: Callable[[sqlite3.Connection, *Ts], T], *args: *Ts) -> T:
        """Run the reads of ``fn(conn, *args)`` on one consistent snapshot of the file: a
        deferred transaction, which takes no write lock (in WAL mode writers go on)."""
        return await self.run(self._snapshot, fn, *args)

    async def open(self) -> None:
        """Open the connection now (otherwise the first call opens it)."""
        await self.run(_noop)

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute one statement in its own transaction; returns the cursor's rowcount."""
        return await self.run(self._execute, sql, params)

    async def executemany(self, sql: str, seq_of_params: Iterable[Sequence[Any]]) -> int:
        """Execute a statement for each parameter set, all in one transaction."""
        return await self.run(self._executemany, sql, seq_of_params)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of a query, as tuples."""
        return await self.run(self._fetchall, sql, params)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of a query as a tuple, or None."""
        return await self.run(self._fetchone, sql, params)

    async def close(self) -> None:
        """Close the connection once every call already submitted has run. Idempotent."""
        if self._close_future is None:
            loop = asyncio.get_running_loop()
            self._close_future = loop.run_in_executor(self._executor, self._close_connection)
            self._executor.shutdown(wait=False)
        await asyncio.shield(self._close_future)


def _noop(conn: sqlite3.Connection) -> None:
    return None


_DAMAGED: Final = ("not a database", "malformed", "disk image", "file is encrypted")


def _damaged(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return any(marker in text for marker in _DAMAGED)


def storage_error(path: str, exc: BaseException) -> StorageError:
    """The error for a SQLite file that cannot be used: names the file, the cause, the fix."""
    if isinstance(exc, sqlite3.Error) and _damaged(exc):
        return StorageCorruptionError(
            f"SQLite file {path} is damaged or is not a database ({exc}); restore it from a "
            "backup, or move it away to start with an empty one"
        )
    return StorageError(
        f"SQLite file {path} cannot be used ({exc}); check that the path names a file (not a "
        "folder) in a folder this user may write, and that no other program locks it"
    )


def check_columns(conn: sqlite3.Connection, path: str, table: str,
                  columns: Iterable[str]) -> None:
    """Raise StorageError if ``table`` of the file lacks one of ``columns``."""
    have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    missing = sorted(set(columns) - have)
    if missing:
        raise StorageError(
            f"SQLite file {path}: table {table} has no column {', '.join(missing)}: the file "
            "belongs to another program or another version; point the setting at another file"
        )


def _enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL. Several processes opening a new file at once race for this switch, and
    SQLite reports the loser "database is locked" without waiting for its busy timeout:
    retry (on the worker thread) until the busy timeout."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
