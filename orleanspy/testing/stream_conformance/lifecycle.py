"""The adapter suite's lifecycle clauses: an adapter's open and close, and a receiver's
initialize and shutdown (idempotent, refused outside their lifetime, waiting for a read).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orleanspy.streams.adapters.base import QueueAdapter
from orleanspy.streams.ids import StreamId
from orleanspy.testing.stream_conformance.kit import WAIT, QueueAdapterKit

__all__ = ["LifecycleClauses"]


class LifecycleClauses(QueueAdapterKit):
    """Opening and closing adapters and receivers."""

    # -- adapter -------------------------------------------------------------------------
    async def test_adapter_name_is_provider_name(self, adapter: QueueAdapter) -> None:
        assert adapter.name == self.provider_name

    async def test_adapter_is_rewindable_is_bool(self, adapter: QueueAdapter) -> None:
        assert isinstance(adapter.is_rewindable, bool)

    async def test_adapter_open_and_close_are_idempotent(self, adapter: QueueAdapter) -> None:
        await adapter.open()
        await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])
        await adapter.close()
        await adapter.close()

    async def test_adapter_enqueue_after_close_raises_runtime_error(
        self, adapter: QueueAdapter
    ) -> None:
        await adapter.close()

        with pytest.raises(RuntimeError):
            await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])
        with pytest.raises(RuntimeError):
            adapter.create_receiver(self.queue())

    async def test_adapter_enqueue_before_open_raises_runtime_error(self, tmp_path: Path) -> None:
        adapter = (await self.make_factory(tmp_path)).create_adapter(self.provider_name)
        try:
            with pytest.raises(RuntimeError):
                await adapter.enqueue(self.queue(), StreamId("s", 1), ["a"])
            with pytest.raises(RuntimeError):
                adapter.create_receiver(self.queue())
        finally:
            await adapter.close()

    # -- receiver lifecycle --------------------------------------------------------------
    async def test_receiver_calls_before_initialize_raise_runtime_error(
        self, adapter: QueueAdapter
    ) -> None:
        receiver = adapter.create_receiver(self.queue())
        try:
            with pytest.raises(RuntimeError):
                await receiver.get_messages(10)
            with pytest.raises(RuntimeError):
                await receiver.messages_delivered([])
        finally:
            await receiver.shutdown()

    async def test_receiver_calls_after_shutdown_raise_runtime_error(
        self, adapter: QueueAdapter
    ) -> None:
        receiver = adapter.create_receiver(self.queue())
        await receiver.initialize()
        await receiver.shutdown()

        with pytest.raises(RuntimeError):
            await receiver.get_messages(10)
        with pytest.raises(RuntimeError):
            await receiver.messages_delivered([])

    async def test_receiver_shutdown_is_idempotent(self, adapter: QueueAdapter) -> None:
        receiver = adapter.create_receiver(self.queue())
        await receiver.initialize()

        await receiver.shutdown()
        await receiver.shutdown()
        await asyncio.gather(receiver.shutdown(), receiver.shutdown())

    async def test_receiver_shutdown_waits_for_read_in_flight(self, adapter: QueueAdapter) -> None:
        await self.enqueue_numbered(adapter, StreamId("s", 1), 3)
        receiver = adapter.create_receiver(self.queue())
        await receiver.initialize()
        finished: list[str] = []

        async with asyncio.timeout(WAIT):
            # Tasks start in creation order: the read is under way when shutdown begins.
            read = asyncio.create_task(receiver.get_messages(10))
            read.add_done_callback(lambda _: finished.append("read"))
            stop = asyncio.create_task(receiver.shutdown())
            stop.add_done_callback(lambda _: finished.append("shutdown"))
            await asyncio.gather(read, stop)

        assert finished == ["read", "shutdown"]
        assert [c.events[0] for c in read.result()] == [0, 1, 2]
