"""A stream event published under a request context: the event and the context, as they
travel through a queue to each consumer (``messaging.codec`` encodes it as an ext value).

``AsyncStream`` wraps an event so only when its publisher has a request context; a consumer's
delivery unwraps it and runs the handler under that context. An event published without
one travels as itself (nothing is added to it).
"""

from __future__ import annotations

from typing import Any, Final

import msgpack

__all__ = ["MAX_CONTEXT_BYTES", "ContextEvent", "valid_context"]

#: The largest encoded size of a request context, in bytes.
MAX_CONTEXT_BYTES: Final = 4096
_SCALARS: Final = frozenset({str, int, float, bool, bytes, type(None)})


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


def valid_context(context: Any) -> dict[str, Any] | None:
    """``context`` if it may travel as a request context (a dict of msgpack scalars under
    str keys, at most ``MAX_CONTEXT_BYTES`` encoded), else None: a decoded event keeps only a
    context its publisher's ``RequestContext.set`` could have made (bytes from a client are
    held to the same rules as its requests' contexts)."""
    if type(context) is not dict or not context:
        return None
    for key, value in context.items():
        if type(key) is not str or type(value) not in _SCALARS:
            return None
    if len(msgpack.packb(context, use_bin_type=True)) > MAX_CONTEXT_BYTES:
        return None
    return context
