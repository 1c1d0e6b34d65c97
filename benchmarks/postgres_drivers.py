"""PostgreSQL driver choice: asyncpg against psycopg 3 (async) on the work the back ends do.

Usage::

    .venv/bin/python benchmarks/postgres_drivers.py [--n 2000] [--trials 3]

``POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``) names the server; the
run makes and drops a schema of its own. Two workloads, each run by both drivers in
interleaved trials (best of ``--trials``), with 10 concurrent tasks on a pool of 10
connections (asyncpg's without its reset round trip on release, as orleanspy's pools;
psycopg's pool sends none):

1. ``conditional_update``: the grain-storage write, one statement that replaces a row only if
   its etag (a version column) matches, ``RETURNING`` the new version; N writes over 100 rows.
2. ``batched_insert``: the queue adapter's enqueue, 100 rows of 200-byte payloads per
   statement (``INSERT ... SELECT * FROM unnest($1::bigint[], $2::bytea[])``); N rows in all.

Printed per row: operations per second and the client's CPU per operation (process time),
the latter the steadier figure on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

URL = os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TASKS = 10
BATCH = 100


async def _asyncpg(schema: str) -> tuple[Any, Callable[[str, tuple[Any, ...]], Awaitable[Any]]]:
    import asyncpg

    async def keep_session(conn: Any) -> None:  # as orleanspy's pools: no reset round trip
        pass

    pool = await asyncpg.create_pool(URL, min_size=TASKS, max_size=TASKS, reset=keep_session,
                                     server_settings={"search_path": schema})

    async def run(sql: str, args: tuple[Any, ...]) -> Any:
        sql = sql.replace("%s", "${}").format(*range(1, sql.count("%s") + 1))
        return await pool.fetchval(sql, *args)

    return pool, run


async def _psycopg(schema: str) -> tuple[Any, Callable[[str, tuple[Any, ...]], Awaitable[Any]]]:
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(URL, min_size=TASKS, max_size=TASKS, open=False,
                               kwargs={"options": f"-c search_path={schema}",
                                       "autocommit": True, "prepare_threshold": 0})
    await pool.open(wait=True)

    async def run(sql: str, args: tuple[Any, ...]) -> Any:
        async with pool.connection() as conn:
            cur = await conn.execute(sql, args)
            row = await cur.fetchone() if cur.description else None
            return None if row is None else row[0]

    return pool, run


async def workload(name: str, run: Callable[[str, tuple[Any, ...]], Awaitable[Any]], n: int
                   ) -> tuple[float, float]:
    payload = os.urandom(200)
    if name == "conditional_update":
        versions = {}
        for key in range(100):
            await run("INSERT INTO state (k, v, data) VALUES (%s, 1, %s) "
                      "ON CONFLICT (k) DO UPDATE SET v = 1", (key, payload))
            versions[key] = 1

        async def worker(t: int) -> None:
            for i in range(n // TASKS):
                key = t * 10 + i % 10  # each task owns ten rows
                new = await run("UPDATE state SET v = v + 1, data = %s WHERE k = %s AND v = %s "
                                "RETURNING v", (payload, key, versions[key]))
                assert new is not None
                versions[key] = new
    else:
        ids = iter(range(10**9))

        async def worker(t: int) -> None:
            for _ in range(n // TASKS // BATCH):
                batch = [next(ids) for _ in range(BATCH)]
                await run("INSERT INTO queue (id, data) SELECT * FROM "
                          "unnest(%s::bigint[], %s::bytea[])", (batch, [payload] * BATCH))
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(t) for t in range(TASKS)))
    return n / (time.perf_counter() - wall), (time.process_time() - cpu) / n * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    import asyncpg

    schema = "bench_" + uuid.uuid4().hex[:8]
    admin = await asyncpg.connect(URL)
    await admin.execute(f"CREATE SCHEMA {schema}")
    await admin.execute(f"CREATE TABLE {schema}.state (k bigint PRIMARY KEY, v bigint, "
                        "data bytea)")
    await admin.execute(f"CREATE TABLE {schema}.queue (id bigint PRIMARY KEY, data bytea)")
    best: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        for _ in range(args.trials):
            for driver, make in (("asyncpg", _asyncpg), ("psycopg", _psycopg)):
                pool, run = await make(schema)
                try:
                    for name in ("conditional_update", "batched_insert"):
                        await admin.execute(f"TRUNCATE {schema}.queue")
                        rate, cpu = await workload(name, run, args.n)
                        old = best.get((name, driver))
                        if old is None or rate > old[0]:
                            best[name, driver] = (rate, min(cpu, old[1]) if old else cpu)
                finally:
                    await pool.close()
    finally:
        await admin.execute(f"DROP SCHEMA {schema} CASCADE")
        await admin.close()
    print(f"{'workload':<20} {'driver':<8} {'ops/s':>10} {'client CPU us/op':>17}")
    for (name, driver), (rate, cpu) in sorted(best.items()):
        print(f"{name:<20} {driver:<8} {rate:>10.0f} {cpu:>17.1f}")


if __name__ == "__main__":
    asyncio.run(main())
