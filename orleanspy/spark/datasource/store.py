"""The provider's queues as Spark's Python processes see them: its durable adapter, opened
once per process on an event loop thread of its own, called synchronously.

Spark calls a Python data source from plain threads (the driver's source runner, the
workers' tasks), never from inside an event loop; the adapter's coroutines run on the
loop thread and each call waits for its result. Python workers are reused across tasks, so
one adapter (one Redis connection pool, one SQLite connection) serves every task of a
worker.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from orleanspy.errors import ReplayUnavailableError
from orleanspy.streams.adapters.base import BatchContainer, EnqueueItem, QueueAdapter
from orleanspy.streams.ids import QueueId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["Store", "store_for"]

T = TypeVar("T")
#: seconds any one call to the back end may take
CALL_TIMEOUT = 120.0

_lock = threading.Lock()
_store_cache: dict[tuple[str, str], Store] = {}


def _adapter(url: str, provider: str) -> QueueAdapter:
    # Only the back end the URL names is imported (a Spark process pays for one).
    if url.startswith("sqlite:"):
        from orleanspy.streams.adapters.sqlite import SqliteQueueAdapter

        return SqliteQueueAdapter(provider, url.removeprefix("sqlite:"))
    from orleanspy.streams.adapters.redis import RedisQueueAdapter

    return RedisQueueAdapter(provider, url)


class Store:
    """One provider's adapter, open, behind synchronous calls."""

    def __init__(self, url: str, provider: str) -> None:
        self.provider = provider
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"orleanspy-spark {provider}")
        self._thread.start()
        self.adapter = _adapter(url, provider)
        self._call(self.adapter.open())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CALL_TIMEOUT)

    def queue(self, index: int) -> QueueId:
        return QueueId(self.provider, index)

    def newest(self, queues: Sequence[QueueId]) -> dict[QueueId, int]:
        """The newest sequence of each queue (0: none yet)."""
        async def all_of() -> dict[QueueId, int]:
            found = await asyncio.gather(*(self.adapter.newest_sequence(q) for q in queues))
            return dict(zip(queues, found, strict=True))
        return self._call(all_of())

    def read(self, queue: QueueId, start: SequenceToken | float,
             max_count: int) -> list[BatchContainer]:
        return self._call(self.adapter.read_range(queue, start, max_count))

    def read_soon(self, queue: QueueId, start: SequenceToken | float,
                  max_count: int) -> Future[list[BatchContainer]]:
        """``read``, started now on the loop thread; ``result`` waits for it."""
        return asyncio.run_coroutine_threadsafe(
            self.adapter.read_range(queue, start, max_count), self._loop)

    @staticmethod
    def result(pending: Future[T]) -> T:
        return pending.result(CALL_TIMEOUT)

    def first_of_each(self, starts: dict[QueueId, SequenceToken | float]
                      ) -> dict[QueueId, list[BatchContainer] | ReplayUnavailableError]:
        """Each queue's first container at or after its start (an empty list: none), read
        concurrently; a queue that no longer keeps its start gives the error saying so."""
        async def all_of() -> dict[QueueId, list[BatchContainer] | ReplayUnavailableError]:
            found = await asyncio.gather(
                *(self.adapter.read_range(q, start, 1) for q, start in starts.items()),
                return_exceptions=True)
            out: dict[QueueId, list[BatchContainer] | ReplayUnavailableError] = {}
            for queue, result in zip(starts, found, strict=True):
                if isinstance(result, BaseException) and not isinstance(
                        result, ReplayUnavailableError):
                    raise result
                out[queue] = result
            return out
        return self._call(all_of())

    def hold(self, reader: str, holds: dict[QueueId, int],
             seconds: float) -> dict[QueueId, float]:
        return self._call(self.adapter.hold(reader, holds, seconds))

    def release(self, reader: str, queues: Sequence[QueueId]) -> None:
        self._call(self.adapter.release(reader, queues))

    def enqueue_once(self, marker: str, batches: Sequence[EnqueueItem],
                     remember: float) -> bool:
        return self._call(self.adapter.enqueue_once(marker, batches, remember))


def store_for(url: str, provider: str) -> Store:
    """This process's store of provider ``provider`` at ``url`` (opened on first use)."""
    with _lock:
        store = _store_cache.get((url, provider))
        if store is None:
            store = _store_cache[(url, provider)] = Store(url, provider)
        return store
