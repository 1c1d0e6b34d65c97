"""The events of batch containers, as a delivery hands them to a consumer: each with its own
sequence token, and stand-ins for a container that cannot be decoded."""

from __future__ import annotations

from typing import Any

from orleanspy.streams.adapters.container import BatchContainer, UndecodableContainer
from orleanspy.streams.tokens import SequenceToken, event_tokens

__all__ = ["Event", "events_of", "placeholders"]

Event = tuple[Any, SequenceToken]


def events_of(containers: list[BatchContainer]) -> tuple[list[Event], bool]:
    """The events of ``containers``, each with its own token, and whether they are fresh
    (decoded for this delivery alone: no other subscription sees the same objects).
    Raises ``UndecodableContainer`` naming the first container that cannot be decoded."""
    decoded, fresh = BatchContainer.decode_many(containers)
    events: list[Event] = []
    append = events.append
    for index, container in enumerate(containers):
        values = decoded[index]
        n = container.count
        if type(values) not in (list, tuple) or len(values) != n:  # a corrupt payload
            try:
                container.values()
            except Exception as exc:
                raise UndecodableContainer(index, exc) from exc
            raise UndecodableContainer(index, ValueError("inconsistent payload"))
        if n == 1:  # one event: its token is the container's
            append((values[0], container.token))
        else:
            events += zip(values, event_tokens(container.token.sequence, n), strict=True)
    return events, fresh


def placeholders(container: BatchContainer) -> list[Event]:
    """Stand-ins for the events of a container that cannot be decoded: its tokens."""
    token = container.token
    return [(None, token.for_event(i)) for i in range(max(container.count, 1))]
