"""The adapter suite's kit: the adapter fixture, the properties an adapter declares
(``at_least_once``, ``durable``, ``records_write_time``), and the helpers every clause group
uses (a receiver, reading or rewinding a queue to its end, skipping a clause an adapter's
properties exclude).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from orleanspy.streams.adapters.base import (
    BatchContainer,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
)
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["WAIT", "QueueAdapterKit", "assert_token_order"]

#: Upper bound for anything the suite awaits: a hang fails fast.
WAIT = 10.0


def assert_token_order(batch: Sequence[BatchContainer]) -> None:
    """The containers' tokens increase, and each is a container's first event."""
    tokens = [c.token for c in batch]
    assert all(a < b for a, b in itertools.pairwise(tokens)), tokens
    assert all(t.index == 0 for t in tokens), tokens


class QueueAdapterKit(abc.ABC):
    """What every clause group of the suite shares. Subclass ``QueueAdapterConformance``,
    not this.

    Set ``at_least_once = True`` for adapters that keep unacknowledged containers for the
    next receiver of the queue (in this process), and ``durable = True`` for adapters that
    keep them across a reopen of the adapter (a restart of the process); ``durable`` implies
    ``at_least_once``. The clauses of a property the adapter lacks are skipped.
    """

    pytestmark = pytest.mark.asyncio

    provider_name = "conformance"
    at_least_once = False
    durable = False
    #: The adapter stamps each container with its write time (``enqueued_at``); set False
    #: for one that cannot (its containers carry 0.0, and no latency is measured from them).
    records_write_time = True

    @abc.abstractmethod
    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        """Return a factory (``tmp_path`` is a fresh directory for files, the same per test)."""

    @pytest_asyncio.fixture
    async def adapter(self, tmp_path: Path) -> AsyncIterator[QueueAdapter]:
        adapter = (await self.make_factory(tmp_path)).create_adapter(self.provider_name)
        await adapter.open()
        try:
            yield adapter
        finally:
            await adapter.close()

    # -- helpers -------------------------------------------------------------------------
    def queue(self, index: int = 0) -> QueueId:
        return QueueId(self.provider_name, index)

    @contextlib.asynccontextmanager
    async def receiver(
        self, adapter: QueueAdapter, queue: QueueId | None = None
    ) -> AsyncIterator[QueueAdapterReceiver]:
        receiver = adapter.create_receiver(queue or self.queue())
        await receiver.initialize()
        try:
            yield receiver
        finally:
            await receiver.shutdown()

    async def read_all(
        self, receiver: QueueAdapterReceiver, max_count: int = 1000
    ) -> list[BatchContainer]:
        """Read until the queue gives ``[]``; each read returns at most ``max_count``."""
        batch: list[BatchContainer] = []
        async with asyncio.timeout(WAIT):
            while chunk := await receiver.get_messages(max_count):
                assert len(chunk) <= max_count
                batch.extend(chunk)
        return batch

    async def enqueue_numbered(
        self, adapter: QueueAdapter, stream: StreamId, count: int, queue: QueueId | None = None
    ) -> None:
        for n in range(count):
            await adapter.enqueue(queue or self.queue(), stream, [n])

    async def rewind_all(
        self,
        receiver: QueueAdapterReceiver,
        token: SequenceToken,
        stream_id: StreamId | None = None,
        max_count: int = 1000,
    ) -> list[BatchContainer]:
        """Page through ``read_from`` from ``token`` until it gives ``[]``."""
        batch: list[BatchContainer] = []
        async with asyncio.timeout(WAIT):
            while chunk := await receiver.read_from(token, max_count, stream_id):
                assert len(chunk) <= max_count
                batch.extend(chunk)
                token = SequenceToken(chunk[-1].token.sequence + 1)
        return batch

    def require_durable(self) -> None:
        if not self.durable:
            pytest.skip("the adapter is not durable")

    def require_at_least_once(self) -> None:
        if not (self.at_least_once or self.durable):
            pytest.skip("the adapter does not keep unacknowledged containers")

    def require_rewindable(self, adapter: QueueAdapter) -> None:
        if not adapter.is_rewindable:
            pytest.skip("the adapter is not rewindable")
