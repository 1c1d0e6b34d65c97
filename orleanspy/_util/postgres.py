"""PostgresClient: one asyncpg pool per back-end URL, tables in the URL's schema, migrations.

A URL is ``postgresql://[user[:password]@]host[:port]/database[?schema=S]`` (``postgres://``
too); every table the runtime makes lives in schema ``S`` (default ``orleanspy``, created if
missing), so several clusters or test runs can share one database.

Schemas are versioned per component (``storage``, ``reminders``, ``membership``, ``leases``,
``queues``): table ``schema_versions`` holds the version each component's tables are at, and
``open`` applies the steps a component's tables lack, in one transaction under an advisory
lock (several silos starting at once apply each step once). A version newer than the code
knows is refused with ``StorageError``: an older orleanspy must not write tables a newer one
changed.

Connections the server drops (a restart, ``pg_terminate_backend``) are replaced by the pool;
``run`` retries an idempotent call on a fresh connection, so reads recover by themselves, and
``open`` retries the migrations (one transaction each time) the same way.
"""

from __future__ import annotations

import asyncio
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
    """An asyncpg pool for one URL, its schema, and the migrations of one component.

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
        self._pool: Any = None
        self._opening: asyncio.Future[None] | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresClient({redact(self.url)!r}, {self.component!r})"

    @property
    def application_name(self) -> str:
        """What ``pg_stat_activity`` shows for this client's connections."""
        return f"orleanspy:{self.schema}"

    @property
    def pool(self) -> Any:
        if self._pool is None:
            raise RuntimeError(f"{self!r} is not open")
        return self._pool

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
        import asyncpg

        try:
            pool = await asyncpg.create_pool(
                self.dsn, min_size=1, max_size=self.max_size, reset=_keep_session,
                server_settings={"search_path": self.schema,
                                 "application_name": self.application_name},
            )
        except Exception as exc:
            raise self.error(
                f"cannot reach PostgreSQL at {redact(self.dsn)}: {exc}; start the server "
                "there or fix the URL"
            ) from exc
        try:
            attempt = 0
            while True:  # a connection the server drops while migrating: again on a fresh one
                try:
                    async with pool.acquire() as conn:
                        await self._migrate(conn)
                    break
                except Exception as exc:
                    if not connection_lost(exc) or attempt >= RETRIES:
                        raise
                    attempt += 1
                    await asyncio.sleep(0.05 * attempt)
        except BaseException:
            pool.terminate()
            raise
        self._pool = pool

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
        if self._pool is None:
            await self.open()
        attempt = 0
        while True:
            try:
                async with self.pool.acquire() as conn:
                    return await fn(conn)
            except Exception as exc:
                if self._closed:
                    raise RuntimeError(f"{self!r} is closed") from exc
                if idempotent and connection_lost(exc) and attempt < RETRIES:
                    attempt += 1
                    await asyncio.sleep(0.05 * attempt)  # the server restarting: back off
                    continue
                if _ours(exc):
                    raise
                raise self.failed(action, exc) from exc

    async def close(self) -> None:
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), 5.0)
            except (TimeoutError, Exception):
                pool.terminate()


async def _keep_session(conn: Any) -> None:
    """A connection going back to the pool keeps its session: the back ends set nothing
    that outlives a transaction (locks and settings are transaction-scoped, and LISTEN runs
    on a connection of its own). asyncpg still rolls back an open transaction; its default
    reset would cost a round trip per call."""


def _ours(exc: BaseException) -> bool:
    """Errors the callbacks raise on purpose (not the server's)."""
    return isinstance(exc, OrleansPyError)
