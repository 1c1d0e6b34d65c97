"""RedisClient: one Redis connection pool per back-end URL, keys under the URL's prefix.

A URL is ``redis://[user:password@]host[:port][/db][?prefix=P]`` (or ``rediss://`` for TLS);
every key the runtime writes starts with ``P:`` (default ``orleanspy``), so several clusters
or test runs can share one server. ``open`` checks the server answers and raises a
``StorageError`` naming the URL (password hidden) otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from orleanspy.errors import ConfigurationError, StorageError

__all__ = ["RedisClient", "redact", "split_prefix"]

DEFAULT_PREFIX = "orleanspy"
CLOSE_GRACE = 2.0

T = TypeVar("T")


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # a command its caller stopped waiting for: nobody else reads it


def split_prefix(url: str) -> tuple[str, str]:
    """``(url without ?prefix=, prefix)``."""
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    prefixes = query.pop("prefix", [DEFAULT_PREFIX])
    prefix = prefixes[-1]
    if not prefix or any(c in prefix for c in " {}"):
        raise ConfigurationError(
            f"redis URL {redact(url)!r}: prefix {prefix!r} must be non-empty without spaces "
            "or braces (e.g. ?prefix=prod)"
        )
    rest = urlunsplit((parts.scheme, parts.netloc, parts.path,
                       urlencode(query, doseq=True), parts.fragment))
    return rest, prefix


def redact(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class RedisClient:
    """A ``redis.asyncio`` client for one URL and its key prefix."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.server_url, self.prefix = split_prefix(url)
        self._redis: Any = None
        self._detached: set[asyncio.Future[Any]] = set()  # commands whose callers gave up

    def __repr__(self) -> str:
        return f"RedisClient({redact(self.url)!r})"

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @property
    def redis(self) -> Any:
        if self._redis is None:
            import redis.asyncio as aioredis

            self._redis = aioredis.Redis.from_url(self.server_url, decode_responses=False)
        return self._redis

    async def run(self, command: Awaitable[T]) -> T:
        """Await a redis-py command in a task of its own. A cancelled caller (a silo
        stopping, a timeout) stops waiting at once and the command finishes in the
        background: redis-py's asyncio client can hang a task cancelled in the middle of a
        command, so it never sees the cancellation."""
        task = asyncio.ensure_future(command)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_retrieve)
            self._detached.add(task)
            task.add_done_callback(self._detached.discard)
            raise

    async def execute(self, pipe: Any) -> Any:
        """Run a pipeline (as ``run`` does) and release its connection whatever happens."""
        async def go() -> Any:
            try:
                return await pipe.execute()
            finally:
                await pipe.reset()

        return await self.run(go())

    async def open(self) -> None:
        try:
            await self.run(self.redis.ping())
        except Exception as exc:
            raise StorageError(
                f"cannot reach Redis at {redact(self.server_url)}: {exc}; start redis-server "
                "there or fix the URL"
            ) from exc

    async def close(self) -> None:
        """Close the pool once the commands whose callers gave up have finished (for at most
        ``CLOSE_GRACE`` s): one still connecting would otherwise open its socket after the pool
        closed, and nobody would close it."""
        if self._detached:
            await asyncio.wait(set(self._detached), timeout=CLOSE_GRACE)
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None
        for task in list(self._detached):
            task.cancel()
