"""StreamReceiver: a ClusterClient's stream subscriptions and the loop that receives them.

The client's subscriptions are served on the silos by one ``ClientStreamConsumer`` grain
keyed by the client's id (``orleanspy.streams.client_consumer``). The receiver long-polls it
through the gateways, runs each delivery's handler (the deliveries of one subscription come
one at a time, so its events stay in order) and answers with ``ack``; a handler's error goes
back to the pulling agent, which retries and finally skips or faults as for a grain. When a
gateway fails, the poll raises, the loop backs off briefly and polls again through another
gateway; a delivery handed out on the lost connection is handed out again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from orleanspy.grains.grain import deliver_batch, handle_event, remember_removed
from orleanspy.grains.request_context import without_context
from orleanspy.runtime.gateway import CLIENT_CONSUMER_TYPE
from orleanspy.streams.ids import StreamId
from orleanspy.streams.stream import ErrorHandler, StreamHandler, StreamObserver, as_observer
from orleanspy.streams.tokens import SequenceToken

__all__ = ["ClientSubscriptionHandle", "StreamReceiver"]

POLL_WAIT = 10.0


@dataclass(frozen=True, slots=True)
class ClientSubscriptionHandle:
    """A ClusterClient's subscription to a stream: ``unsubscribe()``, ``resume(handler,
    token)``. It lasts while the client polls; a client that stops (closes, or loses every
    gateway) keeps it for the provider's ``client_timeout``."""

    provider: str
    stream_id: StreamId
    sub_id: str
    receiver: StreamReceiver

    async def unsubscribe(self) -> None:
        """Stop deliveries to this subscription and forget it."""
        await self.receiver.unsubscribe(self.sub_id)

    async def resume(
        self, handler: StreamHandler[Any], token: SequenceToken | None = None, *,
        on_error: ErrorHandler | None = None,
    ) -> ClientSubscriptionHandle:
        """Attach ``handler`` (e.g. after ``get_subscriptions``), optionally rewinding to
        ``token``."""
        await self.receiver.resume(self.sub_id, handler, token, on_error)
        return self


class StreamReceiver:
    """One per ClusterClient, made on its first subscription."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.consumer = client.get_grain(CLIENT_CONSUMER_TYPE, client.client_id)
        self.observers: dict[str, StreamObserver[Any]] = {}
        #: subscriptions this client removed, newest last (at most ``REMOVED_KEPT``): a
        #: delivery already on its way to one of them is dropped, not failed
        self.removed: dict[str, None] = {}
        self._handling: set[int] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.Task[None] | None = None
        self._closed = False
        self.log = client.log

    # -- subscriptions --------------------------------------------------------------------
    async def subscribe(
        self, provider: str, stream_id: StreamId, handler: StreamHandler[Any],
        token: SequenceToken | None, on_error: ErrorHandler | None, tag: str | None,
    ) -> ClientSubscriptionHandle:
        part = uuid.uuid4().hex
        sub_id = f"{self.client.client_id}/{part}"
        self.observers[sub_id] = as_observer(handler, on_error)
        self._start()
        try:
            got = await self.consumer.subscribe(provider, stream_id.namespace, stream_id.key,
                                                part, token, tag)
        except BaseException:
            self.observers.pop(sub_id, None)
            raise
        assert got == sub_id
        return ClientSubscriptionHandle(provider, stream_id, sub_id, self)

    async def unsubscribe(self, sub_id: str) -> None:
        await self.consumer.unsubscribe(sub_id)
        self.observers.pop(sub_id, None)
        remember_removed(self.removed, sub_id)

    async def resume(
        self, sub_id: str, handler: StreamHandler[Any], token: SequenceToken | None,
        on_error: ErrorHandler | None,
    ) -> None:
        self.observers[sub_id] = as_observer(handler, on_error)
        self._start()
        await self.consumer.resume(sub_id, token)

    async def subscriptions(self, provider: str, stream_id: StreamId
                            ) -> list[ClientSubscriptionHandle]:
        subs: list[str] = await self.consumer.subscriptions(
            provider, stream_id.namespace, stream_id.key)
        return [ClientSubscriptionHandle(provider, stream_id, s, self) for s in subs]

    # -- the loop ---------------------------------------------------------------------------
    def _start(self) -> None:
        if self._loop is None and not self._closed:
            self._loop = asyncio.get_running_loop().create_task(
                self._run(), context=without_context())

    async def close(self) -> None:
        if self._loop is not None and not self._closed:
            try:  # say so, or the silo counts the client present while its last poll waits
                async with self.client.clock.timeout(1.0):
                    await self.consumer.leave()
            except Exception as exc:
                self.log.info("stream_leave_failed", error=repr(exc))
        self._closed = True
        tasks = [t for t in (self._loop, *self._tasks) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self) -> None:
        wait = min(POLL_WAIT, self.client.options.response_timeout / 2)
        delay = 0.05
        while not self._closed and self.observers:
            try:
                items = await self.consumer.poll(wait, sorted(self._handling))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a lost gateway: poll again through another one
                self.log.info("stream_poll_failed", error=repr(exc))
                await self.client.clock.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.05
            for delivery, sub_id, packed in items:
                if delivery:
                    self._handling.add(delivery)
                self._spawn(self._handle(delivery, sub_id, packed))
        self._loop = None  # no subscription left: the next one starts the loop again

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            coro, context=without_context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, delivery: int, sub_id: str, packed: bytes) -> None:
        observer = self.observers.get(sub_id)
        if not delivery:  # a stream error for on_error
            await self._on_error(observer, sub_id, packed)
            return
        try:
            if observer is None and sub_id in self.removed:
                await self._ack(delivery, True, 0, "")  # unsubscribed meanwhile: dropped
                return
            if observer is None:
                await self._ack(delivery, False, 0, "this client has no handler for "
                                f"subscription {sub_id}: resume it with a handler")
                return
            try:
                events = self.client.codec.unpackb(packed)
            except Exception as exc:
                await self._ack(delivery, False, 0, f"the client cannot decode the events: "
                                f"{exc!r}; pass the item type to get_stream")
                return
            done = 0
            try:
                if observer.on_next_batch is not None:
                    await deliver_batch(observer.on_next_batch, events)
                else:
                    on_next: Callable[[Any, Any], Awaitable[object]] = observer.on_next  # type: ignore[assignment]
                    for item, token in events:
                        await handle_event(on_next, item, token)
                        done += 1
            except Exception as exc:
                self.log.debug("client_stream_handler_failed", subscription=sub_id,
                               error=repr(exc))
                await self._ack(delivery, False, done, repr(exc))
                return
            await self._ack(delivery, True, 0, "")
        finally:
            self._handling.discard(delivery)

    async def _ack(self, delivery: int, ok: bool, done: int, error: str) -> None:
        try:
            await self.consumer.ack(delivery, ok, done, error)
        except Exception as exc:  # the delivery is handed out again at the next poll
            self.log.info("stream_ack_failed", delivery=delivery, error=repr(exc))

    async def _on_error(self, observer: StreamObserver[Any] | None, sub_id: str,
                        packed: bytes) -> None:
        if observer is None or observer.on_error is None:
            return
        try:
            error = self.client.codec.unpackb(packed)
            await observer.on_error(error)
        except Exception as exc:
            self.log.warning("client_stream_on_error_failed", subscription=sub_id,
                             error=repr(exc))
