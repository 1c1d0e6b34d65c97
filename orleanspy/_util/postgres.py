"""PostgresClient: asyncpg connections for one back-end URL, tables in its schema, migrations.

A URL is ``postgresql://[user[:password]@]host[:port]/database[?schema=S]`` (``postgres://``
too); every table the runtime makes lives in schema ``S`` (default ``orleanspy``, created if
missing), so several clusters or test runs can share one database.

Schemas are versioned per component (``storage``, ``reminders``, ``membership``, ``leases``,
``queues``): table ``schema_versions`` holds the version each component's tables are at, and
``open`` applies the steps a component's tables lack, in one transaction under an advisory
lock (several silos starting at once apply each step once). A version newer than the code
knows is refused with ``StorageError``: an older orleanspy must not write tables a newer one
changed.

The client pools its connections itself (up to ``max_size``, the last one given back is the
next one taken): a call costs its round trip and no more, where asyncpg's pool adds a task
per release. Connections the server drops (a restart, ``pg_terminate_backend``) are replaced;
``run`` retries an idempotent call on a fresh connection, so reads recover by themselves, and
``open`` retries the migrations (one transaction each time) the same way.
"""

from __future__ import annotations

import asyncio
import collections
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from orleanspy.errors import ConfigurationError, OrleansPyError, StorageError

__all__ = ["PostgresClient", "connection_lost", "redact", "split_schema"]

DEFAULT_SCHEMA = "orleanspy"
_IDENT = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: Attempts of an idempotent call whose connection the server dropped.
RETRIES = 5
_MIGRATIONS = """
CREATE TABLE IF NOT EXISTS schema_versions (
    component TEXT PRIMARY KEY,
    version   INTEGER NOT NULL
)
"""

T = TypeVar("T")


