"""RedisQueueAdapter: durable stream queues in Redis Streams, one Redis stream per queue (2).

Data path: ``enqueue`` appends one entry (one container) to the queue's Redis stream
``P:queue:{queue}`` with ID ``0-N``, ``N`` from the queue's counter ``P:queue-seq:{queue}``
(one Lua script: the counter and the append are atomic, so IDs, and the tokens made from
them, strictly increase per queue). The receiver reads past its position with ``XRANGE``;
an acknowledgement deletes the entries (``XDEL``), so what the stream holds is exactly what
is not yet acknowledged (with a retention, acknowledged entries move to a kept set that
``read_range`` replays: ``orleanspy.streams.adapters.redis_kept``): a new receiver (a
restart, a hand-off to another silo) starts at the oldest entry, and ``read_from`` re-reads
kept entries (the adapter is rewindable).
Nothing is trimmed otherwise: no cap loses an unacknowledged event.

Why not consumer groups: a group tracks what a consumer *read* (its pending list) and needs
``XAUTOCLAIM`` to move unacknowledged entries after a crash; the pulling agent already owns
each queue exclusively (leases), tracks its own position, and acknowledges only what every
subscription is past, so deleting on acknowledgement is simpler and keeps the same promise.

Fencing: with the cluster's leases on the same Redis server (``RedisQueueLeaseStore``), the
delete is a Lua script that first checks that the queue's lease still names this silo (its
address with its generation): an owner paused past its lease cannot delete what the next
owner still has to deliver (``LeaseLostError``; the agent logs ``stream_queue_ack_fenced``).

Producer writes are coalesced: every enqueue waiting when the flusher runs goes to Redis in
one pipelined round trip (one script call per queue), single events a stream publishes
meanwhile share one entry (one container; each event keeps its own token), and each caller
returns once Redis has acknowledged its entry (with the server's persistence settings:
``appendonly yes`` and ``appendfsync everysec`` or ``always`` for durability across a Redis
crash).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final, final

from orleanspy._util.clock import Clock, SystemClock
from orleanspy._util.futures import settle
from orleanspy._util.redis import RedisClient
from orleanspy.errors import ConfigurationError, LeaseLostError
from orleanspy.messaging.codec import Codec, pack_array
from orleanspy.streams.adapters import redis_holds
from orleanspy.streams.adapters.base import (
    COALESCE_MAX,
    BatchContainer,
    EnqueueItem,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
)
from orleanspy.streams.adapters.redis_kept import (
    ACK,
    TIME_FORMAT,
    KeptEntry,
    read_range,
    read_union,
)
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken, container_token

__all__ = ["RedisAdapterFactory", "RedisQueueAdapter", "RedisQueueReceiver"]

# KEYS: stream, counter; ARGV: the write time by the adapter's clock ("seconds.micros",
# field 't'), then triples (namespace, packed key, packed events).
_APPEND: Final = """
local t = ARGV[1]
for i = 2, #ARGV, 3 do
  local n = redis.call('INCR', KEYS[2])
  redis.call('XADD', KEYS[1], '0-' .. n, 's', ARGV[i], 'k', ARGV[i + 1], 'e', ARGV[i + 2],
             't', t)
end
return 1
"""
_PAGE: Final = 256


def _write_time(field: bytes | None) -> float:
    """An entry's 't' field as seconds (0.0 when absent or not a time)."""
    if not field:
        return 0.0
    try:
        at = float(field)
    except ValueError:
        return 0.0
    return at if 0.0 < at < 1e11 else 0.0


def _sequence(entry_id: bytes) -> int:
    return int(entry_id.split(b"-", 1)[1])


