"""Group commit and notifications for ``PostgresQueueAdapter`` (see
``orleanspy.streams.adapters.postgres``).

* Batched inserts (group commit): ``enqueue`` adds its row to the writer and awaits a future;
  one flusher task inserts everything pending in one statement (``unnest`` of arrays, or one
  row's values) in one transaction and resolves the futures; it then lets the callers it
  resumed run (one loop pass) and goes on while they added rows. Single events of one stream
  published before the next commit share one row (one container).
* Order. Writers of every process insert a queue's rows under a transaction lock of that
  queue (``pg_advisory_xact_lock``), so a queue's rows commit in ``seq`` order and a reader
  that saw ``seq`` n never sees an older row appear later. A statement takes its queues'
  locks in one order (their names' bytes), so writers of several queues never wait for each
  other in a cycle.
* Notifications. The receivers of this process are told of a commit at once (``on_commit``).
  Other processes' receivers are told by ``NOTIFY`` on channel ``orleanspy_queues``
  (``schema/queue``, delivered at commit), at most once per ``NOTIFY_GAP`` (10 ms) per queue
  from one process: the first commit after a quiet gap notifies in its own statement; the
  queues that later commits wrote within the gap are *owed* a notification, sent once the gap
  has passed, in the next insert or, with none under way, in a statement of its own. Every
  committed row is thus followed by a notification sent after its commit, at most
  ``NOTIFY_GAP`` (and a round trip) later; a reader takes the rows of several commits in one
  read anyway (``READ_GAP``), and a notification costs the server a wake-up of every
  listening connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any, Final

from orleanspy._util.futures import settle
from orleanspy._util.postgres import PostgresClient
from orleanspy.messaging.codec import pack_array
from orleanspy.streams.adapters.base import COALESCE_MAX

__all__ = ["CHANNEL", "NOTIFY_GAP", "Writer"]

CHANNEL: Final = "orleanspy_queues"
#: Seconds between two notifications of a queue from one process (module docstring).
NOTIFY_GAP = 0.01
# One statement (one round trip, its own transaction). Its condition is evaluated once,
# before any row draws its seq (an InitPlan): it takes the queues' locks, in one order in
# every process, and (when some are due) queues the notifications, which the server sends at
# commit (or drops with the transaction). The parameters are the rows' four columns (the
# server takes a row's size from its events), as arrays or, for one row, as values: asyncpg's
# cost of a call grows with each array it encodes.
_ROWS: Final = """
INSERT INTO stream_queue (queue, namespace, key, events, size)
SELECT q, n, k, e, octet_length(e)
FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[]) WITH ORDINALITY AS r(q, n, k, e, o)
WHERE (SELECT count(pg_advisory_xact_lock(hashtext('orleanspy-queue:' || q)))
       FROM (SELECT DISTINCT q COLLATE "C" AS q FROM unnest($1::text[]) q ORDER BY 1) d) >= 0
