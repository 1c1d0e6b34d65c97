"""NatsQueueAdapter: durable stream queues in NATS JetStream (2).

Layout: one JetStream stream ``P_PROVIDER`` per provider (file storage, no limits: nothing
unacknowledged is ever dropped) with one subject ``P.PROVIDER.q.QUEUE`` per queue, and one
key-value bucket ``P_PROVIDER_acks`` holding each queue's acknowledgement state (``P`` the
URL's ``?prefix=``, default ``orleanspy``). A container is one message; its token is the
message's stream sequence (strictly increasing per queue, also across restarts), its
``enqueued_at`` the server's time of the write.

Explicit sequence tracking, not durable consumers. A durable consumer tracks what was
*delivered* and redelivers on a timer; an acknowledgement to it is a fire-and-forget publish
that the server accepts from anyone, so a stale owner could not be refused, and its
``max_ack_pending`` would stall a queue whose slow subscription holds old containers. The
pulling agent already owns each queue exclusively, keeps its own read position, and
acknowledges only what every subscription is past (not always in order). So the receiver
reads through an ephemeral, acknowledgement-free consumer from its own position, and the
queue's acknowledged set lives in the bucket under the queue's key: ``floor`` (every message
of the queue up to it is acknowledged) and ranges above it. A receiver starts at ``floor + 1``
and skips the messages in the ranges; ``read_from`` reads kept messages with a consumer of
its own, skipping the acknowledged ones, so the adapter is rewindable, and ``token_at``
turns a time into the token to start from (JetStream's start by time). Messages at or below
the floor are purged from the stream as the floor moves (every few hundred
acknowledgements). A read never skips a message: one lost in transit (the consumer's
sequence jumps) or an unanswered read replaces the consumer after the last message taken.

Fencing. ``initialize`` claims the queue: it rewrites the queue's entry with an epoch one
higher and the receiver's own id, a compare-and-set on the entry's revision. Every
acknowledgement is a compare-and-set on the revision the receiver last wrote, so once the
next owner of the queue has claimed it (the pulling agent creates a receiver only once it
holds the queue's lease), the previous owner's acknowledgements fail with
``LeaseLostError`` and change nothing: a silo paused past its lease cannot acknowledge what
the next owner still has to deliver. That check is the write itself, atomic in JetStream,
so no lease store has to live on the NATS server.

Producing: ``enqueue`` and the stream senders coalesce like the Redis adapter (single events
of one stream published before the next round share one container; a batch is a container
of its own); each round is published in order and the callers return once JetStream has
acknowledged their message (written to its files; flushed by its sync interval). A message
is sent again with the same ``Nats-Msg-Id`` while unacknowledged (a restarting server),
and JetStream drops the copy it already holds (duplicate window two minutes).

At-least-once window: containers read but not acknowledged when a receiver stops (a crash,
a queue move, an acknowledgement not written while the server was away) are delivered again
by the queue's next receiver; nothing acknowledged is delivered again, nothing stored is
lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final, final

import msgpack
from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from orleanspy._util.clock import Clock, SystemClock
from orleanspy.errors import ConfigurationError, LeaseLostError
from orleanspy.messaging.codec import Codec
from orleanspy.streams.adapters.base import (
    BatchContainer,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
)
from orleanspy.streams.adapters.nats_link import (
    Decoder,
    NatsLink,
    Pull,
    Ranges,
    Writer,
    head_of,
    meta,
    name_token,
    split_nats_url,
)
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken, container_token

__all__ = ["NatsAdapterFactory", "NatsQueueAdapter", "NatsQueueReceiver"]

_PAGE: Final = 256
#: acknowledged containers between two purges of a queue's acknowledged prefix
_PURGE_EVERY: Final = 256


@final
class NatsQueueAdapter(QueueAdapter):
    """The queues of one provider on the NATS server of ``url`` (JetStream enabled)."""

    def __init__(self, name: str, url: str, enqueue_timeout: float = 30.0) -> None:
        self._name = name
        self.url = url
        server, prefix = split_nats_url(url)
        provider = name_token(name)
        self.stream_name = f"{prefix}_{provider}"
        self.bucket = f"{prefix}_{provider}_acks"
        self._subjects = f"{prefix}.{provider}.q"
        self.enqueue_timeout = enqueue_timeout
        self.link = NatsLink(server, SystemClock())
        self._codec = Codec()
        self._state = "new"
        self._writer = Writer(self.link, enqueue_timeout)
        self._kv: KeyValue | None = None

    def __repr__(self) -> str:
        return f"NatsQueueAdapter({self._name!r}, {self.url!r})"

    @property
    def name(self) -> str:
        return self._name

    @property
    def is_rewindable(self) -> bool:
        return True

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None
        return self._kv

    def subject(self, queue: QueueId | str) -> str:
        return f"{self._subjects}.{name_token(str(queue))}"

    def use_clock(self, clock: Clock) -> None:
        self.link.clock = clock

    async def open(self) -> None:
        if self._state != "new":
            return
        await self.link.open()
        try:
            self._kv = await self.link.ensure_stream_and_bucket(
                self.stream_name, self._subjects + ".>", self.bucket)
        except BaseException:
            await self.link.close()  # a failed open holds no connection; open() may be called again
            raise
        self._state = "open"

    async def close(self) -> None:
        if self._state == "closed":
            return
        opened, self._state = self._state == "open", "closed"
        if opened:
            await self._writer.wait_idle()
            await self.link.close()

    async def delete_all(self) -> None:
        """Delete this provider's stream and bucket (tests and benchmarks clean up with it)."""
        js = self.link.js
        for deleting in (js.delete_stream(self.stream_name), js.delete_key_value(self.bucket)):
            with contextlib.suppress(NotFoundError):
                await deleting

    async def pending_count(self, queue: QueueId) -> int:
        """Containers of ``queue`` not yet acknowledged (read or not)."""
        self._check_open("pending_count()")
        floor, ranges = 0, []
        try:
            entry = await self.kv.get(name_token(str(queue)))
            _, _, floor, ranges = msgpack.unpackb(entry.value or b"")
        except KeyNotFoundError:
            pass
        acked = Ranges(ranges)
        pull = await Pull(self.link, self.stream_name, self.subject(queue)).open(floor + 1)
        if not ranges:
            await pull.close()
            return pull.pending
        count = 0
        try:
            while True:
                msgs = await pull.fetch(_PAGE)
                count += sum(1 for m in msgs if not acked.covers(meta(m.reply)[0]))
                if len(msgs) < _PAGE:
                    return count
        finally:
            await pull.close()

    async def token_at(self, queue: QueueId, when: float) -> SequenceToken | None:
        """The token of ``queue``'s first container written at or after ``when`` (seconds
        since the epoch, by the NATS server's clock), or None if none was written since: a
        subscription given it (``subscribe(handler, token)``) starts at that time, reading
        what the agent's cache no longer holds from the stream (acknowledged containers
        are gone: it starts at the oldest kept one at the earliest)."""
        self._check_open("token_at()")
        pull = await Pull(self.link, self.stream_name, self.subject(queue)).open(0, at=when)
        try:
            msgs = await pull.fetch(1)
        finally:
            await pull.close()
        return container_token(meta(msgs[0].reply or "")[0]) if msgs else None

    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        self._check_open("enqueue()")
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        payload = self._codec.packb(list(events))
        await self._writer.add(self.subject(queue), head_of(self._codec, stream_id), payload,
                               stream_id)

    def sender(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], Awaitable[None]]:
        """What a stream publishes with: single events published before the next round
        share one container (each event with its own token); each caller returns once
        JetStream has stored its event. A batch is a container of its own."""
        return self.submitter(queue, stream_id)

    def submitter(
        self, queue: QueueId, stream_id: StreamId
    ) -> Callable[[Sequence[Any]], asyncio.Future[None]]:
        """As ``sender``, taking the events at once (``AsyncStream.send``)."""
        return partial(self._submit, self.subject(queue), stream_id,
                       head_of(self._codec, stream_id))

    def _submit(self, subject: str, stream_id: StreamId, head: bytes,
                events: Sequence[Any]) -> asyncio.Future[None]:
        if self._state != "open":
            self._check_open("enqueue()")
        if not events:
            raise ValueError(f"cannot enqueue an empty batch on stream {stream_id}")
        pack = self._codec.packb
        if len(events) == 1:
            return self._writer.add_event(subject, stream_id, head, pack(events[0]))
        return self._writer.add(subject, head, pack(list(events)), stream_id)

    def create_receiver(self, queue: QueueId) -> NatsQueueReceiver:
        self._check_open("create_receiver()")
        return NatsQueueReceiver(queue, self)