class _Writer:
    """Appends waiting to go to Redis: one pipelined round trip per flush."""

    def __init__(self, adapter: RedisQueueAdapter) -> None:
        self.adapter = adapter
        self.pending: dict[str, list[Any]] = {}
        #: (queue, stream) -> where its entry of single events is in ``pending[queue]`` (a
        #: list of encoded events until the round is taken)
        self.open: dict[tuple[str, StreamId], int] = {}
        self.waiters: list[asyncio.Future[None]] = []
        self.flusher: asyncio.Task[None] | None = None

    def add(self, queue: str, namespace: str, key: bytes, payload: bytes,
            stream_id: StreamId | None = None) -> asyncio.Future[None]:
        """A batch: an entry of its own. Single events of ``stream_id`` added later go to an
        entry after it (order)."""
        args = self.pending.setdefault(queue, [])
        if stream_id is not None and self.open:
            at = self.open.pop((queue, stream_id), None)
            if at is not None:  # close the stream's entry of single events: encode it now
                args[at] = pack_array(args[at])
        args.extend((namespace, key, payload))
        return self._waiter()

    def add_event(self, queue: str, stream_id: StreamId, namespace: str, key: bytes,
                  event: bytes) -> asyncio.Future[None]:
        """One encoded event; the single events of a stream added before the next round
        share one entry (one container)."""
        args = self.pending.setdefault(queue, [])
        at = self.open.get((queue, stream_id))
        if at is not None and len(args[at]) < COALESCE_MAX:
            args[at].append(event)
        else:
            self.open[(queue, stream_id)] = len(args) + 2
            args.extend((namespace, key, [event]))
        return self._waiter()

    def _take(self) -> dict[str, list[Any]]:
        pending = self.pending
        for (queue, _), at in self.open.items():
            pending[queue][at] = pack_array(pending[queue][at])
        self.open = {}
        self.pending = {}
        return pending

    def _waiter(self) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        if self.flusher is None:
            self.flusher = asyncio.get_running_loop().create_task(self._flush())
        return waiter

    async def wait_idle(self) -> None:
        if self.flusher is not None:
            await asyncio.shield(self.flusher)

    async def _flush(self) -> None:
        try:
            while self.waiters:
                pending, waiters = self._take(), self.waiters
                self.waiters = []
                try:
                    await self.adapter._append(pending)
                except Exception as exc:  # fail this round's callers, go on with the next
                    settle(waiters, exc)
                    continue
                settle(waiters)
        finally:
            self.flusher = None