"""
_ROW: Final = """
INSERT INTO stream_queue (queue, namespace, key, events, size)
SELECT $1::text, $2::text, $3::bytea, $4::bytea, octet_length($4::bytea)
WHERE (SELECT count(pg_advisory_xact_lock(hashtext('orleanspy-queue:' || $1::text)))) >= 0
"""
_NEVER: Final = float("-inf")


def _statements(schema: str) -> tuple[dict[tuple[bool, bool], str], str]:
    """The inserts by (one row, notifying the queues of ``$5``), and a notification alone
    (of the queues of ``$1``), for the tables of ``schema`` (a checked SQL name)."""
    notify = f"SELECT count(pg_notify('{CHANNEL}', '{schema}/' || q)) FROM unnest($%d::text[]) q"
    inserts = {}
    for one, sql in ((False, _ROWS), (True, _ROW)):
        order = "" if one else "ORDER BY o"
        inserts[one, False] = f"{sql}{order}"
        inserts[one, True] = f"{sql}  AND ({notify % 5}) >= 0\n{order}"
    return inserts, notify % 1


class Writer:
    """Rows pending insertion, committed together by one flusher task; the notifications
    other processes are owed. ``on_commit(queues)`` is called after each commit."""

    def __init__(self, client: PostgresClient,
                 on_commit: Callable[[Collection[str]], None]) -> None:
        self._client = client
        self._on_commit = on_commit
        self._inserts, self._notify_sql = _statements(client.schema)
        self._rows: list[list[Any]] = []  # [queue, namespace, key, events]
        # A stream's row of single events, by (queue, namespace, packed key): no StreamId hashed
        self._open: dict[tuple[str, str, bytes], list[Any]] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._flusher: asyncio.Task[None] | None = None
        # queue -> when a statement that notifies it was sent; queue -> the commit (a count)
        # after which it is owed a notification
        self._notified_at: dict[str, float] = {}
        self._owed: dict[str, int] = {}
        self._commits = 0
        self._timer: asyncio.TimerHandle | None = None
        self._notifier: asyncio.Task[None] | None = None

    def add(self, row: list[Any]) -> asyncio.Future[None]:
        self._open.pop((row[0], row[1], row[2]), None)  # later single events go after it
        self._rows.append(row)
        return self._committed()

    def add_event(self, stream: tuple[str, str, bytes], event: bytes) -> asyncio.Future[None]:
        row = self._open.get(stream)
        if row is not None and len(row[3]) < COALESCE_MAX:
            row[3].append(event)
        else:
            row = self._open[stream] = [*stream, [event]]
            self._rows.append(row)
        return self._committed()

    def _committed(self) -> asyncio.Future[None]:
        flusher = self._flusher
        if flusher is not None:  # its loop: no asyncio.get_running_loop() (a getpid) per event
            waiter = flusher.get_loop().create_future()
        else:
            waiter = asyncio.get_running_loop().create_future()
            self._flusher = asyncio.create_task(self._flush(), name="postgres queue flush")
        self._waiters.append(waiter)
        return waiter

    async def wait_idle(self) -> None:
        """Wait for the pending inserts, then send the notifications still owed at once."""
        if self._flusher is not None:
            await asyncio.shield(self._flusher)
        if self._notifier is not None:
            await asyncio.shield(self._notifier)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._owed:
            await self._notify(everything=True)

    async def _flush(self) -> None:
        waiters: list[asyncio.Future[None]] = []
        try:
            while self._waiters:
                rows, waiters = self._rows, self._waiters
                self._rows, self._waiters, self._open = [], [], {}
                for row in rows:
                    if isinstance(row[3], list):
                        row[3] = pack_array(row[3])
                try:
                    await self._insert(rows)
                except Exception as exc:  # loop boundary: fail this round's callers, go on
                    settle(waiters, exc)
                    continue
                settle(waiters)
                if not self._waiters:
                    # One loop pass: the callers just resumed add their next rows (under a
                    # steady load the flusher goes on rather than a new one starting).
                    waiters = []
                    await asyncio.sleep(0)
            waiters = []
        except BaseException:
            for waiter in (*waiters, *self._waiters):
                waiter.cancel()
            self._rows, self._waiters, self._open = [], [], {}
            raise
        finally:
            self._flusher = None
            self._notify_later()

    async def _insert(self, rows: list[list[Any]]) -> None:
        """Insert ``rows`` (queue, namespace, key, events) in one transaction, under their
        queues' locks, notifying at commit the queues whose gap has passed."""
        if len(rows) == 1:
            args: list[Any] = rows[0]
            queues: Collection[str] = (args[0],)
        else:
            args = [list(column) for column in zip(*rows, strict=True)]
            queues = set(args[0])
        sent = self._due(queues)
        if sent:
            args = [*args, list(sent)]
        sql = self._inserts[len(rows) == 1, bool(sent)]
        await self._client.run("enqueue", lambda c: c.execute(sql, *args), idempotent=False)
        self._commits += 1
        self._settle(sent)
        for queue in queues:
            if queue not in sent:  # committed, not notified: owed a notification
                self._owed[queue] = self._commits
        self._on_commit(queues)

    def _due(self, queues: Collection[str], everything: bool = False) -> dict[str, int | None]:
        """Of ``queues`` and the queues owed a notification, those whose gap has passed (all
        owed ones if ``everything``), marked as notified now: queue -> the commit it was owed
        a notification for (None: not owed)."""
        now = asyncio.get_running_loop().time()
        notified_at, owed = self._notified_at, self._owed
        due = {q: owed.get(q) for q in queues if now - notified_at.get(q, _NEVER) >= NOTIFY_GAP}
        if owed:
            due.update((q, c) for q, c in owed.items() if q not in due and (
                everything or now - notified_at[q] >= NOTIFY_GAP))
        for queue in due:
            notified_at[queue] = now
        return due

    def _settle(self, sent: dict[str, int | None]) -> None:
        """A statement notifying the queues of ``sent`` committed: they are owed nothing for
        the commits up to the one each was owed for when it was sent."""
        owed = self._owed
        for queue, commit in sent.items():
            if commit is not None and owed.get(queue) == commit:
                del owed[queue]

    def _notify_later(self) -> None:
        """Send the notifications owed once their gap has passed (no insert under way)."""
        if not self._owed or self._timer is not None or self._notifier is not None:
            return
        at = min(self._notified_at[q] for q in self._owed) + NOTIFY_GAP
        self._timer = asyncio.get_running_loop().call_at(at, self._notify_owed)

    def _notify_owed(self) -> None:
        self._timer = None
        if self._flusher is None and self._notifier is None and self._owed:
            self._notifier = asyncio.get_running_loop().create_task(
                self._notify(), name="postgres queue notify")

    async def _notify(self, *, everything: bool = False) -> None:
        """One statement notifying the queues owed (those whose gap passed); a failure leaves
        them owed (the next insert notifies them; receivers also query every
        ``CHECK_EVERY``)."""
        try:
            sent = self._due((), everything)
            if sent:
                await self._client.run("notify", lambda c: c.execute(
                    self._notify_sql, list(sent)))
                self._settle(sent)
        except Exception:  # loop boundary: left owed (see above)
            return
        finally:
            if self._notifier is asyncio.current_task():
                self._notifier = None
        if self._flusher is None and not everything:
            self._notify_later()
