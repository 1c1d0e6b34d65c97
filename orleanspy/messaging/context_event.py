"""A stream event published under a request context: the event and the context, as they
travel through a queue to each consumer (``messaging.codec`` encodes it as an ext value).

``AsyncStream`` wraps an event so only when its publisher has a request context; a consumer's
delivery unwraps it and runs the handler under that context. An event published without
one travels as itself (nothing is added to it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ContextEvent"]


class ContextEvent:
    """``item`` published under the request context ``context`` (a dict)."""

    __slots__ = ("context", "item")

    def __init__(self, item: Any, context: dict[str, Any] | None) -> None:
        self.item = item
        self.context = context

    def __repr__(self) -> str:
        return f"ContextEvent({self.item!r}, {self.context!r})"

    def __eq__(self, other: object) -> bool:
        return (type(other) is ContextEvent and other.item == self.item
                and other.context == self.context)

    __hash__ = None  # type: ignore[assignment]