@final
class RedisQueueAdapter(QueueAdapter):
    """The queues of one provider on the Redis server of ``url``."""

    def __init__(self, name: str, url: str) -> None:
        self._name = name
        self.client = RedisClient(url)
        self._codec = Codec()
        self._state = "new"
        self._writer = _Writer(self)
        self._script: Any = None
        self._fence: Any = None  # LeaseFence: acknowledge only while holding the lease
        self._ack: Any = None
        self._clock: Clock = SystemClock()
        #: (seconds, count) acknowledged entries are retained for; None: deleted at once
        self.keep: tuple[float, int] | None = None

    def use_clock(self, clock: Clock) -> None:
        """Entries are stamped (written, acknowledged) with ``clock``'s time."""
        self._clock = clock

    def retain(self, seconds: float, count: int) -> None:
        """Acknowledged entries move to the queue's kept set (``redis_kept``)."""
        self.keep = (float(seconds), int(count)) if seconds or count else None

    async def read_range(
        self, queue: QueueId, start: SequenceToken | float, max_count: int,
        stream_id: StreamId | None = None,
    ) -> list[BatchContainer]:
        self._check_open("read_range()")
        receiver = RedisQueueReceiver(queue, self)
        stream = None if stream_id is None else (
            stream_id.namespace.encode(), self._codec.packb(stream_id.key))
        entries = await read_range(self.client, str(queue), start, max_count, stream)
        return [receiver._entry(e) for e in entries]

    async def newest_sequence(self, queue: QueueId) -> int:
        self._check_open("newest_sequence()")
        return await redis_holds.newest_sequence(self.client, str(queue))

    async def hold(self, reader: str, holds: dict[QueueId, int],
                   seconds: float) -> dict[QueueId, float]:
        self._check_open("hold()")
        now = self._clock.time()
        lapsed = await redis_holds.hold(self.client, reader,
                                        {str(q): seq for q, seq in holds.items()}, now,
                                        now + seconds)
        return {q: lapsed[str(q)] for q in holds if str(q) in lapsed}

    async def release(self, reader: str, queues: Sequence[QueueId]) -> None:
        self._check_open("release()")
        await redis_holds.release(self.client, [str(q) for q in queues], reader)

    async def enqueue_once(self, marker: str, batches: Sequence[EnqueueItem],
                           remember: float) -> bool:
        self._check_open("enqueue_once()")
        pack = self._codec.packb
        entries = []
        for queue, stream_id, events in batches:
            if not events:
                raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
            entries.append((str(queue), stream_id.namespace, pack(stream_id.key),
                            pack(list(events))))
        return await redis_holds.enqueue_once(self.client, marker, entries,
                                              self._clock.time(), remember)

    def __repr__(self) -> str:
        return f"RedisQueueAdapter({self._name!r}, {self.client!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_rewindable(self) -> bool:
        return True

    def stream_key(self, queue: QueueId | str) -> str:
        return self.client.key("queue", str(queue))

    async def open(self) -> None:
        if self._state == "new":
            await self.client.open()
            self._state = "open"

    async def close(self) -> None:
        if self._state == "closed":
            return
        self._state = "closed"
        await self._writer.wait_idle()
        await self.client.close()

    async def pending_count(self, queue: QueueId) -> int:
        """Entries of ``queue`` not yet acknowledged (read or not)."""
        return int(await self.client.run(self.client.redis.xlen(self.stream_key(queue))))

    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        self._check_open("enqueue()")
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        pack = self._codec.packb
        payload = pack(list(events))
        await self._writer.add(str(queue), stream_id.namespace, pack(stream_id.key), payload,
                               stream_id)

    async def _append(self, pending: dict[str, list[Any]]) -> None:
        if self._script is None:
            self._script = self.client.redis.register_script(_APPEND)
        script = self._script
        pipe = self.client.redis.pipeline(transaction=False)  # execute() resets it
        now = format(self._clock.time(), TIME_FORMAT)
        for queue, args in pending.items():
            await script(keys=[self.stream_key(queue), self.client.key("queue-seq", queue)],
                         args=[now, *args], client=pipe)
        await self.client.execute(pipe)

    def sender(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], Awaitable[None]]:
        """What a stream publishes with: single events published before the next round
        trip share one entry (one container, each event with its own token), and each caller
        returns once Redis has its event. A batch is an entry of its own."""
        return self.submitter(queue, stream_id)

    def submitter(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], asyncio.Future[None]]:
        """As ``sender``, taking the events at once: the future resolves once Redis has
        them (``AsyncStream.send``)."""
        return partial(self._submit, str(queue), stream_id, stream_id.namespace,
                       self._codec.packb(stream_id.key))

    def _submit(self, queue: str, stream_id: StreamId, namespace: str, key: bytes,
                events: Sequence[Any]) -> asyncio.Future[None]:
        if self._state != "open":
            self._check_open("enqueue()")
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        pack = self._codec.packb
        if len(events) == 1:
            return self._writer.add_event(queue, stream_id, namespace, key, pack(events[0]))
        return self._writer.add(queue, namespace, key, pack(list(events)), stream_id)

    def fence_with(self, fence: Any) -> bool:
        """With leases on this Redis server (``RedisQueueLeaseStore``), an acknowledgement
        deletes entries only while the queue's lease names this silo, checked in the same
        Lua script as the delete: a silo paused past its lease cannot delete what the queue's
        next owner still has to deliver."""
        if getattr(fence, "server_url", None) != self.client.server_url:
            return False
        self._fence = fence
        return True

    async def _delete(self, queue: QueueId, seqs: list[int]) -> None:
        """Delete (or, with a retention, keep) acknowledged entries, move the queue's mark
        and trim: one script (``redis_kept.ACK``), fenced by the lease if set."""
        client = self.client
        fence = self._fence
        if self._ack is None:
            self._ack = client.redis.register_script(ACK)
        trimmed = client.key("trimmed")
        seconds, count = self.keep or (0.0, 0)
        done = await client.run(self._ack(
            keys=[self.stream_key(queue), client.key("kept", str(queue)), trimmed,
                  trimmed if fence is None else fence.key, client.key("hold", str(queue))],
            args=[str(queue), "" if fence is None else fence.owner,
                  format(self._clock.time(), TIME_FORMAT), seconds, count,
                  "0" if self.keep is None else "1", f"0-{max(seqs)}",
                  *[f"0-{s}" for s in seqs]]))
        if done == -1:
            raise LeaseLostError(
                f"{queue}: not acknowledged, the queue's lease is no longer {fence.owner}'s "
                "(another silo owns the queue now and delivers these events)")

    def create_receiver(self, queue: QueueId) -> RedisQueueReceiver:
        self._check_open("create_receiver()")
        return RedisQueueReceiver(queue, self)


