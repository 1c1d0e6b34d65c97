"""Gates: hold or fail a storage write or a queue operation, to test one interleaving.

Races between a stream's rendezvous, its pulling agent and its consumers depend on which
step runs first. These wrappers let a test stop one step where it is and go on with another:

    storage = GatedStorage()                       # a MemoryGrainStorage unless given one
    gate = storage.hold_writes("ns/k")             # writes of grain ids containing "ns/k"
    silo = Silo(..., storage={"pubsub": storage})
    ...                                            # something that writes that state
    await gate.reached.wait()                      # the write is waiting now
    ...                                            # the interleaving under test
    gate.open()                                    # it (and every later one) goes on

``GatedAdapterFactory`` does the same for a queue adapter's reads (``get_messages``),
acknowledgements (``messages_delivered``) and enqueues.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from orleanspy.ids import GrainId
from orleanspy.storage.base import GrainStorage, StoredState
from orleanspy.storage.memory import MemoryGrainStorage
from orleanspy.streams.adapters.base import (
    BatchContainer,
    QueueAdapter,
    QueueAdapterFactory,
    QueueAdapterReceiver,
)
from orleanspy.streams.ids import QueueId, StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["Gate", "GatedAdapterFactory", "GatedStorage"]


class Gate:
    """Where matching operations wait: ``reached`` is set when the first one arrives (``count``
    counts them); ``open()`` lets the waiting ones and every later one through. A gate made
    with ``fail`` raises that error instead, ``times`` times (then it lets everything through)."""

    def __init__(self, match: str, *, fail: BaseException | None = None, times: int = 1) -> None:
        self.match = match
        self.reached = asyncio.Event()
        self.count = 0
        self._open = asyncio.Event()
        self._fail = fail
        self._times = times if fail is not None else 0

    def matches(self, text: str) -> bool:
        return self.match in text

    def open(self) -> None:
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @property
    def active(self) -> bool:
        """Does it still stop operations (a closed holding gate, a failing one with failures
        left)?"""
        return self._times > 0 if self._fail is not None else not self._open.is_set()

    async def pass_(self) -> None:
        """An operation arrives: fail it, hold it, or let it through."""
        self.count += 1
        self.reached.set()
        if self._times > 0:
            self._times -= 1
            assert self._fail is not None
            raise self._fail
        if self._fail is None:
            await self._open.wait()


async def _through(gates: list[Gate], text: str) -> None:
    for gate in list(gates):
        if gate.matches(text) and gate.active:
            await gate.pass_()


class GatedStorage(GrainStorage):
    """A grain storage whose writes (or reads) can be held or failed per grain id."""

    def __init__(self, inner: GrainStorage | None = None) -> None:
        self.inner = inner if inner is not None else MemoryGrainStorage()
        self.write_gates: list[Gate] = []
        self.read_gates: list[Gate] = []

    def hold_writes(self, match: str) -> Gate:
        """Writes of grain ids whose text contains ``match`` wait until the gate opens."""
        gate = Gate(match)
        self.write_gates.append(gate)
        return gate

    def fail_writes(self, match: str, times: int = 1,
                    error: BaseException | None = None) -> Gate:
        """The next ``times`` writes of matching grain ids raise ``error`` (an OSError)."""
        gate = Gate(match, fail=error or OSError("storage unavailable (a test gate)"),
                    times=times)
        self.write_gates.append(gate)
        return gate

    def hold_reads(self, match: str) -> Gate:
        gate = Gate(match)
        self.read_gates.append(gate)
        return gate

    async def read(self, grain_id: GrainId, state_name: str) -> StoredState | None:
        await _through(self.read_gates, str(grain_id))
        return await self.inner.read(grain_id, state_name)

    async def write(self, grain_id: GrainId, state_name: str, data: bytes,
                    etag: str | None) -> str:
        await _through(self.write_gates, str(grain_id))
        return await self.inner.write(grain_id, state_name, data, etag)

    async def clear(self, grain_id: GrainId, state_name: str, etag: str | None) -> None:
        await _through(self.write_gates, str(grain_id))
        await self.inner.clear(grain_id, state_name, etag)

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()


class GatedAdapterFactory(QueueAdapterFactory):
    """A queue adapter factory whose reads, acknowledgements and enqueues can be held or
    failed per queue (``match`` is part of the queue's text, e.g. ``"s-0"``)."""

    def __init__(self, inner: QueueAdapterFactory) -> None:
        self.inner = inner
        self.read_gates: list[Gate] = []
        self.ack_gates: list[Gate] = []
        self.enqueue_gates: list[Gate] = []

    def hold_reads(self, match: str = "") -> Gate:
        gate = Gate(match)
        self.read_gates.append(gate)
        return gate

    def fail_reads(self, match: str = "", times: int = 1) -> Gate:
        gate = Gate(match, fail=OSError("queue unavailable (a test gate)"), times=times)
        self.read_gates.append(gate)
        return gate

    def hold_acks(self, match: str = "") -> Gate:
        gate = Gate(match)
        self.ack_gates.append(gate)
        return gate

    def hold_enqueues(self, match: str = "") -> Gate:
        gate = Gate(match)
        self.enqueue_gates.append(gate)
        return gate

    def create_adapter(self, provider_name: str) -> QueueAdapter:
        return _GatedAdapter(self, self.inner.create_adapter(provider_name))


class _GatedAdapter(QueueAdapter):
    def __init__(self, gates: GatedAdapterFactory, inner: QueueAdapter) -> None:
        self.gates = gates
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def is_rewindable(self) -> bool:
        return self.inner.is_rewindable

    async def enqueue(self, queue: QueueId, stream_id: StreamId, events: Sequence[Any]) -> None:
        await _through(self.gates.enqueue_gates, str(queue))
        await self.inner.enqueue(queue, stream_id, events)

    def create_receiver(self, queue: QueueId) -> QueueAdapterReceiver:
        return _GatedReceiver(self.gates, queue, self.inner.create_receiver(queue))

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    def use_clock(self, clock: Any) -> None:
        self.inner.use_clock(clock)

    def retain(self, seconds: float, count: int) -> None:
        self.inner.retain(seconds, count)

    async def read_range(self, queue: QueueId, start: SequenceToken | float, max_count: int,
                         stream_id: StreamId | None = None) -> list[BatchContainer]:
        return await self.inner.read_range(queue, start, max_count, stream_id)

    def __getattr__(self, name: str) -> Any:  # adapter-specific helpers (queue_length, ...)
        return getattr(self.inner, name)


class _GatedReceiver(QueueAdapterReceiver):
    def __init__(self, gates: GatedAdapterFactory, queue: QueueId,
                 inner: QueueAdapterReceiver) -> None:
        self.gates = gates
        self.queue = str(queue)
        self.inner = inner

    async def initialize(self) -> None:
        await self.inner.initialize()

    async def get_messages(self, max_count: int) -> list[BatchContainer]:
        await _through(self.gates.read_gates, self.queue)
        return await self.inner.get_messages(max_count)

    async def messages_delivered(self, batch: Sequence[BatchContainer]) -> None:
        await _through(self.gates.ack_gates, self.queue)
        await self.inner.messages_delivered(batch)

    async def read_from(self, token: SequenceToken, max_count: int,
                        stream_id: StreamId | None = None) -> list[BatchContainer]:
        return await self.inner.read_from(token, max_count, stream_id)

    async def read_range(self, start: SequenceToken | float, max_count: int,
                         stream_id: StreamId | None = None) -> list[BatchContainer]:
        return await self.inner.read_range(start, max_count, stream_id)

    async def shutdown(self) -> None:
        await self.inner.shutdown()
