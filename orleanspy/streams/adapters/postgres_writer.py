"""Group commit and notifications for ``PostgresQueueAdapter`` (see
``orleanspy.streams.adapters.postgres``).

* Batched inserts (group commit): ``enqueue`` adds its row to the writer and awaits a future;
  one flusher task inserts everything pending in one statement (``unnest`` of arrays) in one
  transaction and resolves the futures. Single events of one stream published before the
  next commit share one row (one container).
* Order. Writers of every process insert a queue's rows under a transaction lock of that
  queue (``pg_advisory_xact_lock``), so a queue's rows commit in ``seq`` order and a reader
  that saw ``seq`` n never sees an older row appear later.
* Notifications. The receivers of this process are told of a commit at once
  (``on_commit``); the flush also notifies channel ``orleanspy_queues`` with the queues it
  wrote (``schema/queue``, delivered at commit) for other processes' receivers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from orleanspy._util.postgres import PostgresClient
from orleanspy.messaging.codec import pack_array
from orleanspy.streams.adapters.base import COALESCE_MAX

__all__ = ["CHANNEL", "Writer"]

CHANNEL: Final = "orleanspy_queues"
# One statement (one round trip, its own transaction): the queues' locks (an InitPlan, so
# taken before any row draws its seq), the rows, and the notifications sent at commit.
_INSERT: Final = """
WITH l AS (SELECT pg_advisory_xact_lock(hashtext('orleanspy-queue:' || q))
           FROM unnest($1::text[]) q),
     i AS (INSERT INTO stream_queue (queue, namespace, key, events, size)
           SELECT q, n, k, e, s FROM unnest($2::text[], $3::text[], $4::bytea[], $5::bytea[],
                                            $6::int[]) WITH ORDINALITY AS r(q, n, k, e, s, o)
           WHERE (SELECT count(*) FROM l) >= 0 ORDER BY o RETURNING 1),
     n AS (SELECT pg_notify('orleanspy_queues', $7 || '/' || q) FROM unnest($1::text[]) q
           WHERE (SELECT count(*) FROM i) > 0)
SELECT count(*) FROM n
"""

class Writer:
    """Rows pending insertion, committed together by one flusher task. ``on_commit(queues)``
    is called after each commit."""

    def __init__(self, client: PostgresClient, on_commit: Callable[[list[str]], None]) -> None:
        self._client = client
        self._on_commit = on_commit
        self._rows: list[list[Any]] = []  # [queue, namespace, key, events, size]
        # A stream's row of single events, by (queue, namespace, packed key): no StreamId hashed
        self._open: dict[tuple[str, str, bytes], list[Any]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None

    def add(self, row: list[Any]) -> asyncio.Future[None]:
        self._open.pop((row[0], row[1], row[2]), None)  # later single events go after it
        self._rows.append(row)
        return self._committed()

    def add_event(self, stream: tuple[str, str, bytes], event: bytes) -> asyncio.Future[None]:
        row = self._open.get(stream)
        if row is not None and len(row[3]) < COALESCE_MAX:
            row[3].append(event)
        else:
            row = self._open[stream] = [*stream, [event], 0]
            self._rows.append(row)
        return self._committed()

    def _committed(self) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name="postgres queue flush")
        return waiter

    async def wait_idle(self) -> None:
        if self._flusher is not None:
            await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        waiters: list[asyncio.Future[None]] = []
        try:
            while self._waiters:
                rows, waiters = self._rows, self._waiters
                self._rows, self._waiters, self._open = [], [], {}
                for row in rows:
                    if isinstance(row[3], list):
                        row[3] = pack_array(row[3])
                    row[4] = len(row[3])
                try:
                    await self._insert(rows)
                except Exception as exc:  # loop boundary: fail this round's callers, go on
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(exc)
                    continue
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
            waiters = []
        except BaseException:
            for waiter in (*waiters, *self._waiters):
                waiter.cancel()
            self._rows, self._waiters, self._open = [], [], {}
            raise
        finally:
            self._flusher = None

    async def _insert(self, rows: list[list[Any]]) -> None:
        """Insert ``rows`` (queue, namespace, key, events, size) in one transaction, under
        their queues' locks, and notify the queues' readers at commit."""
        queues = sorted({row[0] for row in rows})
        columns = [list(column) for column in zip(*rows, strict=True)]
        client = self._client
        await client.run("enqueue", lambda c: c.fetchval(
            _INSERT, queues, *columns, client.schema), idempotent=False)
        self._on_commit(queues)