@final
class RedisQueueReceiver(QueueAdapterReceiver):
    """Reads one queue's Redis stream past its own position."""

    def __init__(self, queue: QueueId, adapter: RedisQueueAdapter) -> None:
        self._queue = queue
        self._adapter = adapter
        self._key = adapter.stream_key(queue)
        self._codec = Codec()
        self._last = 0  # sequence of the last entry read
        self._state = "new"
        self._sids: dict[tuple[bytes, bytes], StreamId] = {}
        self._reading: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"RedisQueueReceiver({self._queue})"

    def _check_ready(self, action: str) -> None:
        if self._state != "ready":
            when = "before initialize()" if self._state == "new" else "after shutdown()"
            raise RuntimeError(f"cannot {action} on {self!r} {when}")

    async def initialize(self) -> None:
        if self._state == "new":
            self._state = "ready"

    def _entry(self, entry: KeptEntry) -> BatchContainer:
        seq, ns, key, payload, at = entry
        sid = self._sids.get((ns, key))
        if sid is None:
            sid = self._sids[(ns, key)] = StreamId(ns.decode(), self._codec.unpackb(key))
        return BatchContainer.encoded(sid, container_token(seq), payload,
                                      self._codec.unpackb, None, at)

    def _container(self, entry_id: bytes, fields: dict[bytes, bytes]) -> BatchContainer:
        ns, key, payload = fields[b"s"], fields[b"k"], fields[b"e"]
        sid = self._sids.get((ns, key))
        if sid is None:
            if len(self._sids) > 4096:
                self._sids.clear()
            sid = self._sids[(ns, key)] = StreamId(ns.decode(), self._codec.unpackb(key))
        at = fields.get(b"t")
        return BatchContainer.encoded(sid, container_token(_sequence(entry_id)), payload,
                                      self._codec.unpackb, None, _write_time(at))

    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("get_messages()")
        if max_count == 0:
            return []
        loop = asyncio.get_running_loop()
        self._reading = loop.create_future()
        try:
            client = self._adapter.client
            entries = await client.run(client.redis.xrange(
                self._key, min=f"(0-{self._last}", max="+", count=max_count))
        finally:
            self._reading.set_result(None)
            self._reading = None
        if not entries:
            return []
        self._last = _sequence(entries[-1][0])
        return [self._container(entry_id, fields) for entry_id, fields in entries]

    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        self._check_ready("messages_delivered()")
        if batch:
            await self._adapter._delete(self._queue, [c.token.sequence for c in batch])

    async def read_from(
        self, token: SequenceToken, max_count: int, stream_id: StreamId | None = None
    ) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("read_from()")
        if self._adapter.keep is not None:  # retained entries count as kept
            stream = None if stream_id is None else (
                stream_id.namespace.encode(), self._codec.packb(stream_id.key))
            entries = await read_union(self._adapter.client, str(self._queue),
                                       token.sequence, max_count, stream)
            return [self._entry(e) for e in entries]
        out: list[BatchContainer] = []
        start = f"0-{max(token.sequence, 0)}"
        client = self._adapter.client
        while len(out) < max_count:
            page = await client.run(client.redis.xrange(self._key, min=start, max="+",
                                                        count=_PAGE))
            for entry_id, fields in page:
                container = self._container(entry_id, fields)
                if stream_id is None or container.stream_id == stream_id:
                    out.append(container)
                    if len(out) == max_count:
                        break
            if len(page) < _PAGE:
                break
            start = f"(0-{_sequence(page[-1][0])}"
        return out

    async def read_range(
        self, start: SequenceToken | float, max_count: int, stream_id: StreamId | None = None
    ) -> list[BatchContainer]:
        self._check_ready("read_range()")
        return await self._adapter.read_range(self._queue, start, max_count, stream_id)

    async def shutdown(self) -> None:
        if self._reading is not None:
            await asyncio.shield(self._reading)
        self._state = "stopped"


@final
class RedisAdapterFactory(QueueAdapterFactory):
    """Makes Redis Streams adapters on the server of ``url``
    (``redis://HOST:PORT/DB?prefix=P``)."""

    def __init__(self, url: str) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ConfigurationError(
                f"RedisAdapterFactory.url must be redis://HOST:PORT/DB?prefix=P, got {url!r}")
        self.url = url

    def __repr__(self) -> str:
        return f"RedisAdapterFactory({self.url!r})"

    def create_adapter(self, provider_name: str) -> RedisQueueAdapter:
        return RedisQueueAdapter(provider_name, self.url)
