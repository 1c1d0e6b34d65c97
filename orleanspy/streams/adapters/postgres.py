"""PostgresQueueAdapter: durable stream queues in PostgreSQL (table ``stream_queue``).

Data path: producer (1) -> ``enqueue`` -> a row of ``stream_queue`` -> the agent's receiver
(3) selects the rows past the last one it read -> cache (4) -> consumers (5) -> the purged
containers come back through ``messages_delivered`` and their rows are deleted (or, with a
``retention``, marked acknowledged and deleted once older than it).

* Writes (``orleanspy.streams.adapters.postgres_writer``): ``enqueue`` adds its row to a
  group commit (one ``INSERT ... SELECT`` statement per round, single events of one stream
  published before the next commit sharing one row), under the queues' transaction locks
  (``pg_advisory_xact_lock``), so a queue's rows commit in ``seq`` order (a row's ``seq``, a
  ``BIGSERIAL``, is its container's sequence number) and a reader that saw ``seq`` n never
  sees an older row appear later.
* LISTEN/NOTIFY. The writer tells this adapter's receivers of a queue's commit at once, and
  other processes by notifying channel ``orleanspy_queues`` (``schema/queue``, delivered at
  commit; at most once per ``NOTIFY_GAP``, 10 ms, per queue from one process, the commits in
  between covered by a notification at the gap's end). Each adapter keeps one listening
  connection and marks the receivers of a notified queue. A receiver queries only when told
  that rows arrived (or after a read that filled ``max_count``, or ``CHECK_EVERY`` seconds
  after its last query), so an idle queue costs a query every few seconds at most; a lost
  listening connection marks every receiver (it reads once) and is opened again. A
  notification wakes the receiver's reader (``wake_on_arrival``) ``READ_GAP`` (10 ms) after
  its last query at the earliest: under a steady stream of commits one read takes several's
  rows.
* At-least-once: rows stay until acknowledged, so a new receiver reads every unacknowledged
  row again, in order. With a ``PostgresLeaseFence`` (``fence_with``) an acknowledgement
  deletes rows only while the queue's lease is this silo's, in the same statement.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Collection, Sequence
from functools import partial
from typing import Any, Final, final

from orleanspy._util.postgres import PostgresClient
from orleanspy.errors import LeaseLostError
from orleanspy.messaging.codec import Codec
from orleanspy.streams.adapters.base import (
    BatchContainer,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
)
from orleanspy.streams.adapters.postgres_writer import CHANNEL, Writer
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken, container_token

__all__ = ["PostgresAdapterFactory", "PostgresQueueAdapter", "PostgresQueueReceiver"]

MIGRATIONS = (
    """
    CREATE TABLE stream_queue (
        seq       BIGSERIAL PRIMARY KEY,
        queue     TEXT NOT NULL,
        namespace TEXT NOT NULL,
        key       BYTEA NOT NULL,
        events    BYTEA NOT NULL,
        size      INTEGER NOT NULL,
        at        DOUBLE PRECISION NOT NULL DEFAULT extract(epoch FROM clock_timestamp()),
        acked_at  DOUBLE PRECISION
    );
    CREATE INDEX stream_queue_pending ON stream_queue (queue, seq) WHERE acked_at IS NULL
    """,
)
#: Seconds after which a receiver queries even without a notification (a listening
#: connection lost without the client noticing, such as behind a broken network path).
CHECK_EVERY: Final = 5.0
#: Seconds after a receiver's query before a notification wakes its reader (module docstring).
READ_GAP = 0.01
_COLUMNS: Final = "seq, namespace, key, events, size, at"
_SELECT: Final = (f"SELECT {_COLUMNS} FROM stream_queue WHERE queue = $1 AND seq > $2 "
                  "AND acked_at IS NULL ORDER BY seq LIMIT $3")
_SELECT_FROM: Final = (f"SELECT {_COLUMNS} FROM stream_queue WHERE queue = $1 AND seq >= $2 "
                       "AND acked_at IS NULL ORDER BY seq LIMIT $3")
_SELECT_STREAM_FROM: Final = (
    f"SELECT {_COLUMNS} FROM stream_queue WHERE queue = $1 AND seq >= $2 "
    "AND acked_at IS NULL AND namespace = $4 AND key = $5 ORDER BY seq LIMIT $3")
_FENCE: Final = ("SELECT 1 FROM stream_leases WHERE cluster_id = $3 AND queue = $1 "
                 "AND owner = $4 FOR SHARE")
_CHANGE: Final = {False: "DELETE FROM stream_queue WHERE queue = $1 AND seq = ANY($2::bigint[])",
                  True: ("UPDATE stream_queue SET acked_at = extract(epoch FROM clock_timestamp())"
                         " WHERE queue = $1 AND seq = ANY($2::bigint[]) AND acked_at IS NULL")}
# An acknowledgement commits without waiting for its WAL flush (synchronous_commit off for its
# own transaction): a crash of the server may undo the last fraction of a second of them, and
# those events come again (at least once). Each returns whether the lease holds (or True).
_ACK: Final = {
    (retention, fenced): (
        "WITH a AS (SELECT set_config('synchronous_commit', 'off', true))"
        + (f", f AS ({_FENCE})" if fenced else "")
        + f", d AS ({_CHANGE[retention]} AND (SELECT count(*) FROM a) > 0"
        + (" AND EXISTS (SELECT 1 FROM f)" if fenced else "")
        + " RETURNING 1) SELECT (SELECT count(*) FROM d) >= 0"
        + (" AND EXISTS (SELECT 1 FROM f)" if fenced else ""))
    for retention in (False, True) for fenced in (False, True)
}
_PURGE: Final = ("DELETE FROM stream_queue WHERE acked_at IS NOT NULL "
                 "AND acked_at < extract(epoch FROM clock_timestamp()) - $1")
_COUNT: Final = "SELECT count(*) FROM stream_queue WHERE queue = $1 AND acked_at IS NULL"
_STREAM_ID_CACHE_SIZE: Final = 4096


@final
class PostgresQueueReceiver(QueueAdapterReceiver):
    """Reads one queue's rows in ``seq`` order; remembers (in memory) the last ``seq`` read.
    A notification for the queue (and the start) sets ``arrived``, then calls ``on_arrival``."""

    def __init__(self, queue_id: QueueId, adapter: PostgresQueueAdapter) -> None:
        self._queue_id = queue_id
        self._queue_text = str(queue_id)
        self._adapter = adapter
        self._codec = Codec()
        self._last_seq = 0
        self._lock = asyncio.Lock()
        self._state = "new"
        self._stream_ids: dict[tuple[str, bytes], StreamId] = {}
        self.arrived = True
        self._queried_at = 0.0
        self.on_arrival: Callable[[], None] | None = None
        self._wake_timer: asyncio.TimerHandle | None = None

    def wake_on_arrival(self, wake: Callable[[], None]) -> None:
        self.on_arrival = wake

    def __repr__(self) -> str:
        return f"PostgresQueueReceiver({self._queue_id}, {self._adapter!r})"

    @property
    def queue(self) -> QueueId:
        return self._queue_id

    def notified(self) -> None:
        self.arrived = True
        if self.on_arrival is not None and self._wake_timer is None:
            loop = asyncio.get_running_loop()
            self._wake_timer = loop.call_at(self._queried_at + READ_GAP, self._wake)

    def _wake(self) -> None:
        self._wake_timer = None
        if self.on_arrival is not None and self._state == "ready":
            self.on_arrival()

    def _check_ready(self, action: str) -> None:
        if self._state != "ready":
            when = "before initialize()" if self._state == "new" else "after shutdown()"
            raise RuntimeError(f"cannot {action} on {self!r} {when}")

    async def initialize(self) -> None:
        if self._state == "new":
            self._last_seq = 0  # every row still in the table is unacknowledged
            self.arrived = True
            self._adapter.receivers.setdefault(self._queue_text, set()).add(self)
            self._state = "ready"

    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("get_messages()")
        if max_count == 0:
            return []
        async with self._lock:
            if self._state != "ready":
                return []
            now = asyncio.get_running_loop().time()
            if not (self.arrived or not self._adapter.listening
                    or now - self._queried_at >= CHECK_EVERY):
                return []  # no notification since the last read that found the queue drained
            self.arrived = False  # a notification during the query sets it again
            self._queried_at = now
            try:
                rows = await self._adapter.client.run("read a queue", lambda c: c.fetch(
                    _SELECT, self._queue_text, self._last_seq, max_count))
            except BaseException:
                self.arrived = True
                raise
            if len(rows) == max_count:
                self.arrived = True  # more may be waiting
            if not rows:
                return []
            self._last_seq = rows[-1][0]
        return self._containers(rows)

    async def read_from(
        self, token: SequenceToken, max_count: int, stream_id: StreamId | None = None
    ) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("read_from()")
        if max_count == 0:
            return []
        args: tuple[Any, ...] = (self._queue_text, token.sequence, max_count)
        sql = _SELECT_FROM
        if stream_id is not None:
            sql = _SELECT_STREAM_FROM
            args = (*args, stream_id.namespace, self._codec.packb(stream_id.key))
        rows = await self._adapter.client.run("read a queue", lambda c: c.fetch(sql, *args))
        return self._containers(rows)

    def _containers(self, rows: list[Any]) -> list[BatchContainer]:
        unpack, stream_ids = self._codec.unpackb, self._stream_ids
        batch: list[BatchContainer] = []
        for seq, namespace, key, events, size, at in rows:
            key = bytes(key)
            stream_id = stream_ids.get((namespace, key))
            if stream_id is None:
                if len(stream_ids) >= _STREAM_ID_CACHE_SIZE:
                    stream_ids.clear()
                stream_id = stream_ids[(namespace, key)] = StreamId(namespace, unpack(key))
            batch.append(BatchContainer.encoded(stream_id, container_token(seq), bytes(events),
                                                unpack, size, float(at)))
        return batch

    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        """Delete (or mark) the rows of ``batch`` by ``seq`` alone, in one statement."""
        self._check_ready("messages_delivered()")
        if batch:
            await self._adapter.acknowledge(self._queue_id, [c.token.sequence for c in batch])

    async def shutdown(self) -> None:
        self._state = "stopped"
        self._adapter.receivers.get(self._queue_text, set()).discard(self)
        async with self._lock:  # wait for a read in flight
            pass


@final
class PostgresQueueAdapter(QueueAdapter):
    """All queues of a provider in table ``stream_queue`` of the database of ``url``.

    Several providers and processes may share one table: rows carry the queue's
    ``"provider-index"`` text. ``retention`` > 0 keeps acknowledged rows that many seconds
    (for inspection or replay by hand) instead of deleting them at once.
    """

    def __init__(self, name: str, url: str, *, retention: float = 0.0) -> None:
        self._name = name
        self.client = PostgresClient(url, "queues", MIGRATIONS)
        self.retention = float(retention)
        self.receivers: dict[str, set[PostgresQueueReceiver]] = {}
        self._writer = Writer(self.client, self._committed)
        self._codec = Codec()
        self._state = "new"
        self._fence: Any = None
        self._listener: Any = None
        self._listen_task: asyncio.Task[None] | None = None
        self._purged = 0.0
        self.listening = False

    def __repr__(self) -> str:
        return f"PostgresQueueAdapter({self._name!r}, {self.client!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_rewindable(self) -> bool:
        return True

    async def open(self) -> None:
        """Create the table if missing and start listening. Idempotent."""
        if self._state == "new":
            await self.client.open()
            await self._listen()
            if self._state == "new":
                self._state = "open"

    async def _listen(self) -> None:
        """Open the listening connection (once more after the server dropped it)."""
        import asyncpg

        conn = await asyncpg.connect(
            self.client.dsn, server_settings={"application_name": self.client.application_name})
        try:
            await conn.add_listener(CHANNEL, self._notified)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._listener_lost)
        self._listener, self.listening = conn, True
        self._wake_all()  # rows may have arrived while no one listened

    def _notified(self, conn: Any, pid: int, channel: str, payload: str) -> None:
        schema, _, queue = payload.partition("/")
        for receiver in self.receivers.get(queue, ()) if schema == self.client.schema else ():
            receiver.notified()

    def _wake_all(self) -> None:
        for receiver in [r for receivers in self.receivers.values() for r in receivers]:
            receiver.notified()

    def _listener_lost(self, conn: Any) -> None:
        self.listening = False  # receivers query at each read until listening again
        self._wake_all()
        if self._state != "closed" and self._listen_task is None:
            self._listen_task = asyncio.get_running_loop().create_task(self._relisten())

    async def _relisten(self) -> None:
        """Listen again, backing off while the server refuses (receivers query meanwhile)."""
        try:
            delay = 0.05
            while self._state != "closed":
                try:
                    await self._listen()
                    return
                except Exception:  # loop boundary: the server is still away, try again
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
        finally:
            self._listen_task = None

    async def close(self) -> None:
        """Wait for pending enqueues to commit, then close. Idempotent."""
        self._state = "closed"
        await self._writer.wait_idle()
        if self._listen_task is not None:
            self._listen_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listen_task
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(listener.close(), 5.0)
        await self.client.close()

    def _committed(self, queues: Collection[str]) -> None:
        """Rows of ``queues`` committed: this adapter's readers need not wait for a
        notification."""
        receivers = self.receivers
        for queue in queues:
            for receiver in receivers.get(queue, ()):
                receiver.notified()

    async def acknowledge(self, queue: QueueId, seqs: list[int]) -> None:
        fence = self._fence
        sql = _ACK[self.retention > 0, fence is not None]
        args: tuple[Any, ...] = ((str(queue), seqs) if fence is None
                                 else (str(queue), seqs, fence.cluster_id, fence.owner))
        held = await self.client.run("acknowledge", lambda c: c.fetchval(sql, *args))
        if not held:
            raise LeaseLostError(f"{queue}: not acknowledged, the queue's lease is no longer "
                                 f"{fence.owner}'s (another silo owns the queue now and "
                                 "delivers these events)")
        if self.retention > 0:
            await self._purge()

    async def _purge(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._purged >= min(self.retention, 60.0):
            self._purged = now
            await self.client.run("purge acknowledged rows",
                                  lambda c: c.execute(_PURGE, self.retention))

    async def pending_count(self, queue: QueueId) -> int:
        """Rows of ``queue`` not yet acknowledged (read or not)."""
        return int(await self.client.run("count", lambda c: c.fetchval(_COUNT, str(queue))))

    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        self._check_open("enqueue()")
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        payload = self._codec.packb(list(events))  # one row, even of one event
        await self._writer.add([str(queue), stream_id.namespace,
                                self._codec.packb(stream_id.key), payload])

    def sender(self, queue: QueueId, stream_id: StreamId
               ) -> Callable[[Sequence[Any]], Awaitable[None]]:
        return self.submitter(queue, stream_id)

    def submitter(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], asyncio.Future[None]]:
        return partial(self._submit, (str(queue), stream_id.namespace,
                                      self._codec.packb(stream_id.key)), stream_id)

    def _submit(self, stream: tuple[str, str, bytes], stream_id: StreamId,
                events: Sequence[Any]) -> asyncio.Future[None]:
        if self._state != "open":
            self._check_open("enqueue()")
        if len(events) == 1:
            return self._writer.add_event(stream, self._codec.packb(events[0]))
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        payload = self._codec.packb(list(events))
        return self._writer.add([*stream, payload])

    def fence_with(self, fence: Any) -> bool:
        """With leases in the same database and schema (``PostgresQueueLeaseStore``), an
        acknowledgement changes rows only while the queue's lease names this silo, checked
        in the statement that changes them."""
        if (getattr(fence, "dsn", None), getattr(fence, "schema", None)) != (
                self.client.dsn, self.client.schema):
            return False
        self._fence = fence
        return True

    def create_receiver(self, queue: QueueId) -> PostgresQueueReceiver:
        self._check_open("create_receiver()")
        return PostgresQueueReceiver(queue, self)


@final
class PostgresAdapterFactory(QueueAdapterFactory):
    """Makes PostgreSQL adapters on the database of ``url`` (``postgresql://…?schema=S``)."""

    def __init__(self, url: str, *, retention: float = 0.0) -> None:
        self.url = url
        self.retention = retention

    def __repr__(self) -> str:
        return f"PostgresAdapterFactory({PostgresClient(self.url, 'queues', ())!r})"

    def create_adapter(self, provider_name: str) -> PostgresQueueAdapter:
        return PostgresQueueAdapter(provider_name, self.url, retention=self.retention)
