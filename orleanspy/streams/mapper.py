"""HashRingQueueMapper: which queue carries a stream (producer side of the data path).

Data path: the producer (1) asks the mapper for the queue of a ``StreamId`` and hands the batch
to the adapter (2) under that ``QueueId``; the balancer splits ``all_queues()`` between silos,
each of which runs one pulling agent (3) per queue it owns.

The ring follows Orleans' ``HashRingBasedStreamQueueMapper``: with N queues, queue i sits at
ring position ``portion * i`` where ``portion = 2**32 // N + 1``; a stream goes to the first
queue whose position is >= the stream's stable hash, wrapping to queue 0. So queue i > 0 owns
the hashes in ``(portion*(i-1), portion*i]`` and queue 0 owns the top slice plus 0: every queue
gets an equal share of the hash space. The hash is ``StreamId.stable_hash()`` (blake2b, the
same in every process), not Orleans' XxHash32, so placements differ from .NET Orleans.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Final, final

from orleanspy.errors import ConfigurationError
from orleanspy.streams.ids import QueueId, StreamId

__all__ = ["HashRingQueueMapper"]

_RING_SIZE: Final = 1 << 32


@final
class HashRingQueueMapper:
    """Maps each stream to one of ``total_queues`` queues of provider ``provider``.

    The mapping depends only on the stream id, ``total_queues`` and ``provider``: every silo
    and client computes the same queue for the same stream.

    Args:
        total_queues: number of queues, >= 1 (Orleans' default is 8).
        provider: the stream provider's name, the ``provider`` of every ``QueueId``.

    Raises:
        ConfigurationError: ``total_queues`` < 1 or ``provider`` is not a non-empty str.
    """

    __slots__ = ("_positions", "_provider", "_queues")

    def __init__(self, total_queues: int = 8, provider: str = "default") -> None:
        if isinstance(total_queues, bool) or not isinstance(total_queues, int) or total_queues < 1:
            raise ConfigurationError(
                f"HashRingQueueMapper.total_queues must be an int >= 1, got {total_queues!r}"
            )
        if not isinstance(provider, str) or not provider:
            raise ConfigurationError(
                f"HashRingQueueMapper.provider must be a non-empty str, got {provider!r}"
            )
        self._provider = provider
        self._queues = tuple(QueueId(provider, i) for i in range(total_queues))
        if total_queues == 1:
            self._positions: tuple[int, ...] = (0,)
        else:
            portion = _RING_SIZE // total_queues + 1
            self._positions = tuple(portion * i for i in range(total_queues))

    def __repr__(self) -> str:
        return f"HashRingQueueMapper(total_queues={len(self._queues)}, provider={self._provider!r})"

    @property
    def total_queues(self) -> int:
        return len(self._queues)

    @property
    def provider(self) -> str:
        return self._provider

    def queue_for(self, stream_id: StreamId) -> QueueId:
        """The queue that carries ``stream_id``: the first at or after its hash on the ring."""
        i = bisect_left(self._positions, stream_id.stable_hash())
        return self._queues[i if i < len(self._queues) else 0]

    def all_queues(self) -> list[QueueId]:
        """Every queue, by index (a new list each call)."""
        return list(self._queues)

    def ring_position(self, queue: QueueId) -> int:
        """Where ``queue`` sits on the ring (for balancers that split the ring into ranges).

        Raises:
            ValueError: ``queue`` is not one of this mapper's queues.
        """
        if queue.provider != self._provider or not 0 <= queue.index < len(self._queues):
            raise ValueError(f"{queue} is not a queue of {self!r}")
        return self._positions[queue.index]
