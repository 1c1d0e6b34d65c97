"""Fixtures shared by every suite.

Redis: ``REDIS_URL`` (default ``redis://127.0.0.1:6379``), a key prefix of its own per test,
and the keys deleted afterwards.

Unreachable Redis skips the test with the reason, except when ``CI`` is set: then it fails.

In-process silos leave the garbage collector alone (``gc_freeze``): the suite runs hundreds of
silos in one process, and a freeze's full collection at each start walks the runner's whole
heap. A test marked ``gc_freeze`` gets the real freeze.

Every JVM the run starts (the shared SparkSession, the drivers of silo and client processes, a
standalone master, worker and executors, a Connect server) lives seconds, so it runs with the
client compiler alone and the serial collector (``JAVA_TOOL_OPTIONS``, unless already set): a
local session and its first query then cost about half the CPU, 9 core-seconds instead of 17,
which on two cores is time the rest of the test has.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379")
_reachable: list[bool] = []


def require_redis() -> None:
    if not _reachable:
        import redis

        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
            _reachable.append(True)
        except Exception as exc:
            _reachable.append(False)
            _why.append(f"Redis at {REDIS_URL} is unreachable ({exc}); set REDIS_URL")
    if not _reachable[0]:
        if os.environ.get("CI"):
            pytest.fail(_why[0])
        pytest.skip(_why[0])


_why: list[str] = []


@pytest.fixture(autouse=True)
def _in_process_silos_leave_the_collector_alone(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if request.node.get_closest_marker("gc_freeze") is None:
        from orleanspy._util import gc_freeze

        monkeypatch.setattr(gc_freeze, "acquire", _no_freeze)
        monkeypatch.setattr(gc_freeze, "release", _no_freeze)


def _no_freeze() -> None:
    return None


@pytest.fixture(autouse=True)
def _each_test_leaves_the_logging_configuration_as_it_found_it() -> Iterator[None]:
    """A test that runs the CLI or a silo host in process configures structlog for the
    whole process (level, renderer, cached loggers); the next test's captured logs must not
    depend on which test ran before it."""
    import structlog

    configured = structlog.is_configured()
    saved = structlog.get_config()
    saved["processors"] = list(saved["processors"])
    yield
    if configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


def prefix_for(tmp_path: Path) -> str:
    """A key prefix of this test's own (the same for every call in one test)."""
    return "orleanspy-test-" + hashlib.blake2b(str(tmp_path).encode(), digest_size=8).hexdigest()


def url_for(tmp_path: Path) -> str:
    return f"{REDIS_URL}?prefix={prefix_for(tmp_path)}"


def delete_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis URL with a key prefix of this test's own; skips (or fails under CI) without
    Redis; deletes the test's keys afterwards."""
    require_redis()
    yield url_for(tmp_path)
    delete_prefix(prefix_for(tmp_path))


# -- NATS --------------------------------------------------------------------------------

NATS_URL = os.environ.get("NATS_URL", "nats://127.0.0.1:4222")
_nats_reachable: list[str | None] = []


def require_nats() -> None:
    """Skip (fail under CI) unless the NATS server of ``NATS_URL`` accepts connections."""
    if not _nats_reachable:
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(NATS_URL)
        try:
            socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 4222),
                                     timeout=2).close()
            _nats_reachable.append(None)
        except OSError as exc:
            _nats_reachable.append(f"NATS at {NATS_URL} is unreachable ({exc}); set NATS_URL")
    why = _nats_reachable[0]
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)


async def delete_nats_prefix(url: str, prefix: str) -> None:
    """Delete every JetStream stream (and key-value bucket) named after ``prefix``."""
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        for info in await js.streams_info():
            name = info.config.name or ""
            if name.startswith((f"{prefix}_", f"KV_{prefix}_")):
                await js.delete_stream(name)
    finally:
        await nc.close()


@pytest.fixture
def nats_url(tmp_path: Path) -> Iterator[str]:
    """A NATS URL with a stream prefix of this test's own; skips (or fails under CI) without
    NATS; deletes the test's streams and buckets afterwards."""
    import asyncio

    require_nats()
    prefix = prefix_for(tmp_path).replace("orleanspy-test-", "t")
    yield f"{NATS_URL}?prefix={prefix}"
    asyncio.run(delete_nats_prefix(NATS_URL, prefix))
# -- PostgreSQL: POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test), a schema of
# this test's own, dropped afterwards; unreachable: skipped with the reason, failed under CI.

POSTGRES_URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
_pg_reachable: list[bool] = []
_pg_why: list[str] = []


def _pg(sql: str) -> None:
    import asyncio

    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(POSTGRES_URL, timeout=5)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


def require_postgres() -> None:
    if not _pg_reachable:
        try:
            _pg("SELECT 1")
            _pg_reachable.append(True)
        except Exception as exc:
            _pg_reachable.append(False)
            _pg_why.append(f"PostgreSQL at {POSTGRES_URL} is unreachable ({exc!r}); set "
                           "POSTGRES_URL")
    if not _pg_reachable[0]:
        if os.environ.get("CI"):
            pytest.fail(_pg_why[0])
        pytest.skip(_pg_why[0])


def schema_for(tmp_path: Path) -> str:
    """A schema name of this test's own (the same for every call in one test)."""
    return "orleanspy_test_" + hashlib.blake2b(str(tmp_path).encode(), digest_size=8).hexdigest()


@pytest.fixture
def postgres_url(tmp_path: Path) -> Iterator[str]:
    """A PostgreSQL URL with a schema of this test's own; skips (or fails under CI) without
    the server; drops the schema afterwards."""
    require_postgres()
    schema = schema_for(tmp_path)
    sep = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{sep}schema={schema}"
    _pg(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
