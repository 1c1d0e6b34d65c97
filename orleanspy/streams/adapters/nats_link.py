"""The NATS side of ``NatsQueueAdapter``: names, the connection, publishing with awaited
acknowledgements (``Writer`` coalesces, ``NatsLink`` publishes), no-wait pull requests
(``Pull``), the message format (``head_of``, ``Decoder``) and acknowledged ranges.

``NatsLink`` is one connection per adapter (``nats-py``, reconnecting forever, so a NATS
server restart does not stop the silo). Publishing goes through one reply subscription:
each message carries its own reply subject and a ``Nats-Msg-Id`` header, and a round of
messages is sent in order and then awaited together; a message whose acknowledgement does
not arrive (a disconnect, a restarting server) is sent again with the same id until
``enqueue_timeout``, and JetStream's duplicate window drops the copy it already stored.

``Pull`` reads one subject from a sequence on through an ephemeral pull consumer with no
acknowledgements (positions are the adapter's own): each ``fetch`` is one ``no_wait`` pull
request, answered by what is stored now and a status message, so it never waits for data.
A fetch fails, rather than skip a message, when the consumer's sequence jumps (messages lost
on a dropped connection) or the request is not answered: the reader then starts a new
consumer after the last message it took.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import hashlib
import itertools
import json
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError, ServerError
from nats.js.kv import KeyValue

from orleanspy._util.clock import Clock
from orleanspy._util.futures import settle
from orleanspy.errors import ConfigurationError, StreamError
from orleanspy.logging import get_logger
from orleanspy.messaging.codec import Codec, pack_array
from orleanspy.streams.adapters.base import COALESCE_MAX, BatchContainer
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import container_token

#: tries of a stream or bucket create that the server answers with a 500, the n-th after
#: ``n * CREATE_RETRY_DELAY`` seconds
CREATE_ATTEMPTS: Final = 3
CREATE_RETRY_DELAY: Final = 0.1

__all__ = [
    "DEFAULT_PREFIX", "Decoder", "NatsLink", "Pull", "Ranges", "Writer", "head_of", "meta",
    "name_token", "split_nats_url",
]

DEFAULT_PREFIX: Final = "orleanspy"
#: seconds a round of publishes waits for its acknowledgements before sending again
ACK_WAIT: Final = 2.0
#: bytes of encoded events one coalesced container holds at most (under max_payload)
_COALESCE_BYTES: Final = 256 * 1024
_SAFE: Final = re.compile(r"[^A-Za-z0-9_-]")


def name_token(text: str) -> str:
    """``text`` as one token valid in stream, bucket, key and subject names (letters, digits,
    ``_`` and ``-``; anything else is replaced and a short hash of the text appended)."""
    safe = _SAFE.sub("_", text)
    if safe == text and text:
        return text
    return f"{safe}_{hashlib.blake2b(text.encode(), digest_size=4).hexdigest()}"


def split_nats_url(url: str) -> tuple[str, str]:
    """``(server URL without ?prefix=, prefix)`` of ``nats://HOST:PORT[?prefix=P]``."""
    if not isinstance(url, str) or not url.startswith(("nats://", "tls://")):
        raise ConfigurationError(f"a NATS URL is nats://HOST:PORT[?prefix=P], got {url!r}")
    parts = urlsplit(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    prefix = query.pop("prefix", [DEFAULT_PREFIX])[-1]
    if not prefix or name_token(prefix) != prefix:
        raise ConfigurationError(
            f"NATS URL {url!r}: prefix {prefix!r} must be letters, digits, _ or - "
            "(e.g. ?prefix=prod)")
    rest = urlunsplit((parts.scheme, parts.netloc, parts.path,
                       urlencode(query, doseq=True), parts.fragment))
    return rest, prefix


def is_status(msg: Msg) -> bool:
    headers = msg.headers
    return bool(headers) and "Status" in headers  # type: ignore[operator]


class NatsLink:
    """One NATS connection with JetStream, and the publishing of acknowledged messages."""

    def __init__(self, server_url: str, clock: Clock) -> None:
        self.server_url = server_url
        self.clock = clock
        self.nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._inbox = ""
        self._ids = itertools.count(1)
        self._origin = uuid.uuid4().hex[:16]
        self._acks: dict[str, asyncio.Future[bytes]] = {}
        self._closing = False

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None
        return self._js

    @property
    def client(self) -> Client:
        assert self.nc is not None
        return self.nc

    async def open(self) -> None:
        self._closing = False
        log = get_logger(__name__, server=self.server_url)

        async def on_error(exc: Exception) -> None:
            log.debug("nats_error", error=repr(exc))  # each failed reconnect attempt too

        async def on_disconnected() -> None:
            if not self._closing:
                log.warning("nats_disconnected")

        async def on_reconnected() -> None:
            log.info("nats_reconnected")

        try:
            self.nc = await nats.connect(
                self.server_url, max_reconnect_attempts=-1, reconnect_time_wait=0.25,
                connect_timeout=5, allow_reconnect=True, name="orleanspy-streams",
                error_cb=on_error, disconnected_cb=on_disconnected,
                reconnected_cb=on_reconnected)
        except Exception as exc:
            raise StreamError(f"NATS at {self.server_url} is unreachable: {exc!r}") from exc
        self._js = self.nc.jetstream(timeout=5.0)
        self._inbox = self.nc.new_inbox()
        await self.nc.subscribe(self._inbox + ".*", cb=self._on_ack)

    async def ensure_stream_and_bucket(self, stream: str, subjects: str,
                                       bucket: str) -> KeyValue:
        """The stream ``stream`` over ``subjects`` and the key-value bucket ``bucket``, created
        when missing (file storage). A create the server answers with a 500 is tried again,
        up to ``CREATE_ATTEMPTS`` times: a server deleting an account's last stream at that
        moment removes the account's store folder under the new one."""
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            try:
                return await self._ensure_stream_and_bucket(stream, subjects, bucket)
            except ServerError:
                if attempt == CREATE_ATTEMPTS:
                    raise
                await self.clock.sleep(CREATE_RETRY_DELAY * attempt)
        raise AssertionError("unreachable")

    async def _ensure_stream_and_bucket(self, stream: str, subjects: str,
                                        bucket: str) -> KeyValue:
        js = self.js
        try:
            await js.stream_info(stream)
        except NotFoundError:
            await js.add_stream(StreamConfig(
                name=stream, subjects=[subjects], retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE, duplicate_window=120.0))
        try:
            return await js.key_value(bucket)
        except NotFoundError:
            return await js.create_key_value(KeyValueConfig(
                bucket=bucket, history=1, storage=StorageType.FILE))

    async def close(self) -> None:
        self._closing = True
        if self.nc is not None:
            await self.nc.close()

    async def _on_ack(self, msg: Msg) -> None:
        waiter = self._acks.pop(msg.subject[len(self._inbox) + 1:], None)
        if waiter is not None and not waiter.done():
            waiter.set_result(b"" if is_status(msg) else msg.data)

    async def _send(self, subject: str, body: bytes, msg_id: str,
                    tags: list[str]) -> asyncio.Future[bytes]:
        tag = str(next(self._ids))
        tags.append(tag)
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._acks[tag] = waiter
        try:
            await self.client.publish(subject, body, reply=f"{self._inbox}.{tag}",
                                      headers={"Nats-Msg-Id": msg_id})
        except Exception as exc:
            waiter.set_exception(exc)
        return waiter

    def message_ids(self, count: int) -> list[str]:
        """Ids for ``count`` messages, unique to this connection's lifetime and process."""
        return [f"{self._origin}.{next(self._ids)}" for _ in range(count)]

    async def publish(self, items: Sequence[tuple[str, bytes, str]], timeout: float) -> None:
        """Publish ``(subject, body, message id)`` in order and return once JetStream has
        acknowledged each; unacknowledged ones are sent again (from the first of them on, in
        order) until ``timeout`` seconds have passed, then ``StreamError``."""
        clock = self.clock
        deadline = clock.monotonic() + timeout
        pending = list(items)
        last: BaseException | str = "no acknowledgement"
        while True:
            tags: list[str] = []
            waiters = [await self._send(s, b, m, tags) for s, b, m in pending]
            try:
                async with clock.timeout(max(0.05, min(ACK_WAIT, deadline - clock.monotonic()))):
                    await asyncio.wait(waiters)
            except TimeoutError:
                pass  # sent again below, if there is time left
            finally:
                for tag in tags:
                    self._acks.pop(tag, None)
            first_failed = None
            for i, waiter in enumerate(waiters):
                why = _failure(waiter)
                if why is not None:
                    if isinstance(why, MaxPayloadError):
                        raise StreamError(f"a container is larger than the NATS server's "
                                          f"max_payload: {why!r}") from why
                    last = why
                    if first_failed is None:
                        first_failed = i
            if first_failed is None:
                return
            pending = pending[first_failed:]
            if clock.monotonic() >= deadline:
                raise StreamError(f"JetStream did not acknowledge {len(pending)} message(s) "
                                  f"within {timeout:g}s: {last!r}")
            await clock.sleep(0.1)


def _failure(waiter: asyncio.Future[bytes]) -> BaseException | str | None:
    """Why a publish was not stored (None: stored, or a duplicate of a stored one)."""
    if not waiter.done():
        waiter.cancel()
        return "timed out"
    if waiter.cancelled():
        return "cancelled"
    exc = waiter.exception()
    if exc is not None:
        return exc
    data = waiter.result()
    if not data:
        return "no responders (the stream is not available)"
    reply = json.loads(data)
    if "error" in reply:
        return str(reply["error"])
    return None


class Pull:
    """Reads ``subject`` of ``stream`` from a sequence on: an ephemeral consumer without
    acknowledgements and its own reply subscription, one ``no_wait`` pull request at a time.
    ``open`` creates both, ``close`` deletes both."""

    def __init__(self, link: NatsLink, stream: str, subject: str) -> None:
        self._link = link
        self._stream = stream
        self._subject = subject
        self._name = uuid.uuid4().hex
        self._inbox = ""
        self._sub: Any = None
        self._got: list[Msg] = []
        self._want = 0
        self._done: asyncio.Future[None] | None = None
        #: messages the consumer had left to deliver when it was created
        self.pending = 0
        self._cseq = 0  # the consumer sequence of the last message taken

    async def open(self, start: int, at: float | None = None) -> Pull:
        """Create the consumer at stream sequence ``start`` (>= 1), or at the first message
        written at or after ``at`` (seconds since the epoch) if given, and subscribe its
        replies."""
        nc = self._link.client
        self._inbox = nc.new_inbox()
        self._sub = await nc.subscribe(self._inbox, cb=self._on_msg)
        where: dict[str, Any] = (
            {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": max(start, 1)}
            if at is None else {"deliver_policy": DeliverPolicy.BY_START_TIME,
                                "opt_start_time": datetime.fromtimestamp(at, UTC).isoformat()})
        try:
            info = await self._link.js.add_consumer(self._stream, ConsumerConfig(
                name=self._name, filter_subject=self._subject, ack_policy=AckPolicy.NONE,
                inactive_threshold=120.0, mem_storage=True, num_replicas=1, **where))
        except BaseException:
            await self.close(delete=False)
            raise
        self.pending = info.num_pending or 0
        return self

    async def close(self, delete: bool = True) -> None:
        """Unsubscribe and (``delete``) delete the consumer; errors are ignored: a consumer
        the server cannot delete now expires on its own."""
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):  # a closed connection: nothing to undo
                await sub.unsubscribe()
        if delete:
            try:
                async with self._link.clock.timeout(2.0):
                    await self._link.js.delete_consumer(self._stream, self._name)
            except Exception:
                pass

    async def _on_msg(self, msg: Msg) -> None:
        done = self._done
        if done is None or done.done():
            return  # an answer to a request that gave up: this pull is replaced
        if is_status(msg):
            code = str(msg.headers.get("Status", "")) if msg.headers else ""
            if code in ("404", "408"):
                done.set_result(None)
            else:
                done.set_exception(StreamError(f"pull request on {self._subject} answered "
                                               f"{code} {msg.headers!r}"))
            return
        parts = (msg.reply or "").split(".")
        cseq = int(parts[6] if len(parts) == 9 else parts[8])
        if cseq != self._cseq + 1:  # lost in transit (a dropped connection): never skip one
            done.set_exception(StreamError(
                f"pull on {self._subject}: consumer sequence {cseq} after {self._cseq}"))
            return
        self._cseq = cseq
        self._got.append(msg)
        if len(self._got) >= self._want:
            done.set_result(None)

    async def fetch(self, count: int, timeout: float = 5.0) -> list[Msg]:
        """Up to ``count`` (>= 1) next messages, without waiting for more. Raises
        ``StreamError`` if the request is not answered: replace the pull then (its consumer
        may have moved past messages this call did not get)."""
        self._got, self._want = [], count
        self._done = done = asyncio.get_running_loop().create_future()
        try:
            await self._link.client.publish(
                f"$JS.API.CONSUMER.MSG.NEXT.{self._stream}.{self._name}",
                b'{"batch":%d,"no_wait":true}' % count, reply=self._inbox)
            try:
                async with self._link.clock.timeout(timeout):
                    await done
            except TimeoutError:
                raise StreamError(f"pull request on {self._subject} unanswered "
                                  f"within {timeout:g}s") from None
        finally:
            self._done = None
        got, self._got = self._got, []
        return got


def head_of(codec: Codec, stream_id: StreamId) -> bytes:
    """A message's first bytes: the stream's namespace and its packed key, length-prefixed."""
    ns, key = stream_id.namespace.encode(), codec.packb(stream_id.key)
    return len(ns).to_bytes(2, "big") + ns + len(key).to_bytes(2, "big") + key


class Writer:
    """Messages waiting to be published: one ordered round per flush."""

    def __init__(self, link: NatsLink, timeout: float) -> None:
        self.link = link
        self.timeout = timeout
        self.pending: list[list[Any]] = []  # [subject, head, payload or encoded events, bytes]
        self.open: dict[tuple[str, StreamId], int] = {}
        self.waiters: list[asyncio.Future[None]] = []
        self.flusher: asyncio.Task[None] | None = None

    def add(self, subject: str, head: bytes, payload: bytes,
            stream_id: StreamId) -> asyncio.Future[None]:
        if self.open:
            self.open.pop((subject, stream_id), None)  # later single events go after it
        self.pending.append([subject, head, payload, 0])
        return self._waiter()

    def add_event(self, subject: str, stream_id: StreamId, head: bytes,
                  event: bytes) -> asyncio.Future[None]:
        at = self.open.get((subject, stream_id))
        if at is not None:
            entry = self.pending[at]
            if len(entry[2]) < COALESCE_MAX and entry[3] < _COALESCE_BYTES:
                entry[2].append(event)
                entry[3] += len(event)
                return self._waiter()
        self.open[(subject, stream_id)] = len(self.pending)
        self.pending.append([subject, head, [event], len(event)])
        return self._waiter()

    def _waiter(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self.waiters.append(waiter)
        if self.flusher is None:
            self.flusher = loop.create_task(self._flush())
        return waiter

    async def wait_idle(self) -> None:
        if self.flusher is not None:
            await asyncio.shield(self.flusher)

    async def _flush(self) -> None:
        try:
            while self.waiters:
                pending, waiters = self.pending, self.waiters
                self.pending, self.waiters, self.open = [], [], {}
                ids = self.link.message_ids(len(pending))
                items = [
                    (subject, head + (pack_array(body) if type(body) is list else body), mid)
                    for (subject, head, body, _), mid in zip(pending, ids, strict=True)
                ]
                try:
                    await self.link.publish(items, self.timeout)
                except Exception as exc:  # fail this round's callers, go on with the next
                    settle(waiters, exc)
                    continue
                settle(waiters)
        finally:
            self.flusher = None


class Ranges:
    """Sorted, disjoint ranges of acknowledged sequences (from a flat ``[a, b, a, b...]``)."""

    __slots__ = ("ends", "starts")

    def __init__(self, flat: Sequence[int]) -> None:
        self.starts: list[int] = list(flat[0::2])
        self.ends: list[int] = list(flat[1::2])

    def covers(self, seq: int) -> bool:
        i = bisect.bisect_right(self.starts, seq) - 1
        return i >= 0 and seq <= self.ends[i]

    def after(self, seq: int) -> list[int]:
        """The flat ranges past ``seq`` (clipped)."""
        out: list[int] = []
        for a, b in zip(self.starts, self.ends, strict=True):
            if b > seq:
                out += (max(a, seq + 1), b)
        return out


class Decoder:
    """Containers from messages (``head_of`` bytes, then the encoded events); the stream ids
    of recent heads are kept, so a message of a known stream decodes no key."""

    def __init__(self) -> None:
        self._unpack = Codec().unpackb
        self._sids: dict[bytes, StreamId] = {}

    def __call__(self, msg: Msg, seq: int, at: float) -> BatchContainer:
        body = msg.data
        ns_end = 2 + int.from_bytes(body[:2], "big")
        end = ns_end + 2 + int.from_bytes(body[ns_end:ns_end + 2], "big")
        head = body[:end]
        sid = self._sids.get(head)
        if sid is None:
            if len(self._sids) > 4096:
                self._sids.clear()
            sid = self._sids[head] = StreamId(body[2:ns_end].decode(),
                                              self._unpack(body[ns_end + 2:end]))
        return BatchContainer.encoded(sid, container_token(seq), body[end:], self._unpack,
                                      None, at)


def meta(reply: str) -> tuple[int, float]:
    """``(stream sequence, write time in seconds)`` from a JetStream message's reply subject
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<nanos>.<pending>``, with
    domain and account hash in its longer form)."""
    parts = reply.split(".")
    if len(parts) == 9:
        return int(parts[5]), int(parts[7]) / 1e9
    return int(parts[7]), int(parts[9]) / 1e9