def split_schema(url: str) -> tuple[str, str]:
    """``(url without ?schema=, schema)``."""
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    schema = query.pop("schema", [DEFAULT_SCHEMA])[-1]
    if not _IDENT.fullmatch(schema):
        raise ConfigurationError(
            f"PostgreSQL URL {redact(url)!r}: schema {schema!r} must be a lower-case SQL name "
            "(letters, digits, underscores; e.g. ?schema=prod)"
        )
    rest = urlunsplit((parts.scheme, parts.netloc, parts.path,
                       urlencode(query, doseq=True), parts.fragment))
    return rest, schema


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection went away (the call may be retried on another)."""
    import asyncpg

    # InternalClientError: asyncpg's protocol state when the server closes the connection in
    # the middle of an operation ("cannot switch to state ..."); the pool drops it.
    return isinstance(exc, (
        asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError, ConnectionError,
        asyncpg.exceptions.OperatorInterventionError, asyncpg.exceptions.InternalClientError,
    )) and not isinstance(exc, asyncpg.exceptions.QueryCanceledError)


class PostgresClient:
    """Pooled connections to one URL, its schema, and the migrations of one component.

    ``migrations`` are the SQL steps of ``component``'s tables, oldest first (each step one
    or more statements); the version is the number of steps applied. ``error`` is the
    exception type raised for a server that cannot be reached or fails a call.
    """

    def __init__(self, url: str, component: str, migrations: Sequence[str], *,
                 error: type[Exception] = StorageError, max_size: int = 10) -> None:
        self.url = url
        self.dsn, self.schema = split_schema(url)
        self.component = component
        self.migrations = tuple(migrations)
        self.error = error
        self.max_size = max_size
        self._opened = False
        self._opening: asyncio.Future[None] | None = None
        self._closed = False
        # The pool: idle connections (last used first), how many are open or opening, and
        # the callers waiting for one (handed a connection, or None: open one yourself).
        self._idle: list[Any] = []
        self._size = 0
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()

    def __repr__(self) -> str:
        return f"PostgresClient({redact(self.url)!r}, {self.component!r})"

    @property
    def application_name(self) -> str:
        """What ``pg_stat_activity`` shows for this client's connections."""
        return f"orleanspy:{self.schema}"

    def failed(self, action: str, exc: BaseException) -> Exception:
        return self.error(
            f"{self.component} on PostgreSQL ({redact(self.dsn)}, schema {self.schema}) could "
            f"not {action}: {exc!r}"
        )

    async def open(self) -> None:
        """Connect and bring the component's tables to the version the code knows. A second
        call (or a concurrent one) waits for the first."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        try:
            await asyncio.shield(self._opening)
        except BaseException:
            if self._opening.done():
                self._opening = None
            raise

    async def _open(self) -> None:
        attempt = 0
        while True:  # a connection the server drops while migrating: again on a fresh one
            try:
                conn = await self._take()
            except Exception as exc:
                raise self.error(
                    f"cannot reach PostgreSQL at {redact(self.dsn)}: {exc}; start the server "
                    "there or fix the URL"
                ) from exc
            try:
                await self._migrate(conn)
            except BaseException as exc:
                self._give(conn, broken=True)
                if not isinstance(exc, Exception) or not connection_lost(exc) or (
                        attempt >= RETRIES):
                    raise
                attempt += 1
                await asyncio.sleep(0.05 * attempt)
                continue
            self._give(conn)
            self._opened = True
            return

    async def _take(self) -> Any:
        """An idle connection, a new one (fewer than ``max_size`` open), or the next one
        given back."""
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():
                return conn
            self._size -= 1
        if self._size >= self.max_size:
            waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                conn = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # handed one as it was cancelled
                    handed = waiter.result()
                    if handed is None:
                        self._give_slot(None)
                    else:
                        self._give(handed)
                raise
            if conn is not None:
                return conn
        self._size += 1
        try:
            import asyncpg

            return await asyncpg.connect(
                self.dsn, server_settings={"search_path": self.schema,
                                           "application_name": self.application_name})
        except BaseException:
            self._size -= 1
            self._give_slot(None)
            raise

    def _give(self, conn: Any, *, broken: bool = False) -> None:
        """Back to the pool; a connection that failed, was cancelled in the middle of a
        call, or is left in a transaction is closed instead (its slot goes on)."""
        if broken or self._closed or conn.is_closed() or conn.is_in_transaction():
            conn.terminate()
            self._size -= 1
            self._give_slot(None)
        elif not self._give_slot(conn):
            self._idle.append(conn)

    def _give_slot(self, conn: Any) -> bool:
        """Hand ``conn`` (None: the right to open one) to the first caller still waiting."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False

    async def _migrate(self, conn: Any) -> None:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))",
                               f"orleanspy-migrate:{self.schema}")
            await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            await conn.execute(_MIGRATIONS)
            have = await conn.fetchval(
                "SELECT version FROM schema_versions WHERE component = $1", self.component)
            have = int(have or 0)
            if have > len(self.migrations):
                raise self.error(
                    f"the {self.component} tables in schema {self.schema} of "
                    f"{redact(self.dsn)} are at version {have}; this orleanspy knows versions up "
                    f"to {len(self.migrations)}: upgrade orleanspy on this host, or point it at "
                    "another schema (?schema=NAME)"
                )
            for step in self.migrations[have:]:
                await conn.execute(step)
            if have < len(self.migrations):
                await conn.execute(
                    "INSERT INTO schema_versions (component, version) VALUES ($1, $2) "
                    "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                    self.component, len(self.migrations))

    async def run(self, action: str, fn: Callable[[Any], Awaitable[T]], *,
                  idempotent: bool = True) -> T:
        """``fn(connection)`` on a pooled connection. A dropped connection is retried (on a
        fresh one) if the call is ``idempotent``; any other failure of the server raises
        ``error`` naming ``action``."""
        if not self._opened:
            await self.open()
        attempt = 0
        while True:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            conn = None
            try:
                conn = await self._take()
                result = await fn(conn)
            except BaseException as exc:
                failed = not isinstance(exc, Exception)  # cancelled in the middle of a call
                if conn is not None:
                    self._give(conn, broken=failed or connection_lost(exc))
                if failed:
                    raise
                if self._closed:
                    raise RuntimeError(f"{self!r} is closed") from exc
                if idempotent and connection_lost(exc) and attempt < RETRIES:
                    attempt += 1
                    await asyncio.sleep(0.05 * attempt)  # the server restarting: back off
                    continue
                if _ours(exc):
                    raise
                raise self.failed(action, exc) from exc
            self._give(conn)
            return result

    async def close(self) -> None:
        """Close the idle connections; the ones in use close when given back."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                await asyncio.wait_for(conn.close(), 5.0)
            except (TimeoutError, Exception):
                conn.terminate()
        while self._waiters:  # nothing is given back to them any more
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RuntimeError(f"{self!r} is closed"))


def _ours(exc: BaseException) -> bool:
    """Errors the callbacks raise on purpose (not the server's)."""
    return isinstance(exc, OrleansPyError)
