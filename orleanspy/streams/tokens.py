"""SequenceToken: the position of an event in its queue, totally ordered.

Data path: the adapter (2) assigns one token per batch container when it reads the queue; the
cache (4) orders and finds events by it; consumers (5) receive it with every event and can
resume a subscription from it. A container's token has ``index`` 0; its i-th event has
``token.for_event(i)``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SequenceToken", "container_token", "event_tokens"]


@dataclass(frozen=True, slots=True, order=True)
class SequenceToken:
    """(sequence, index), compared in that order: a total order over the events of a queue.

    ``sequence`` is assigned by the queue (strictly increasing per queue: one per batch
    container); ``index`` is the event's position inside its container. Tokens of different
    queues are not comparable in any meaningful way. Being a dataclass, a token travels
    through the msgpack ``Codec``.
    """

    sequence: int
    index: int = 0

    def for_event(self, i: int) -> SequenceToken:
        """The token of the ``i``-th event of the container at this token's sequence."""
        token = _new(SequenceToken)  # without the frozen dataclass's slow ``__init__``
        _set_sequence(token, self.sequence)
        _set_index(token, i)
        return token

    def __str__(self) -> str:
        return f"{self.sequence}.{self.index}"


_new = object.__new__
_set_sequence = SequenceToken.__dict__["sequence"].__set__  # the slots' descriptors
_set_index = SequenceToken.__dict__["index"].__set__


def container_token(sequence: int) -> SequenceToken:
    """``SequenceToken(sequence)``, built without the frozen dataclass's ``__init__`` (a third
    of the cost): adapters make one per container they read."""
    token = _new(SequenceToken)
    _set_sequence(token, sequence)
    _set_index(token, 0)
    return token


def event_tokens(sequence: int, count: int) -> list[SequenceToken]:
    """The tokens of the ``count`` events of the container at ``sequence`` (index 0 up),
    built as ``container_token`` does: a delivery makes one per event."""
    tokens: list[SequenceToken] = []
    append = tokens.append
    for i in range(count):
        token = _new(SequenceToken)
        _set_sequence(token, sequence)
        _set_index(token, i)
        append(token)
    return tokens