@final
class NatsQueueReceiver(QueueAdapterReceiver):
    """Reads one queue's subject past its own position; acknowledges by compare-and-set."""

    def __init__(self, queue: QueueId, adapter: NatsQueueAdapter) -> None:
        self._queue = queue
        self._adapter = adapter
        self._key = name_token(str(queue))
        self._container = Decoder()
        self._state = "new"
        self._pull: Pull | None = None
        self._dropped: list[Pull] = []  # pulls given up on, to be closed
        self._me = uuid.uuid4().hex
        self._epoch = 0
        self._revision = 0
        self._floor = 0  # every message of the queue up to here is acknowledged
        self._inherited = Ranges(())  # acknowledged ranges of earlier owners
        self._last = 0  # sequence of the last message read (returned or skipped)
        self._read: deque[int] = deque()  # sequences above the floor read, in order
        self._acked: set[int] = set()  # of ``_read``: acknowledged
        self._outstanding: set[int] = set()  # of ``_read``: returned, not acknowledged
        self._purged = 0
        self._since_purge = 0
        self._dirty = False  # acknowledged here, not yet in the bucket (a failed write)
        self._reading: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        return f"NatsQueueReceiver({self._queue})"

    @property
    def epoch(self) -> int:
        """How many receivers claimed this queue before this one, plus one."""
        return self._epoch

    def _check_ready(self, action: str) -> None:
        if self._state != "ready":
            when = "before initialize()" if self._state == "new" else "after shutdown()"
            raise RuntimeError(f"cannot {action} on {self!r} {when}")

    async def initialize(self) -> None:
        if self._state != "new":
            return
        kv = self._adapter.kv
        while True:  # claim: the last claimer's acknowledgements are the ones that count
            try:
                entry = await kv.get(self._key)
                _, epoch, floor, ranges = msgpack.unpackb(entry.value or b"")
                revision = entry.revision or 0
            except KeyNotFoundError:
                epoch, floor, ranges, revision = 0, 0, [], 0
            value = msgpack.packb([self._me, epoch + 1, floor, ranges])
            try:
                if revision:
                    self._revision = await kv.update(self._key, value, last=revision)
                else:
                    self._revision = await kv.create(self._key, value)
            except KeyWrongLastSequenceError:
                continue  # claimed meanwhile by another receiver: claim after it
            break
        self._epoch, self._floor, self._last = epoch + 1, floor, floor
        self._purged = floor
        self._inherited = Ranges(ranges)
        self._state = "ready"

    async def _fetch(self, count: int) -> list[Msg]:
        while self._dropped:
            await self._dropped.pop().close()
        pull = self._pull
        if pull is None:
            pull = self._pull = await self._new_pull(self._last + 1)
        try:
            return await pull.fetch(count)
        except BaseException:
            # Failed or cancelled: its consumer may have moved past messages this call did
            # not take, so the next read starts a new one after the last message taken.
            self._pull = None
            self._dropped.append(pull)
            raise

    def _new_pull(self, start: int) -> Awaitable[Pull]:
        adapter = self._adapter
        return Pull(adapter.link, adapter.stream_name, adapter.subject(self._queue)).open(start)

    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("get_messages()")
        if max_count == 0:
            return []
        self._reading = asyncio.get_running_loop().create_future()
        out: list[BatchContainer] = []
        try:
            while len(out) < max_count:
                want = max_count - len(out)
                msgs = await self._fetch(want)
                for msg in msgs:
                    seq, at = meta(msg.reply)
                    if seq <= self._last:
                        continue  # a replaced consumer's overlap
                    self._last = seq
                    self._read.append(seq)
                    if self._inherited.covers(seq):
                        self._acked.add(seq)  # acknowledged by an earlier owner
                        continue
                    self._outstanding.add(seq)
                    out.append(self._container(msg, seq, at))
                if len(msgs) < want:
                    break
        finally:
            self._reading.set_result(None)
            self._reading = None
        return out

    def _is_acked(self, seq: int) -> bool:
        return seq <= self._floor or seq in self._acked or (
            seq > self._last and self._inherited.covers(seq))

    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        self._check_ready("messages_delivered()")
        outstanding, acked = self._outstanding, self._acked
        fresh = 0
        for container in batch:
            seq = container.token.sequence
            if seq in outstanding:
                outstanding.discard(seq)
                acked.add(seq)
                fresh += 1
        if not fresh and not self._dirty:
            return
        read = self._read
        while read and read[0] in acked:
            self._floor = read.popleft()
            acked.discard(self._floor)
        self._dirty = True  # until written: the next call (or shutdown) writes it again
        await self._commit()
        self._dirty = False
        self._since_purge += fresh
        if self._since_purge >= _PURGE_EVERY and self._floor > self._purged:
            await self._purge()

    def _ranges(self) -> list[int]:
        flat: list[int] = []
        start = prev = 0
        acked = self._acked
        for seq in self._read:
            if seq in acked:
                if not start:
                    start = seq
                prev = seq
            elif start:
                flat += (start, prev)
                start = 0
        if start:
            flat += (start, prev)
        return flat + self._inherited.after(self._last)

    async def _commit(self) -> None:
        kv = self._adapter.kv
        value = msgpack.packb([self._me, self._epoch, self._floor, self._ranges()])
        for _ in range(2):
            try:
                self._revision = await kv.update(self._key, value, last=self._revision)
                return
            except KeyWrongLastSequenceError:
                entry = await kv.get(self._key)  # our last write may have landed unanswered
                if msgpack.unpackb(entry.value or b"")[0] != self._me:
                    break
                self._revision = entry.revision or 0
        raise LeaseLostError(
            f"{self._queue}: not acknowledged, another receiver claimed the queue after this "
            f"one (epoch {self._epoch}); it delivers these events")

    async def _purge(self) -> None:
        floor = self._floor
        try:
            adapter = self._adapter
            await adapter.link.js.purge_stream(adapter.stream_name, seq=floor + 1,
                                               subject=adapter.subject(self._queue))
        except Exception:  # kept until a later purge: the acknowledged state skips them
            return
        self._purged, self._since_purge = floor, 0

    async def read_from(
        self, token: SequenceToken, max_count: int, stream_id: StreamId | None = None
    ) -> list[BatchContainer]:
        if max_count < 0:
            raise ValueError(f"max_count must be >= 0, got {max_count}")
        self._check_ready("read_from()")
        if max_count == 0:
            return []
        out: list[BatchContainer] = []
        pull = await self._new_pull(max(token.sequence, self._floor + 1))
        try:
            while len(out) < max_count:
                msgs = await pull.fetch(_PAGE)
                for msg in msgs:
                    seq, at = meta(msg.reply)
                    if self._is_acked(seq):
                        continue
                    container = self._container(msg, seq, at)
                    if stream_id is None or container.stream_id == stream_id:
                        out.append(container)
                        if len(out) == max_count:
                            break
                if len(msgs) < _PAGE:
                    break
        finally:
            await pull.close()
        return out

    async def shutdown(self) -> None:
        if self._reading is not None:
            await asyncio.shield(self._reading)
        if self._state == "stopped":
            return
        if self._dirty and self._state == "ready":
            with contextlib.suppress(Exception):  # not written: delivered again (at least once)
                async with self._adapter.link.clock.timeout(2.0):
                    await self._commit()
        self._state = "stopped"
        pulls, self._dropped = self._dropped, []
        if self._pull is not None:
            pulls.append(self._pull)
            self._pull = None
        for pull in pulls:
            await pull.close()


@final
class NatsAdapterFactory(QueueAdapterFactory):
    """Makes JetStream adapters on the NATS server of ``url`` (``nats://HOST:PORT?prefix=P``).

    ``enqueue_timeout``: seconds an enqueue keeps sending a message JetStream has not
    acknowledged (a restarting server) before it fails.
    """

    def __init__(self, url: str, enqueue_timeout: float = 30.0) -> None:
        split_nats_url(url)  # raises ConfigurationError for a bad URL
        if not enqueue_timeout > 0:
            raise ConfigurationError(
                f"NatsAdapterFactory.enqueue_timeout must be > 0, got {enqueue_timeout!r}")
        self.url = url
        self.enqueue_timeout = enqueue_timeout

    def __repr__(self) -> str:
        return f"NatsAdapterFactory({self.url!r})"

    def create_adapter(self, provider_name: str) -> NatsQueueAdapter:
        return NatsQueueAdapter(provider_name, self.url, self.enqueue_timeout)
