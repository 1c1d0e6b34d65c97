"""Stream and queue identities: StreamId names what a producer writes to, QueueId where it lands.

Data path: a producer (1) names a ``StreamId``; the mapper turns it into a ``QueueId``; the
adapter (2) files the batch under that queue; the pulling agent (3) of that queue reads it back.
Both ids are frozen, slotted dataclasses, so they are hashable, comparable and travel through
the msgpack ``Codec`` as they are.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final, TypeAlias

from orleanspy._util.hashing import stable_hash32

__all__ = ["QueueId", "StreamId", "StreamKey"]

#: What may key a stream inside its namespace. ``1`` and ``"1"`` are different streams.
StreamKey: TypeAlias = str | int | uuid.UUID

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1


def _key_text(key: StreamKey) -> str:
    """The key with a type tag, so that ``1``, ``"1"`` and a UUID never collide."""
    if isinstance(key, str):
        return "s:" + key
    if isinstance(key, int):
        return f"i:{key}"
    return "u:" + key.hex


@dataclass(frozen=True, slots=True)
class StreamId:
    """The identity of a stream: a namespace (a kind of stream) and a key inside it.

    Args:
        namespace: non-empty str, e.g. ``"orders"``; implicit subscriptions match on it.
        key: a str, an int (not a bool) in msgpack's 64-bit range, or a ``uuid.UUID``.

    Raises:
        TypeError: ``namespace`` is not a str or ``key`` is not a str, int or UUID.
        ValueError: ``namespace`` is empty or an int ``key`` needs more than 64 bits.
    """

    namespace: str
    key: StreamKey

    def __post_init__(self) -> None:
        if not isinstance(self.namespace, str):
            raise TypeError(
                f"StreamId.namespace must be a str, not {type(self.namespace).__name__}; "
                "pass a name such as 'orders'"
            )
        if not self.namespace:
            raise ValueError("StreamId.namespace must not be empty; pass a name such as 'orders'")
        key = self.key
        if isinstance(key, bool) or not isinstance(key, (str, int, uuid.UUID)):
            raise TypeError(
                f"StreamId.key must be a str, an int or a uuid.UUID, not {type(key).__name__}; "
                "convert it, e.g. str(key)"
            )
        if isinstance(key, int) and not _INT_MIN <= key <= _INT_MAX:
            raise ValueError(
                f"StreamId.key {key} does not fit in 64 bits (msgpack's limit); use str(key)"
            )

    def __str__(self) -> str:
        return f"{self.namespace}/{self.key}"

    def canonical(self) -> str:
        """A text form that tells ``1`` from ``"1"`` and namespaces apart unambiguously."""
        # The namespace length prefix makes the split point explicit: ("a/b", "c") and
        # ("a", "b/c") give different texts even though str() of both is "a/b/c".
        return f"{len(self.namespace)}:{self.namespace}/{_key_text(self.key)}"

    def stable_hash(self) -> int:
        """A 32-bit hash of ``canonical()``, identical in every process (unlike ``hash``).

        Computed on demand (one blake2b over a short text, well under a microsecond) rather
        than cached in a field, so that the id stays two fields on the wire.
        """
        return stable_hash32(self.canonical())


@dataclass(frozen=True, slots=True, order=True)
class QueueId:
    """One queue of a stream provider: the provider's name and the queue's index in it.

    Ordered by (provider, index). ``str()`` is ``"provider-index"``; as the index is a
    non-negative int, that text names exactly one queue.

    Raises:
        TypeError: ``provider`` is not a str or ``index`` is not an int.
        ValueError: ``provider`` is empty or ``index`` is negative.
    """

    provider: str
    index: int

    def __post_init__(self) -> None:
        if not isinstance(self.provider, str):
            raise TypeError(
                f"QueueId.provider must be a str, not {type(self.provider).__name__}; "
                "pass the stream provider's name"
            )
        if not self.provider:
            raise ValueError("QueueId.provider must not be empty; pass the provider's name")
        if isinstance(self.index, bool) or not isinstance(self.index, int):
            raise TypeError(f"QueueId.index must be an int, not {type(self.index).__name__}")
        if self.index < 0:
            raise ValueError(f"QueueId.index must be >= 0, got {self.index}")

    def __str__(self) -> str:
        return f"{self.provider}-{self.index}"
