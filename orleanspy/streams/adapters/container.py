"""BatchContainer: the events of one ``enqueue`` call as read back from a queue, with the
msgpack helpers adapters build containers with (``array_length``) and the error of a
container whose events cannot be decoded."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from orleanspy.errors import StreamError
from orleanspy.streams.ids import StreamId
from orleanspy.streams.tokens import SequenceToken

__all__ = ["BatchContainer", "UndecodableContainer", "array_length"]


class UndecodableContainer(StreamError):
    """The events of the ``index``-th container of a read cannot be decoded (``error``)."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(f"container {index} cannot be decoded: {error!r}")
        self.index = index
        self.error = error


def array_length(payload: bytes) -> int:
    """The element count of a msgpack-encoded array, read from its header alone."""
    first = payload[0]
    if 0x90 <= first <= 0x9F:
        return first & 0x0F
    if first == 0xDC:
        return int.from_bytes(payload[1:3], "big")
    if first == 0xDD:
        return int.from_bytes(payload[1:5], "big")
    raise ValueError(f"not a msgpack array (first byte 0x{first:02x})")


_new = object.__new__


class BatchContainer:
    """The events of one ``enqueue`` call, as read back from the queue.

    Treat it as immutable: the cache and every subscription share one instance.

    Attributes:
        stream_id: the stream the events were produced on.
        token: the container's position in its queue (``index`` 0); strictly greater than
            the token of every container read earlier from the same queue.
        events: the events, in the order they were enqueued; never empty in a container an
            adapter returns (only a placeholder the agent acknowledges has none, see
            ``QueueAdapterReceiver.messages_delivered``).
        size: bytes of the encoded events, for flow control (an estimate for adapters that do
            not encode).
        count: how many events it holds.
        enqueued_at: when the queue took it, in seconds since the epoch (by the adapter's
            clock, the silo's, where the adapter stores it), 0.0 if unknown; what end-to-end
            latency, a backlog's age and a replay from a time are measured from.

    An adapter that reads encoded events builds its containers with ``encoded``: the events
    stay one ``bytes`` object until a delivery decodes them, so the agent's cache holds no
    Python object per event (nothing for the garbage collector to walk), each delivery gets
    values of its own (no copy is needed to keep subscriptions apart), and an event that
    cannot be decoded fails the delivery of its stream only, not the reading of its queue.
    ``events`` then decodes anew on each access.
    """

    __slots__ = ("_events", "_payload", "_unpack", "count", "enqueued_at", "size", "stream_id",
                 "token")

    def __init__(
        self, stream_id: StreamId, token: SequenceToken, events: tuple[Any, ...], size: int,
        enqueued_at: float = 0.0,
    ) -> None:
        self.stream_id = stream_id
        self.enqueued_at = enqueued_at
        self.token = token
        self._events: tuple[Any, ...] | None = events
        self._payload = b""
        self._unpack: Callable[[bytes], Any] | None = None
        self.size = size
        self.count = len(events)

    @classmethod
    def encoded(
        cls, stream_id: StreamId, token: SequenceToken, payload: bytes,
        unpack: Callable[[bytes], Any], size: int | None = None, enqueued_at: float = 0.0,
    ) -> BatchContainer:
        """A container whose events are the msgpack array ``payload``, decoded by ``unpack``
        on each access. Raises ``ValueError`` if ``payload`` is not an array."""
        container: BatchContainer = _new(cls)
        container.stream_id = stream_id
        container.token = token
        container._events = None
        container._payload = payload
        container._unpack = unpack
        container.size = len(payload) if size is None else size
        container.count = array_length(payload)
        container.enqueued_at = enqueued_at
        return container

    @property
    def is_encoded(self) -> bool:
        """True if ``events`` decodes fresh values on each access."""
        return self._events is None

    @property
    def events(self) -> tuple[Any, ...]:
        events = self._events
        if events is not None:
            return events
        assert self._unpack is not None
        return tuple(self._unpack(self._payload))

    def values(self) -> list[Any] | tuple[Any, ...]:
        """The events: freshly decoded (a list the caller owns) for an encoded container,
        the shared tuple otherwise. Raises what the decoder raises for bad bytes."""
        events = self._events
        if events is not None:
            return events
        assert self._unpack is not None
        values = self._unpack(self._payload)
        if type(values) is not list or len(values) != self.count:
            raise ValueError(
                f"container {self.token} of {self.stream_id} decodes to "
                f"{type(values).__name__} of {len(values) if isinstance(values, list) else '?'}"
                f" values, not a list of {self.count}")
        return values

    @staticmethod
    def decode_many(containers: Sequence[BatchContainer]) -> tuple[list[Any], bool]:
        """The values of each container and whether all of them are fresh (decoded for this
        call alone). Encoded containers of one decoder are decoded in one call; the caller
        checks that each value is a list of the container's ``count`` (``values`` does, for
        one container) and, if not, calls ``values`` on the odd one out. Raises
        ``UndecodableContainer`` naming the first container that fails to decode."""
        first = containers[0] if containers else None
        unpack = first._unpack if first is not None else None
        if unpack is not None and len(containers) > 1 and all(
            c._unpack is unpack for c in containers
        ):
            k = len(containers)
            header = bytes((0x90 | k,)) if k < 16 else b"\xdc" + k.to_bytes(2, "big")
            try:
                decoded = unpack(header + b"".join([c._payload for c in containers]))
            except Exception:
                decoded = None  # find the culprit one by one
            if type(decoded) is list and len(decoded) == k:
                return decoded, True  # each value's shape: checked by the caller
        out: list[Any] = []
        fresh = True
        for index, container in enumerate(containers):
            try:
                out.append(container.values())
            except Exception as exc:
                raise UndecodableContainer(index, exc) from exc
            if container._events is not None:
                fresh = False
        return out, fresh

    def items(self) -> list[tuple[Any, SequenceToken]]:
        """Each event with its own token: the i-th event gets ``token.for_event(i)``."""
        token, events = self.token, self.values()
        if len(events) == 1:
            return [(events[0], token)]  # the container's token is its first event's
        return [(event, token.for_event(i)) for i, event in enumerate(events)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchContainer):
            return NotImplemented
        return (self.stream_id, self.token, self.events, self.size) == (
            other.stream_id, other.token, other.events, other.size)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        what = f"{self.count} encoded events" if self._events is None else repr(self._events)
        return (f"BatchContainer(stream_id={self.stream_id!r}, token={self.token!r}, "
                f"{what}, size={self.size})")
